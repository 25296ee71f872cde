//! `Agent::hook_timeout` bounds every async hook: a hook that never returns is ended, logged as
//! `hook_failed` with `timed_out: true`, and then counts as that hook's failure (a hung
//! `before_turn` fails the turn at stage `turn`, a hung `before_tool_call` is a tool error, a
//! hung observer is only logged). No turn timeout is set, so nothing else could end the hung
//! hook.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull::core::{DecisionAction, ErrorStage, Event, HookName, LanguageModel, UIMessage};
use mull::engine::{
    Agent, ChunkContext, FnTool, HookResult, OutcomeStatus, Session, SessionOptions,
    ToolCallContext, ToolCallDecision, ToolSet, TurnConfig, TurnContext, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use mull::store::Log;
use serde_json::json;

/// An agent whose `hung` hook never returns while `armed`, with a 50 ms hook timeout.
struct HangingAgent {
    model: Arc<ScriptedModel>,
    hung: HookName,
    armed: AtomicBool,
    executions: Arc<AtomicUsize>,
}

impl HangingAgent {
    async fn maybe_hang(&self, hook: HookName) {
        if hook == self.hung && self.armed.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl Agent for HangingAgent {
    fn name(&self) -> &str {
        "hanging"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        self.model.clone()
    }
    fn hook_timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
    }
    fn tools(&self) -> ToolSet {
        let executions = Arc::clone(&self.executions);
        ToolSet::new().with(
            FnTool::new(
                "lookup",
                "Looks a query up.",
                move |input: serde_json::Value, _| {
                    let executions = Arc::clone(&executions);
                    async move {
                        executions.fetch_add(1, Ordering::SeqCst);
                        Ok(json!({"found": input}))
                    }
                },
            )
            .with_schema(json!({"type": "object"}))
            .shared(),
        )
    }
    async fn before_tool_call(
        &self,
        _ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        self.maybe_hang(HookName::BeforeToolCall).await;
        Ok(None)
    }
    async fn before_turn(&self, _ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.maybe_hang(HookName::BeforeTurn).await;
        Ok(None)
    }
    async fn on_chunk(&self, _ctx: &ChunkContext) -> HookResult<()> {
        self.maybe_hang(HookName::OnChunk).await;
        Ok(())
    }
}

/// The first turn (with the hang armed), the second (disarmed), and the log they left.
struct Trial {
    first: OutcomeStatus,
    first_error: String,
    second: OutcomeStatus,
    events: Vec<Event>,
    executions: usize,
}

async fn trial(hung: HookName) -> Trial {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
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
    let executions = Arc::new(AtomicUsize::new(0));
    let agent = Arc::new(HangingAgent {
        model,
        hung,
        armed: AtomicBool::new(true),
        executions: Arc::clone(&executions),
    });
    let session = Session::open(&log, agent.clone(), SessionOptions::deterministic("sess_h"))
        .await
        .expect("opens");
    // The guard only keeps a broken build from hanging the suite; the hook timeout ends the
    // hang long before it.
    let first = tokio::time::timeout(
        Duration::from_secs(30),
        session.save_messages(vec![UIMessage::user("u1", "hi")], TurnOptions::default()),
    )
    .await
    .expect("the hook timeout ended the hung hook")
    .expect("the engine survived");
    let first_executions = executions.load(Ordering::SeqCst);
    agent.armed.store(false, Ordering::SeqCst);
    let second = session
        .save_messages(vec![UIMessage::user("u2", "again")], TurnOptions::default())
        .await
        .expect("second turn");
    log.flush().await.expect("flushes");
    let events = log
        .reader()
        .expect("reader")
        .session_page("sess_h", 0, 10_000)
        .expect("reads")
        .into_iter()
        .map(|e| e.event)
        .collect();
    Trial {
        first: first.status,
        first_error: first.error.map(|e| e.message).unwrap_or_default(),
        second: second.status,
        events,
        executions: first_executions,
    }
}

/// Every `hook_failed` event: hook, timed out, panicked, error.
fn hook_failures(events: &[Event]) -> Vec<(HookName, bool, bool, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::HookFailed {
                hook,
                timed_out,
                panicked,
                error,
                ..
            } => Some((*hook, *timed_out, *panicked, error.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_before_turn_times_out_and_fails_the_turn_at_stage_turn() {
    let t = trial(HookName::BeforeTurn).await;
    assert_eq!(t.first, OutcomeStatus::Error, "{}", t.first_error);
    let failures = hook_failures(&t.events);
    assert_eq!(failures.len(), 1, "{failures:?}");
    let (hook, timed_out, panicked, error) = &failures[0];
    assert_eq!(*hook, HookName::BeforeTurn);
    assert!(*timed_out && !*panicked, "{failures:?}");
    assert!(error.contains("timed out after 50 ms"), "{error}");
    let stage = t.events.iter().find_map(|e| match e {
        Event::TurnFailed { stage, .. } => Some(*stage),
        _ => None,
    });
    assert_eq!(stage, Some(ErrorStage::Turn));
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
            .all(|(hook, timed_out, panicked, _)| *hook == HookName::OnChunk
                && *timed_out
                && !*panicked),
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
    assert_eq!(failures[0].0, HookName::BeforeToolCall);
    assert!(failures[0].1, "{failures:?}");
    let decided = t.events.iter().find_map(|e| match e {
        Event::ToolDecided { action, .. } => Some(*action),
        _ => None,
    });
    assert_eq!(decided, Some(DecisionAction::HookFailed));
    let finished = t.events.iter().find_map(|e| match e {
        Event::ToolCallFinished { success, .. } => Some(*success),
        _ => None,
    });
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
