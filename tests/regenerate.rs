//! Regenerating an answer (`Session::regenerate`, the AI SDK's `regenerate()`): the answer and
//! everything after it are retracted as an event, the log keeps them, the projection drops
//! them, and a new turn answers what remains. Also the streaming form of client tool results,
//! whose continuation's request id is known before the turn starts.

use futures::StreamExt;
use mull::core::{EntryPath, Event, Role, UIMessage};
use mull::engine::{ClientToolOutcome, EngineError, OutcomeStatus, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use mull::store::LogReader;
use serde_json::json;

mod support;
use support::scripted::Asker;
use support::test_log::TestLog;

fn ids(messages: &[UIMessage]) -> Vec<String> {
    messages.iter().map(|m| m.id.clone()).collect()
}

async fn ask(session: &mull::engine::Session, id: &str, text: &str) {
    let out = session
        .save_messages(vec![UIMessage::user(id, text)], TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
}

#[tokio::test]
async fn regenerating_the_last_answer_retracts_it_and_answers_again() {
    let model = ScriptedModel::builder("m")
        .step(|s| s.text("First answer."))
        .step(|s| s.text("Second answer."))
        .build();
    let env = TestLog::new();
    let session = env.open(&Asker::new(&model)).await;
    ask(&session, "u1", "hi").await;
    let first = session.read_state(|s| s.messages[1].id.clone());

    let stream = session.regenerate(None, TurnOptions::default()).unwrap();
    let request_id = stream.request_id.clone();
    let out = stream.finish().await.unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(out.request_id, request_id);

    let state = session.state();
    assert_eq!(state.messages.len(), 2);
    assert_eq!(state.messages[0].id, "u1");
    assert_eq!(state.messages[1].plain_text(), "Second answer.");
    assert_ne!(state.messages[1].id, first);
    // The model saw the question only, not the retracted answer.
    let requests = model.requests();
    assert_eq!(requests[1].messages.len(), 1);

    // The log keeps the first answer and records its retraction before the new turn.
    let events = env.events().await;
    let retracted = events
        .iter()
        .position(|e| {
            matches!(&e.event, Event::MessagesRetracted { request_id: r, message_ids }
                if r.as_deref() == Some(request_id.as_str()) && *message_ids == [first.clone()])
        })
        .expect("a messages_retracted event");
    let started = events
        .iter()
        .position(|e| {
            matches!(&e.event, Event::TurnStarted { request_id: r, entry: EntryPath::Regenerate, continuation: false, .. }
                if *r == request_id)
        })
        .expect("the regenerating turn");
    assert!(retracted < started);
    // The retraction is filed under the turn that wrote the retracted answer.
    let first_turn = state.turns[0].turn_id.clone();
    assert_eq!(events[retracted].turn_id, first_turn);
    assert!(events.iter().any(|e| matches!(&e.event,
        Event::AssistantMessageSaved { message, .. } if message.id == first)));

    // Reopening folds the same conversation from the log alone.
    let folded = LogReader::open(&env.path)
        .unwrap()
        .load_session("s1")
        .unwrap();
    assert_eq!(folded.messages, state.messages);
}

#[tokio::test]
async fn regenerating_an_earlier_answer_retracts_everything_after_it() {
    let model = ScriptedModel::builder("m")
        .step(|s| s.text("A1"))
        .step(|s| s.text("A2"))
        .step(|s| s.text("A1 again"))
        .build();
    let env = TestLog::new();
    let session = env.open(&Asker::new(&model)).await;
    ask(&session, "u1", "one").await;
    ask(&session, "u2", "two").await;
    let before = ids(&session.state().messages);
    assert_eq!(before.len(), 4);

    let out = session
        .regenerate(Some(&before[1]), TurnOptions::default())
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let state = session.state();
    assert_eq!(ids(&state.messages)[0], "u1");
    assert_eq!(state.messages.len(), 2);
    assert_eq!(state.messages[1].plain_text(), "A1 again");
    let retracted: Vec<Vec<String>> = env
        .events()
        .await
        .into_iter()
        .filter_map(|e| match e.event {
            Event::MessagesRetracted { message_ids, .. } => Some(message_ids),
            _ => None,
        })
        .collect();
    assert_eq!(retracted, [before[1..].to_vec()]);
}

#[tokio::test]
async fn regenerating_from_a_user_message_keeps_it_and_drops_what_follows() {
    let model = ScriptedModel::builder("m")
        .step(|s| s.text("A1"))
        .step(|s| s.text("A1 again"))
        .build();
    let env = TestLog::new();
    let session = env.open(&Asker::new(&model)).await;
    ask(&session, "u1", "one").await;
    session
        .regenerate(Some("u1"), TurnOptions::default())
        .unwrap()
        .finish()
        .await
        .unwrap();
    let state = session.state();
    assert_eq!(ids(&state.messages)[0], "u1");
    assert_eq!(state.messages[1].role, Role::Assistant);
    assert_eq!(state.messages[1].plain_text(), "A1 again");
}

#[tokio::test]
async fn an_unknown_message_is_refused_and_nothing_is_written() {
    let model = ScriptedModel::builder("m").step(|s| s.text("A1")).build();
    let env = TestLog::new();
    let session = env.open(&Asker::new(&model)).await;
    ask(&session, "u1", "one").await;
    let before = env.events().await.len();
    let refused = session.regenerate(Some("nope"), TurnOptions::default());
    assert!(matches!(
        refused,
        Err(EngineError::UnknownMessage { ref message_id, .. }) if message_id == "nope"
    ));
    assert_eq!(env.events().await.len(), before);
}

#[tokio::test]
async fn a_retracted_answer_with_a_pending_client_call_is_no_longer_awaited() {
    let model = ScriptedModel::builder("m")
        .step(|s| s.tool_call("call_1", "ask", json!({})))
        .step(|s| s.text("Plain answer."))
        .build();
    let env = TestLog::new();
    let session = env.open(&Asker::new(&model)).await;
    ask(&session, "u1", "one").await;
    assert_eq!(session.state().pending_client_calls.len(), 1);
    let mut stream = session.regenerate(None, TurnOptions::default()).unwrap();
    let mut parts = 0;
    while stream.next().await.is_some() {
        parts += 1;
    }
    assert!(parts > 0, "the regenerated turn streams its parts");
    assert_eq!(
        stream.finish().await.unwrap().status,
        OutcomeStatus::Completed
    );
    let state = session.state();
    assert!(state.pending_client_calls.is_empty());
    assert_eq!(state.messages[1].plain_text(), "Plain answer.");
}

#[tokio::test]
async fn a_streaming_tool_result_names_its_continuation_before_it_starts() {
    let model = ScriptedModel::builder("m")
        .step(|s| s.tool_call("call_1", "ask", json!({})))
        .step(|s| s.text("Thanks."))
        .build();
    let env = TestLog::new();
    let session = env.open(&Asker::new(&model)).await;
    ask(&session, "u1", "one").await;
    let stream = session
        .add_tool_result_streaming("call_1", ClientToolOutcome::Output(json!("yes")))
        .await
        .unwrap()
        .expect("the last pending call starts a continuation");
    let request_id = stream.request_id.clone();
    let out = stream.finish().await.unwrap();
    assert_eq!(out.request_id, request_id);
    assert_eq!(out.status, OutcomeStatus::Completed);
    let continuation = env.events().await.into_iter().find_map(|e| match e.event {
        Event::TurnStarted {
            request_id,
            entry: EntryPath::AutoContinue,
            continuation: true,
            ..
        } => Some(request_id),
        _ => None,
    });
    assert_eq!(continuation, Some(request_id));

    // An answer to a call nobody waits for records the result and starts nothing.
    let none = session
        .add_tool_result_streaming("call_1", ClientToolOutcome::Error(None))
        .await
        .unwrap();
    assert!(none.is_none());
}
