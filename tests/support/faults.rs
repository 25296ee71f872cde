//! An agent whose chosen hook panics or never returns on the first turn only, and a trial that
//! runs that faulty turn and then a clean one on a fresh log.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull::core::{Event, HookName, LanguageModel, UIMessage};
use mull::engine::{
    Agent, ChunkContext, HookResult, OutcomeStatus, StepContext, Timeout, ToolCallContext,
    ToolCallDecision, ToolSet, TurnConfig, TurnContext, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;

use super::test_log::TestLog;
use super::tools::counting_lookup;

/// How the chosen hook misbehaves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fault {
    Panic,
    Hang,
}

/// An agent whose `lookup` tool counts executions and whose chosen hook (`before_turn`,
/// `before_tool_call`, `on_chunk` or `on_step_finish`) misbehaves while armed.
pub struct FaultyAgent {
    model: Arc<ScriptedModel>,
    hook: HookName,
    fault: Fault,
    hook_timeout: Option<Duration>,
    turn_timeout: Option<Duration>,
    armed: AtomicBool,
    executions: Arc<AtomicUsize>,
    /// Told each time a hook starts to hang.
    hung: tokio::sync::Notify,
}

impl FaultyAgent {
    /// An armed agent over `model` whose `hook` misbehaves as `fault` says; no hook or turn
    /// timeout.
    pub fn new(model: Arc<ScriptedModel>, hook: HookName, fault: Fault) -> FaultyAgent {
        FaultyAgent {
            model,
            hook,
            fault,
            hook_timeout: None,
            turn_timeout: None,
            armed: AtomicBool::new(true),
            executions: Arc::new(AtomicUsize::new(0)),
            hung: tokio::sync::Notify::new(),
        }
    }

    /// Bounds every hook by `timeout` (`Agent::hook_timeout`).
    pub fn with_hook_timeout(mut self, timeout: Duration) -> FaultyAgent {
        self.hook_timeout = Some(timeout);
        self
    }

    /// Gives every turn a total timeout from `before_turn`.
    pub fn with_turn_timeout(mut self, timeout: Option<Duration>) -> FaultyAgent {
        self.turn_timeout = timeout;
        self
    }

    /// Executions of the `lookup` tool so far.
    pub fn executions(&self) -> usize {
        self.executions.load(Ordering::SeqCst)
    }

    /// Returns once a hook has started to hang (at once when one already did).
    pub async fn hanging(&self) {
        self.hung.notified().await;
    }

    /// From now on every hook behaves.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    async fn maybe_fault(&self, hook: HookName) {
        if hook != self.hook || !self.armed.load(Ordering::SeqCst) {
            return;
        }
        match self.fault {
            Fault::Panic => panic!("{hook:?} exploded"),
            Fault::Hang => {
                self.hung.notify_one();
                std::future::pending::<()>().await
            }
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
    fn hook_timeout(&self) -> Option<Duration> {
        self.hook_timeout
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new().with(
            counting_lookup(&self.executions, |input: serde_json::Value| input)
                .with_schema(json!({"type": "object"}))
                .shared(),
        )
    }
    async fn before_turn(&self, _ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.maybe_fault(HookName::BeforeTurn).await;
        Ok(self.turn_timeout.map(|total| TurnConfig {
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
    async fn on_step_finish(&self, _ctx: &StepContext) -> HookResult<()> {
        self.maybe_fault(HookName::OnStepFinish).await;
        Ok(())
    }
}

/// What a faulty first turn and a clean second turn left behind.
pub struct Trial {
    pub first: OutcomeStatus,
    pub first_error: String,
    pub second: OutcomeStatus,
    pub events: Vec<Event>,
    /// Executions of the tool during the faulty first turn.
    pub executions: usize,
    /// The last seq flushed before the first turn began.
    pub flushed_before: u64,
}

impl Trial {
    /// Opens session `session_id` for `agent` on a fresh log and runs a first turn (user
    /// message `first_text`) with the fault armed, bounded by `guard` only so that a broken
    /// build cannot hang the suite; then disarms the agent, lets `before_second` prepare the
    /// model, and runs a second turn.
    pub async fn run(
        agent: FaultyAgent,
        session_id: &str,
        first_text: &str,
        guard: Duration,
        before_second: impl FnOnce(&ScriptedModel),
    ) -> Trial {
        let log = TestLog::for_session(session_id);
        let agent = Arc::new(agent);
        let session = log.open(&agent).await;
        let flushed_before = log.log.last_seq();
        let first = tokio::time::timeout(
            guard,
            session.save_messages(
                vec![UIMessage::user("u1", first_text)],
                TurnOptions::default(),
            ),
        )
        .await
        .expect("the faulty turn ended")
        .expect("the engine survived");
        let executions = agent.executions();
        agent.disarm();
        before_second(&agent.model);
        let second = session
            .save_messages(vec![UIMessage::user("u2", "again")], TurnOptions::default())
            .await
            .expect("second turn");
        Trial {
            first: first.status,
            first_error: first.error.map(|e| e.message).unwrap_or_default(),
            second: second.status,
            events: log.bare_events().await,
            executions,
            flushed_before,
        }
    }
}
