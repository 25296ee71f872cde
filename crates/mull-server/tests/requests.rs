//! How the server follows requests: a regeneration, a turn retried after context overflow, a
//! client tool continuation with an unrelated turn queued ahead of it, and idle sessions
//! evicted and re-opened from the log with the same state.

mod harness;

use std::time::{Duration, Instant};

use harness::*;
use mull_core::{EntryPath, Event};
use serde_json::{json, Value};

fn text_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter(|e| e["type"] == "text-delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

async fn post(server: &Server, body: &Value) -> (Vec<Value>, bool) {
    let response = server.post_chat(body).await;
    assert_eq!(response.status(), 200, "{body}");
    read_sse(response, usize::MAX).await
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

fn assistant(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "assistant", "parts": [{"type": "text", "text": text}]})
}

#[tokio::test]
async fn regenerate_message_retracts_the_answer_and_streams_a_new_one() {
    let server = server().await;
    let (first, done) = post(&server, &user_request("regen-1", "hi")).await;
    assert!(done);
    assert_eq!(text_of(&first), "First answer.");
    let first_id = first[0]["messageId"]
        .as_str()
        .expect("message id")
        .to_owned();

    // What the AI SDK's `regenerate()` sends: the history without the answer, and its id.
    let (second, done) = post(
        &server,
        &json!({
            "id": "regen-1",
            "trigger": "regenerate-message",
            "messageId": first_id,
            "messages": [user("u-regen-1", "hi")],
        }),
    )
    .await;
    assert!(done);
    assert_eq!(text_of(&second), "Second answer.");
    assert_eq!(second.last().expect("finish")["type"], "finish");
    let second_id = second[0]["messageId"].as_str().expect("message id");
    assert_ne!(second_id, first_id);

    // The projection shows the question and the new answer; the log keeps the first one.
    let session = server.state.session("regen-1").await.expect("session");
    let messages = session.read_state(|s| s.messages.clone());
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["u-regen-1", second_id]);
    let events = session_events(&server.log, "regen-1").await;
    assert!(events.iter().any(|e| matches!(&e.event,
        Event::MessagesRetracted { message_ids, .. } if *message_ids == [first_id.clone()])));
    assert!(events.iter().any(|e| matches!(&e.event,
        Event::AssistantMessageSaved { message, .. } if message.id == first_id)));
    assert!(events.iter().any(|e| matches!(
        &e.event,
        Event::TurnStarted {
            entry: EntryPath::Regenerate,
            ..
        }
    )));
    assert_eq!(
        turns_from_log(&server.log, "regen-1").await,
        vec![first, second]
    );
}

#[tokio::test]
async fn regenerating_an_unknown_message_is_a_bad_request_that_writes_nothing() {
    let server = server().await;
    post(&server, &user_request("regen-2", "hi")).await;
    let before = session_events(&server.log, "regen-2").await.len();
    let response = server
        .post_chat(&json!({"id": "regen-2", "trigger": "regenerate-message",
                      "messageId": "nope", "messages": []}))
        .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "bad_request");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("nope"));
    assert_eq!(session_events(&server.log, "regen-2").await.len(), before);
}

#[tokio::test]
async fn a_turn_retried_after_context_overflow_streams_the_retried_answer() {
    let server = server().await;
    let chat = "overflow-1";
    let (a0, _) = post(
        &server,
        &json!({"id": chat, "messages": [user("u0", "one")]}),
    )
    .await;
    assert_eq!(text_of(&a0), "A0");
    let a0_id = a0[0]["messageId"].as_str().expect("id").to_owned();
    let (a1, _) = post(
        &server,
        &json!({"id": chat, "messages": [user("u0", "one"), assistant(&a0_id, "A0"), user("u1", "two")]}),
    )
    .await;
    assert_eq!(text_of(&a1), "A1");
    let a1_id = a1[0]["messageId"].as_str().expect("id").to_owned();

    let (third, done) = post(
        &server,
        &json!({"id": chat, "messages": [
            user("u0", "one"), assistant(&a0_id, "A0"),
            user("u1", "two"), assistant(&a1_id, "A1"),
            user("u2", "three"),
        ]}),
    )
    .await;
    assert!(done);
    let kinds = types(&third);
    assert!(
        !kinds.contains(&"error"),
        "the overflow is not the answer: {kinds:?}"
    );
    assert_eq!(text_of(&third), "Recovered.");
    assert_eq!(third.last().expect("finish")["type"], "finish");
    // Two attempts: the second `start` names the message that was persisted.
    let starts: Vec<&str> = third
        .iter()
        .filter(|e| e["type"] == "start")
        .filter_map(|e| e["messageId"].as_str())
        .collect();
    assert_eq!(starts.len(), 2, "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "start-step").count(),
        1,
        "the refused attempt leaves no empty step: {kinds:?}"
    );
    let events = session_events(&server.log, chat).await;
    let saved = events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::AssistantMessageSaved { message, .. } => Some(message.id.clone()),
            _ => None,
        })
        .expect("the retry's answer is saved");
    assert_eq!(starts[1], saved);
    let attempts: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnStarted { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [0, 0, 0, 1]);
}

