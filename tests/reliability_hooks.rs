//! Hooks that misbehave: a hook that panics, and a hook that never returns. The turn must end
//! with an error that says which hook and why (or go on, where the hook is only an observer),
//! the process must survive, the next turn must work, and nothing flushed may be lost.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull::core::{DecisionAction, ErrorStage, Event, HookName, LanguageModel, UIMessage};
use mull::engine::{
    Agent, ChunkContext, FnTool, HookResult, OutcomeStatus, Session, SessionOptions, Timeout,
    ToolCallContext, ToolCallDecision, ToolSet, TurnConfig, TurnContext, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use mull::store::Log;
use serde_json::json;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    Panic,
    Hang,
}

/// Which hook misbehaves, how, and (for hangs) the turn timeout that must end it.
#[derive(Clone, Copy)]
struct Plan {
    hook: HookName,
    fault: Fault,
    turn_timeout: Option<Duration>,
}

/// An agent whose `lookup` tool counts executions and whose chosen hook misbehaves on the
/// first turn only.
struct FaultyAgent {
    model: Arc<ScriptedModel>,
    plan: Plan,
    armed: AtomicBool,
    executions: Arc<AtomicUsize>,
}

impl FaultyAgent {
    async fn maybe_fault(&self, hook: HookName) {
        if hook != self.plan.hook || !self.armed.load(Ordering::SeqCst) {
            return;
        }
        match self.plan.fault {
            Fault::Panic => panic!("{hook:?} exploded"),
            Fault::Hang => std::future::pending::<()>().await,
        }
    }
}

#[async_trait]
impl Agent for FaultyAgent {
    fn name(&self) -> &str {
        "faulty"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        self.model.clone()
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
    async fn before_turn(&self, _ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.maybe_fault(HookName::BeforeTurn).await;
        Ok(self.plan.turn_timeout.map(|total| TurnConfig {
            timeout: Some(Timeout {
                total: Some(total),
                chunk: None,
            }),
            ..TurnConfig::default()
        }))
    }
    async fn before_tool_call(
        &self,
        _ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        self.maybe_fault(HookName::BeforeToolCall).await;
        Ok(None)
    }
    async fn on_chunk(&self, _ctx: &ChunkContext) -> HookResult<()> {
        self.maybe_fault(HookName::OnChunk).await;
        Ok(())
    }
}

/// What a faulty first turn and a clean second turn left behind.
struct Trial {
    first: OutcomeStatus,
    first_error: String,
    second: OutcomeStatus,
    events: Vec<Event>,
    /// Executions of the tool during the faulty first turn.
    executions: usize,
    flushed_before: u64,
}

async fn trial(plan: Plan) -> Trial {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let model = Arc::new(
        ScriptedModel::builder("scripted-1")
            .step(|s| s.tool_call("call_1", "lookup", json!({"q": "rust"})))
            .step(|s| s.text("Found it."))
            .build(),
    );
    let executions = Arc::new(AtomicUsize::new(0));
    let agent = Arc::new(FaultyAgent {
        model: Arc::clone(&model),
        plan,
        armed: AtomicBool::new(true),
        executions: Arc::clone(&executions),
    });
    let session = Session::open(&log, agent.clone(), SessionOptions::deterministic("sess_f"))
        .await
        .expect("opens");
    let flushed_before = log.last_seq();
    let first = tokio::time::timeout(
        Duration::from_secs(20),
        session.save_messages(vec![UIMessage::user("u1", "look")], TurnOptions::default()),
    )
    .await
    .expect("the faulty turn ended")
    .expect("the engine survived");
    let first_executions = executions.load(Ordering::SeqCst);
    agent.armed.store(false, Ordering::SeqCst);
    // The second turn needs a step of its own (a fault may have left earlier steps unused,
    // which it then consumes first; either way it ends in text).
    model.push_step(|s| s.text("Second turn."));
    let second = session
        .save_messages(vec![UIMessage::user("u2", "again")], TurnOptions::default())
        .await
        .expect("second turn");
    log.flush().await.expect("flushes");
    let events = log
        .reader()
        .expect("reader")
        .session_page("sess_f", 0, 10_000)
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
        flushed_before,
    }
}

fn hook_failed(events: &[Event]) -> Option<(HookName, bool, String)> {
    events.iter().find_map(|e| match e {
        Event::HookFailed {
            hook,
            panicked,
            error,
            ..
        } => Some((*hook, *panicked, error.clone())),
        _ => None,
    })
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
    let decided = t.events.iter().find_map(|e| match e {
        Event::ToolDecided { action, .. } => Some(*action),
        _ => None,
    });
    assert_eq!(decided, Some(DecisionAction::HookFailed));
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
