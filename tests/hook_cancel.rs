//! A hung hook cannot hold a turn: with Think's default `hook_timeout() = None`, cancelling
//! the turn's signal while `before_turn`, `on_chunk`, `before_tool_call` or `on_step_finish`
//! never returns ends the turn as `aborted` (the seed's abort: the partial message kept,
//! `on_chat_error` not called), releases the turn lock so a queued `save_messages` runs, and
//! records the cancellation as a `cancellation_requested` event like `cancel_chat` does.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mull::core::{Event, HookName, Role, TurnStatus, UIMessage, UIPart};
use mull::engine::{OutcomeStatus, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;
use support::events::hook_failures;
use support::faults::{Fault, FaultyAgent};
use support::test_log::TestLog;
use tokio_util::sync::CancellationToken;

/// Generous: only a broken build waits this long.
const BOUND: Duration = Duration::from_secs(30);

struct Cancelled {
    first_request: String,
    first: OutcomeStatus,
    queued: OutcomeStatus,
    events: Vec<Event>,
}

/// Runs a turn whose `hung` hook never returns, queues a second `save_messages` behind it,
/// cancels the first turn's signal once the hook hangs, and waits for both.
async fn cancel_while_hung(hung: HookName) -> Cancelled {
    let mut script = ScriptedModel::builder("scripted-1");
    if hung == HookName::BeforeToolCall {
        script = script.step(|s| s.tool_call("call_1", "lookup", json!({"q": "rust"})));
    }
    let model = Arc::new(
        script
            .step(|s| s.text("First answer."))
            .step(|s| s.text("Second answer."))
            .build(),
    );
    let log = TestLog::for_session("sess_cancel");
    let agent = Arc::new(FaultyAgent::new(model, hung, Fault::Hang));
    let session = log.open(&agent).await;
    let signal = CancellationToken::new();
    let first = tokio::spawn({
        let session = session.clone();
        let signal = signal.clone();
        async move {
            session
                .save_messages(
                    vec![UIMessage::user("u1", "hi")],
                    TurnOptions {
                        signal: Some(signal),
                        ..TurnOptions::default()
                    },
                )
                .await
        }
    });
    tokio::time::timeout(BOUND, agent.hanging())
        .await
        .expect("the hook started to hang");
    // The hung call stays hung; only the queued turn's hooks behave.
    agent.disarm();
    let queued = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .save_messages(vec![UIMessage::user("u2", "again")], TurnOptions::default())
                .await
        }
    });
    signal.cancel();
    let first = tokio::time::timeout(BOUND, first)
        .await
        .expect("the cancelled turn ended although its hook hangs")
        .expect("the turn task did not panic")
        .expect("the engine survived");
    let queued = tokio::time::timeout(BOUND, queued)
        .await
        .expect("the queued save_messages was not stuck behind the turn lock")
        .expect("the queued task did not panic")
        .expect("the engine survived");
    Cancelled {
        first_request: first.request_id,
        first: first.status,
        queued: queued.status,
        events: log.bare_events().await,
    }
}

/// What every cancelled trial shows: the abort, recorded before the turn's end, the hung hook
/// cut off, no failure reported, the next turn fine.
fn assert_aborted(c: &Cancelled, hung: HookName) {
    assert_eq!(c.first, OutcomeStatus::Aborted);
    assert_eq!(c.queued, OutcomeStatus::Completed, "the next turn works");
    let cancel_at = c
        .events
        .iter()
        .position(|e| {
            matches!(e, Event::CancellationRequested { request_id: Some(r), reason }
                if *r == c.first_request && reason == "signal")
        })
        .unwrap_or_else(|| panic!("no cancellation_requested for the signal: {:#?}", c.events));
    let end_at = c
        .events
        .iter()
        .position(|e| {
            matches!(e, Event::TurnFinished { request_id, status: TurnStatus::Aborted, .. }
                if *request_id == c.first_request)
        })
        .expect("the first turn finished aborted");
    assert!(cancel_at < end_at, "the cancellation is recorded first");
    let failures = hook_failures(&c.events);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].hook, hung);
    assert!(
        !failures[0].timed_out && failures[0].error.contains("aborted"),
        "{failures:?}"
    );
    assert!(
        !c.events
            .iter()
            .any(|e| matches!(e, Event::TurnFailed { .. })),
        "an abort is not a failure: on_chat_error is not called"
    );
    let cancels = c
        .events
        .iter()
        .filter(|e| matches!(e, Event::CancellationRequested { .. }))
        .count();
    assert_eq!(cancels, 1, "one cancellation, recorded once");
}