#[tokio::test]
async fn a_retried_request_mapped_from_the_log_is_what_the_live_client_saw() {
    let server = server().await;
    let chat = "overflow-2";
    let (a0, _) = post(
        &server,
        &json!({"id": chat, "messages": [user("u0", "one")]}),
    )
    .await;
    let a0_id = a0[0]["messageId"].as_str().expect("id").to_owned();
    let (a1, _) = post(
        &server,
        &json!({"id": chat, "messages": [user("u0", "one"), assistant(&a0_id, "A0"), user("u1", "two")]}),
    )
    .await;
    let a1_id = a1[0]["messageId"].as_str().expect("id").to_owned();
    let body = json!({"id": chat, "messages": [
        user("u0", "one"), assistant(&a0_id, "A0"),
        user("u1", "two"), assistant(&a1_id, "A1"), user("u2", "three"),
    ]});
    let (live, _) = post(&server, &body).await;
    // The whole request, replayed from the log by a resume, is what the live client saw.
    let chunks: Vec<Value> = {
        let events = session_events(&server.log, chat).await;
        let request = events
            .iter()
            .rev()
            .find_map(|e| match &e.event {
                Event::TurnStarted { request_id, .. } => Some(request_id.clone()),
                _ => None,
            })
            .expect("a request");
        let mut mapper = mull_server::ui_stream::UiStreamMapper::new();
        let mut follows = false;
        let mut out = Vec::new();
        for env in &events {
            if let Event::TurnStarted { request_id, .. } = &env.event {
                follows = *request_id == request;
            }
            if follows {
                out.extend(mapper.map(env));
            }
        }
        out.iter()
            .map(|c| serde_json::to_value(c).expect("chunk"))
            .collect()
    };
    assert_eq!(live, chunks);
}

#[tokio::test]
async fn a_tool_result_continuation_is_followed_by_its_request_id_not_the_next_turn() {
    let server = server().await;
    let chat = "race-1";
    let (first, _) = post(
        &server,
        &json!({"id": chat, "messages": [user("u0", "where am I?")]}),
    )
    .await;
    let call_message = first[0]["messageId"].as_str().expect("id").to_owned();
    let pending = json!({"id": call_message, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-get_location", "toolCallId": "call_location",
         "state": "input-available", "input": {}}
    ]});
    let answered = json!({"id": call_message, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-get_location", "toolCallId": "call_location",
         "state": "output-available", "input": {}, "output": {"city": "Berlin"}}
    ]});
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/chat", server.addr);
    // A slow unrelated turn holds the session; another unrelated one queues behind it.
    let slow = client
        .post(&url)
        .json(&json!({"id": chat, "messages": [user("u0", "where am I?"), pending.clone(), user("u1", "slow")]}))
        .send()
        .await
        .expect("post");
    let queued = client
        .post(&url)
        .json(&json!({"id": chat, "messages": [user("u0", "where am I?"), pending, user("u2", "other")]}))
        .send()
        .await
        .expect("post");
    // Let the queued turn take its place in the line before the tool result arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (continuation, done) = post(
        &server,
        &json!({"id": chat, "messages": [user("u0", "where am I?"), answered]}),
    )
    .await;
    assert!(done);
    assert_eq!(text_of(&continuation), "You are in Berlin.");
    assert_eq!(
        continuation[0],
        json!({"type": "start"}),
        "a continuation names no message"
    );
    let (slow, _) = read_sse(slow, usize::MAX).await;
    let (queued, _) = read_sse(queued, usize::MAX).await;
    assert_eq!(text_of(&slow), "Slow.");
    assert_eq!(text_of(&queued), "Unrelated.");

    // The unrelated turn did start after the tool result was sent and before the continuation:
    // a stream that followed "the next turn" would have shown it.
    let events = session_events(&server.log, chat).await;
    let position = |pred: &dyn Fn(&Event) -> bool| {
        events
            .iter()
            .position(|e| pred(&e.event))
            .expect("event present")
    };
    let result_at = position(&|e| matches!(e, Event::ClientToolResult { .. }));
    let unrelated_at = position(
        &|e| matches!(e, Event::UserMessagesSaved { messages, .. } if messages[0].id == "u2"),
    );
    let continuation_at = position(&|e| {
        matches!(
            e,
            Event::TurnStarted {
                entry: EntryPath::AutoContinue,
                ..
            }
        )
    });
    let unrelated_started = events[unrelated_at..]
        .iter()
        .position(|e| matches!(e.event, Event::TurnStarted { .. }))
        .map(|i| i + unrelated_at)
        .expect("the unrelated turn started");
    assert!(result_at < unrelated_started && unrelated_started < continuation_at);
}

