//! Hooks that misbehave: a hook that panics, and a hook that never returns. The turn must end
//! with an error that says which hook and why (or go on, where the hook is only an observer),
//! the process must survive, the next turn must work, and nothing flushed may be lost.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mull::core::{DecisionAction, ErrorStage, Event, HookName};
use mull::engine::OutcomeStatus;
use mull::providers::scripted::ScriptedModel;
use serde_json::json;
use support::events::{first_decision, hook_failures};
use support::faults::{Fault, FaultyAgent, Trial};

/// Which hook misbehaves, how, and (for hangs) the turn timeout that must end it.
#[derive(Clone, Copy)]
struct Plan {
    hook: HookName,
    fault: Fault,
    turn_timeout: Option<Duration>,
}

async fn trial(plan: Plan) -> Trial {
    let model = Arc::new(
        ScriptedModel::builder("scripted-1")
            .step(|s| s.tool_call("call_1", "lookup", json!({"q": "rust"})))
            .step(|s| s.text("Found it."))
            .build(),
    );
    let agent = FaultyAgent::new(model, plan.hook, plan.fault).with_turn_timeout(plan.turn_timeout);
    Trial::run(agent, "sess_f", "look", Duration::from_secs(20), |model| {
        // The second turn needs a step of its own (a fault may have left earlier steps unused,
        // which it then consumes first; either way it ends in text).
        model.push_step(|s| s.text("Second turn."));
    })
    .await
}

fn hook_failed(events: &[Event]) -> Option<(HookName, bool, String)> {
    hook_failures(events)
        .into_iter()
        .next()
        .map(|f| (f.hook, f.panicked, f.error))
}

fn assert_first_turn_kept(t: &Trial) {
    assert!(t.flushed_before >= 1 && t.events.len() as u64 >= t.flushed_before);
    assert!(
        t.events.iter().any(
            |e| matches!(e, Event::UserMessagesSaved { messages, .. } if messages[0].id == "u1")
        ),
        "the first user message was lost"
    );
    let finished = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::TurnFinished { .. }))
        .count();
    assert_eq!(finished, 2, "both turns must be finished in the log");
    assert_eq!(
        t.second,
        OutcomeStatus::Completed,
        "the next turn must work"
    );
}

fn plan(hook: HookName, fault: Fault) -> Plan {
    Plan {
        hook,
        fault,
        turn_timeout: (fault == Fault::Hang).then(|| Duration::from_millis(300)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_observer_hook_is_logged_and_the_turn_goes_on() {
    let t = trial(plan(HookName::OnChunk, Fault::Panic)).await;
    assert_eq!(t.first, OutcomeStatus::Completed, "{}", t.first_error);
    let (hook, panicked, error) = hook_failed(&t.events).expect("a hook_failed event");
    assert_eq!(hook, HookName::OnChunk);
    assert!(panicked && error.contains("exploded"), "{error}");
    assert_eq!(t.executions, 1);
    assert_first_turn_kept(&t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_before_tool_call_is_a_tool_error_and_execute_never_runs() {
    let t = trial(plan(HookName::BeforeToolCall, Fault::Panic)).await;
    assert_eq!(t.first, OutcomeStatus::Completed, "{}", t.first_error);
    let (hook, panicked, error) = hook_failed(&t.events).expect("a hook_failed event");
    assert_eq!(hook, HookName::BeforeToolCall);
    assert!(panicked && error.contains("exploded"), "{error}");
    assert_eq!(first_decision(&t.events), Some(DecisionAction::HookFailed));
    assert_eq!(
        t.executions, 0,
        "execute ran after its decision hook panicked"
    );
    assert_first_turn_kept(&t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_before_turn_fails_the_turn_at_stage_turn_keeping_the_user_message() {
    let t = trial(plan(HookName::BeforeTurn, Fault::Panic)).await;
    assert_eq!(t.first, OutcomeStatus::Error);
    assert!(t.first_error.contains("exploded"), "{}", t.first_error);
    let stage = t.events.iter().find_map(|e| match e {
        Event::TurnFailed {
            stage,
            messages_persisted,
            ..
        } => Some((*stage, *messages_persisted)),
        _ => None,
    });
    assert_eq!(stage, Some((ErrorStage::Turn, true)));
    assert_eq!(t.executions, 0);
    assert_first_turn_kept(&t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_before_tool_call_is_ended_by_the_turn_timeout_before_execute() {
    let t = trial(plan(HookName::BeforeToolCall, Fault::Hang)).await;
    assert_eq!(t.first, OutcomeStatus::Error);
    assert!(
        t.first_error.contains("timed out after 300 ms"),
        "{}",
        t.first_error
    );
    assert_eq!(t.executions, 0, "execute ran while its decision hook hung");
    assert_first_turn_kept(&t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_observer_hook_is_ended_by_the_turn_timeout() {
    let t = trial(plan(HookName::OnChunk, Fault::Hang)).await;
    assert_eq!(t.first, OutcomeStatus::Error);
    assert!(t.first_error.contains("timed out"), "{}", t.first_error);
    assert_first_turn_kept(&t);
}