/// The assistant message the first turn persisted, if any.
fn partial(c: &Cancelled) -> Option<UIMessage> {
    c.events.iter().find_map(|e| match e {
        Event::AssistantMessageSaved {
            request_id,
            message,
        } if *request_id == c.first_request => Some(message.clone()),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_hung_before_turn_aborts_the_turn_and_keeps_the_users_message() {
    let c = cancel_while_hung(HookName::BeforeTurn).await;
    assert_aborted(&c, HookName::BeforeTurn);
    assert!(partial(&c).is_none(), "the model never ran: no parts");
    assert!(c.events.iter().any(|e| matches!(e,
        Event::UserMessagesSaved { request_id: Some(r), messages }
            if *r == c.first_request && messages[0].role == Role::User)));
    let model_ran = c
        .events
        .iter()
        .take_while(|e| !matches!(e, Event::TurnFinished { .. }))
        .any(|e| matches!(e, Event::Chunk { .. }));
    assert!(
        !model_ran,
        "the model ran although before_turn never answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_hung_on_chunk_aborts_the_turn_with_its_partial_message() {
    let c = cancel_while_hung(HookName::OnChunk).await;
    assert_aborted(&c, HookName::OnChunk);
    let message = partial(&c).expect("the partial message is kept");
    assert!(
        message
            .parts
            .iter()
            .any(|p| matches!(p, UIPart::Text { text, .. } if !text.is_empty())),
        "{message:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_hung_before_tool_call_aborts_the_turn_without_running_the_tool() {
    let c = cancel_while_hung(HookName::BeforeToolCall).await;
    assert_aborted(&c, HookName::BeforeToolCall);
    let message = partial(&c).expect("the partial message (the tool call) is kept");
    assert!(
        message.parts.iter().any(|p| matches!(p, UIPart::Tool(_))),
        "{message:?}"
    );
    let second_step = c
        .events
        .iter()
        .any(|e| matches!(e, Event::StepStarted { step: 1 }));
    assert!(!second_step, "the aborted turn took no further step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_hung_on_step_finish_aborts_the_turn_with_its_step() {
    let c = cancel_while_hung(HookName::OnStepFinish).await;
    assert_aborted(&c, HookName::OnStepFinish);
    let message = partial(&c).expect("the step's text is kept");
    assert!(
        message
            .parts
            .iter()
            .any(|p| matches!(p, UIPart::Text { .. })),
        "{message:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_cancelled_signal_is_recorded_before_the_turn_ends() {
    let model = Arc::new(
        ScriptedModel::builder("scripted-1")
            .step(|s| s.text("never"))
            .build(),
    );
    let log = TestLog::for_session("sess_pre");
    let agent = Arc::new(FaultyAgent::new(model, HookName::OnChunk, Fault::Hang));
    agent.disarm();
    let session = log.open(&agent).await;
    let signal = CancellationToken::new();
    signal.cancel();
    let outcome = session
        .save_messages(
            vec![UIMessage::user("u1", "hi")],
            TurnOptions {
                signal: Some(signal),
                ..TurnOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Aborted);
    let kinds = log.kinds().await;
    let requested = kinds.iter().position(|k| k == "turn_requested").unwrap();
    let cancelled = kinds
        .iter()
        .position(|k| k == "cancellation_requested")
        .expect("the pre-cancelled signal is recorded");
    let saved = kinds
        .iter()
        .position(|k| k == "user_messages_saved")
        .unwrap();
    assert!(requested < cancelled && cancelled < saved, "{kinds:?}");
}