/// Waits until `chat` is no longer open, or panics after a few seconds.
async fn wait_evicted(server: &Server, chat: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.state.is_open(chat) {
        assert!(Instant::now() < deadline, "{chat} was never evicted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_idle_session_is_evicted_and_reopens_from_the_log_with_the_same_state() {
    let server = server_with(None, |s| s.with_idle_ttl(Duration::from_millis(100))).await;
    let (first, _) = post(&server, &user_request("client-9", "where am I?")).await;
    let before = {
        let session = server.state.session("client-9").await.expect("session");
        session.state()
    };
    assert_eq!(before.pending_client_calls.len(), 1);
    wait_evicted(&server, "client-9").await;

    // The next request re-opens it from the log: the same conversation, turns, pending call.
    let call_message = first[0]["messageId"].as_str().expect("id");
    let session = server.state.session("client-9").await.expect("session");
    let mut after = session.state();
    assert!(after.last_seq > before.last_seq, "the reopen is recorded");
    after.last_seq = before.last_seq;
    after.last_at = before.last_at;
    assert_eq!(after, before);
    drop(session);
    let (second, done) = post(
        &server,
        &json!({"id": "client-9", "messages": [
            user("u-client-9", "where am I?"),
            {"id": call_message, "role": "assistant", "parts": [
                {"type": "tool-get_location", "toolCallId": "call_location",
                 "state": "output-available", "input": {}, "output": {"city": "Berlin"}}]}
        ]}),
    )
    .await;
    assert!(done);
    assert_eq!(text_of(&second), "You are in Berlin.");
}

#[tokio::test]
async fn a_session_with_an_open_stream_is_not_evicted() {
    let server = server_with(None, |s| s.with_idle_ttl(Duration::from_millis(30))).await;
    let response = server.post_chat(&user_request("slow-9", "go")).await;
    let (partial, _) = read_sse(response, 3).await;
    assert_eq!(partial[0]["type"], "start");
    // Many TTLs pass while the turn runs.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(server.state.is_open("slow-9"));
    assert_eq!(server.state.evict_idle(), 0);
    wait_evicted(&server, "slow-9").await;
}

#[tokio::test]
async fn beyond_the_cap_the_longest_idle_session_goes_first() {
    let server = server_with(None, |s| s.with_max_open_sessions(2)).await;
    for chat in ["ok-1", "ok-2", "ok-3"] {
        post(&server, &user_request(chat, "hi")).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Opening a fourth chat goes over the cap: the oldest idle ones make room.
    post(&server, &user_request("ok-4", "hi")).await;
    assert!(
        server.state.open_sessions() <= 2,
        "{}",
        server.state.open_sessions()
    );
    assert!(!server.state.is_open("ok-1"));
    assert!(server.state.is_open("ok-4"));
}
