//! The AI SDK's approval protocol over SSE, from Rust (the Node e2e test drives the same with
//! the `ai` package's own client): a `book` call streams `tool-approval-request`; the client's
//! next request carries `approval` objects on its tool parts; the continuation streams the
//! approved call's output, the denied call's `tool-output-denied`, then the answer. An answer
//! the session no longer waits for is refused with 400.

mod harness;

use harness::{read_sse, server, types, user_request};
use serde_json::{json, Value};

#[tokio::test]
async fn approvals_round_trip_over_sse() {
    let server = server().await;
    let url = format!("http://{}/api/chat", server.addr);
    let client = reqwest::Client::new();
    let response = client
        .post(&url)
        .json(&user_request("approve-rs", "book both"))
        .send()
        .await
        .expect("posts");
    assert_eq!(response.status(), 200);
    let (first, done) = read_sse(response, 100).await;
    assert!(done);
    let asked: Vec<&Value> = first
        .iter()
        .filter(|c| c["type"] == "tool-approval-request")
        .collect();
    assert_eq!(asked.len(), 2, "{first:?}");
    assert_eq!(asked[0]["toolCallId"], "call_ritz");
    let message_id = first[0]["messageId"]
        .as_str()
        .expect("start names the message");
    let approval = |i: usize| asked[i]["approvalId"].as_str().expect("an id").to_owned();
    // What `addToolApprovalResponse` leaves on the parts, as the client resends them.
    let messages = json!([
        {"id": "u-approve-rs", "role": "user", "parts": [{"type": "text", "text": "book both"}]},
        {"id": message_id, "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-book", "toolCallId": "call_ritz", "state": "approval-responded",
             "input": {"hotel": "Ritz"}, "approval": {"id": approval(0), "approved": true}},
            {"type": "tool-book", "toolCallId": "call_savoy", "state": "approval-responded",
             "input": {"hotel": "Savoy"},
             "approval": {"id": approval(1), "approved": false, "reason": "Too pricey."}}
        ]}
    ]);
    let body = json!({"id": "approve-rs", "trigger": "submit-message",
                      "messageId": message_id, "messages": messages});
    let response = client.post(&url).json(&body).send().await.expect("posts");
    assert_eq!(response.status(), 200);
    let (second, done) = read_sse(response, 100).await;
    assert!(done);
    assert_eq!(
        second[0],
        json!({"type": "start"}),
        "a continuation names no message"
    );
    assert!(second.contains(&json!({"type": "tool-output-available",
                                    "toolCallId": "call_ritz", "output": {"booked": "Ritz"}})));
    assert!(second.contains(&json!({"type": "tool-output-denied", "toolCallId": "call_savoy"})));
    assert!(types(&second).contains(&"text-delta"));
    assert_eq!(second.last().expect("chunks")["type"], "finish");

    // The same answers again: nothing waits for them.
    let again = client.post(&url).json(&body).send().await.expect("posts");
    assert_eq!(again.status(), 400);
    server.shut_down().await;
}

/// An answer posted for a chat the log does not hold is refused once, with the reason on its
/// row, and stamped by the clock that chat's session would run on (the server's session
/// options), so a deterministic server writes the same inbox every time.
#[tokio::test]
async fn an_inbox_answer_for_an_unknown_chat_is_refused_on_the_sessions_clock() {
    use std::sync::Arc;

    use mull_core::{Clock, FixedClock};
    use mull_store::{Inbox, InboxMessage};

    let epoch = FixedClock::at_fixture_epoch().now();
    let server = harness::server_with(None, |state| {
        state.with_session_options(Arc::new(|id: &str| {
            mull_engine::SessionOptions::new(id)
                .with_clock(Arc::new(FixedClock::at_fixture_epoch()))
        }))
    })
    .await;
    let inbox = Inbox::open(server.log.path()).expect("inbox");
    let answer = InboxMessage::ApprovalAnswer {
        approval_id: "approval_1".into(),
        approved: true,
        reason: None,
        by: None,
    };
    let posted = chrono::Utc::now();
    let id = inbox.post("ghost", &answer, posted).expect("posts");

    let acted = mull_server::inbox::take_inbox(&server.state, &inbox)
        .await
        .expect("sweeps");
    assert_eq!(
        acted, 0,
        "nothing is acted on for a chat that does not exist"
    );
    let row = inbox.get(id).expect("reads").expect("row");
    assert_eq!(row.outcome.as_deref(), Some("refused: no chat \"ghost\""));
    assert_eq!(row.taken, Some(epoch), "taken on the session's clock");
    assert!(inbox.waiting(None).expect("reads").is_empty());
    // A second sweep finds nothing left to refuse.
    let again = mull_server::inbox::take_inbox(&server.state, &inbox)
        .await
        .expect("sweeps");
    assert_eq!(again, 0);
    assert_eq!(inbox.get(id).expect("reads").expect("row"), row);
    server.shut_down().await;
}
