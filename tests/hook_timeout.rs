//! `Agent::hook_timeout` bounds every async hook: a hook that never returns is ended, logged as
//! `hook_failed` with `timed_out: true`, and then counts as that hook's failure (a hung
//! `before_turn` fails the turn at stage `turn`, a hung `before_tool_call` is a tool error, a
//! hung observer is only logged). No turn timeout is set, so nothing else could end the hung
//! hook.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mull::core::{DecisionAction, ErrorStage, Event, HookName};
use mull::engine::OutcomeStatus;
use mull::providers::scripted::ScriptedModel;
use serde_json::json;
use support::events::{first_decision, first_failed_stage, first_tool_finish, hook_failures};
use support::faults::{Fault, FaultyAgent, Trial};

/// A turn whose `hung` hook never returns, with a 50 ms hook timeout, then a clean turn.
async fn trial(hung: HookName) -> Trial {
    let mut script = ScriptedModel::builder("scripted-1");
    if hung == HookName::BeforeToolCall {
        script = script.step(|s| s.tool_call("call_1", "lookup", json!({"q": "rust"})));
    }
    let model = Arc::new(
        script
            .step(|s| s.text("First."))
            .step(|s| s.text("Second."))
            .build(),
    );
    let agent =
        FaultyAgent::new(model, hung, Fault::Hang).with_hook_timeout(Duration::from_millis(50));
    // The guard only keeps a broken build from hanging the suite; the hook timeout ends the
    // hang long before it.
    Trial::run(agent, "sess_h", "hi", Duration::from_secs(30), |_| {}).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_before_turn_times_out_and_fails_the_turn_at_stage_turn() {
    let t = trial(HookName::BeforeTurn).await;
    assert_eq!(t.first, OutcomeStatus::Error, "{}", t.first_error);
    let failures = hook_failures(&t.events);
    assert_eq!(failures.len(), 1, "{failures:?}");
    let failure = &failures[0];
    assert_eq!(failure.hook, HookName::BeforeTurn);
    assert!(failure.timed_out && !failure.panicked, "{failures:?}");
    assert!(
        failure.error.contains("timed out after 50 ms"),
        "{}",
        failure.error
    );
    assert_eq!(first_failed_stage(&t.events), Some(ErrorStage::Turn));
    let model_ran = t
        .events
        .iter()
        .take_while(|e| !matches!(e, Event::TurnFailed { .. }))
        .any(|e| matches!(e, Event::Chunk { .. }));
    assert!(!model_ran, "the model ran although before_turn failed");
    assert_eq!(
        t.second,
        OutcomeStatus::Completed,
        "the next turn must work"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_on_chunk_times_out_and_the_turn_goes_on() {
    let t = trial(HookName::OnChunk).await;
    assert_eq!(t.first, OutcomeStatus::Completed, "{}", t.first_error);
    let failures = hook_failures(&t.events);
    assert!(!failures.is_empty());
    assert!(
        failures
            .iter()
            .all(|f| f.hook == HookName::OnChunk && f.timed_out && !f.panicked),
        "{failures:?}"
    );
    assert!(
        !t.events
            .iter()
            .any(|e| matches!(e, Event::TurnFailed { .. })),
        "an observer's timeout must not fail the turn"
    );
    let text: String = t
        .events
        .iter()
        .filter_map(|e| match e {
            Event::AssistantMessageSaved { message, .. } => Some(format!("{message:?}")),
            _ => None,
        })
        .collect();
    assert!(text.contains("First."), "the first answer was lost: {text}");
    assert_eq!(
        t.second,
        OutcomeStatus::Completed,
        "the next turn must work"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_before_tool_call_times_out_as_a_tool_error_and_execute_never_runs() {
    let t = trial(HookName::BeforeToolCall).await;
    assert_eq!(t.first, OutcomeStatus::Completed, "{}", t.first_error);
    let failures = hook_failures(&t.events);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].hook, HookName::BeforeToolCall);
    assert!(failures[0].timed_out, "{failures:?}");
    assert_eq!(first_decision(&t.events), Some(DecisionAction::HookFailed));
    let finished = first_tool_finish(&t.events).map(|(success, _)| success);
    assert_eq!(finished, Some(false), "the call must end as a tool error");
    assert_eq!(
        t.executions, 0,
        "execute ran although before_tool_call failed"
    );
    assert_eq!(
        t.second,
        OutcomeStatus::Completed,
        "the next turn must work"
    );
}
