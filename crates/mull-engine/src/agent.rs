//! The [`Agent`] trait: an application's model, tools, prompt and every lifecycle hook of
//! Think, each with a default that changes nothing: implement only what you need.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull_core::{ChatErrorClassification, LanguageModel};

use crate::config::{StepConfig, TurnConfig};
use crate::context::{
    ChatErrorContext, ChatResponseResult, ChunkContext, PrepareStepContext, RecoveryExhausted,
    StepContext, ToolCallContext, ToolCallDecision, ToolCallResultContext, TurnContext,
};
use crate::error::{ChatError, HookResult};
use crate::session_config::{ContextConfig, SessionConfig};
use crate::tool::ToolSet;
use crate::tool_source::ToolSource;
use crate::workspace::Workspace;

/// An agent: what a session runs turns with.
///
/// Decision hooks (`before_turn`, `before_step`, `before_tool_call`) run inline at their point
/// in the loop and their answer is logged. Observer hooks (`on_chunk`, `after_tool_call`,
/// `on_step_finish`, `on_chat_response`) run after the event they concern is appended, in
/// order, awaited. A hook that returns an error or panics is logged as `hook_failed`; what
/// happens next is the conformance rule for that hook (a failed `before_turn` fails the turn at
/// stage `turn`, a failed `before_tool_call` is a tool error, a failed observer is only logged).
#[async_trait]
pub trait Agent: Send + Sync + 'static {
    /// The agent's name, recorded in `session_opened` and in traces.
    fn name(&self) -> &str;

    /// The model turns use unless a hook overrides it.
    fn model(&self) -> Arc<dyn LanguageModel>;

    /// The workspace whose file tools every turn offers (the first layer of the merge, before
    /// the agent's own tools): see [`crate::workspace`]. None by default.
    fn workspace(&self) -> Option<Workspace> {
        None
    }

    /// The agent's own tools (the layer after the workspace's).
    fn tools(&self) -> ToolSet {
        ToolSet::new()
    }

    /// The MCP servers (or other outside tool sources) whose tools every turn offers, after
    /// the agent's and the session's own tools and before the client's and the caller's.
    /// Listed again at each turn's setup; see [`crate::tool_source`].
    fn mcp_servers(&self) -> Vec<Arc<dyn ToolSource>> {
        Vec::new()
    }

    /// The system prompt when the session has no context blocks.
    fn system_prompt(&self) -> String {
        String::new()
    }

    /// Turns a model id from `TurnConfig::model` / `StepConfig::model` into a model.
    fn resolve_model(&self, _model_id: &str) -> Option<Arc<dyn LanguageModel>> {
        None
    }

    /// Steps per turn unless `before_turn` says otherwise (10).
    fn max_steps(&self) -> u32 {
        10
    }

    /// Whether reasoning parts are sent to the client (true). They are logged either way.
    fn send_reasoning(&self) -> bool {
        true
    }

    /// Longest gap between two stream parts — or a running tool's silence — before the turn
    /// fails at stage `stream`, in ms (0: watchdog off). A turn that needs a known-slow tool
    /// raises it for that turn (`TurnConfig::chat_stream_stall_timeout_ms`).
    fn chat_stream_stall_timeout_ms(&self) -> u64 {
        0
    }

    /// Retries of a retryable model error per model call (2).
    fn max_retries(&self) -> u32 {
        2
    }

    /// The longest any one async hook may run (`None`, as in Think: no limit). Set one to bound
    /// every hook: a hook that outlives it is a `hook_failed` event with `timed_out: true` and
    /// then counts as that hook's failure. Synchronous hooks (`on_chat_error`,
    /// `classify_chat_error`) cannot be interrupted and are not bounded.
    fn hook_timeout(&self) -> Option<Duration> {
        None
    }

    /// Called once when a session opens: register compaction and overflow recovery.
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        session
    }

    /// Called once when a session opens, right after `configure_session`: the context blocks
    /// the system prompt is built from (Think 0.24's `configureContext`). It receives the blocks
    /// `configure_session` added, so agents written against the older chain keep working.
    async fn configure_context(&self, context: ContextConfig) -> ContextConfig {
        context
    }

    /// Before the model is called: inspect the assembled context and override any part of it.
    async fn before_turn(&self, _ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        Ok(None)
    }

    /// Before each model call: per-step overrides.
    async fn before_step(&self, _ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        Ok(None)
    }

    /// Before a server tool's execute: allow, rewrite the input, block or substitute.
    async fn before_tool_call(
        &self,
        _ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        Ok(None)
    }

    /// After a tool call's outcome is known (also for block and substitute).
    async fn after_tool_call(&self, _ctx: &ToolCallResultContext) -> HookResult<()> {
        Ok(())
    }

    /// After each step.
    async fn on_step_finish(&self, _ctx: &StepContext) -> HookResult<()> {
        Ok(())
    }

    /// For every stream part.
    async fn on_chunk(&self, _ctx: &ChunkContext) -> HookResult<()> {
        Ok(())
    }

    /// After a turn ended, its message was persisted and the turn lock was released.
    async fn on_chat_response(&self, _result: &ChatResponseResult) -> HookResult<()> {
        Ok(())
    }

    /// When a turn fails: the returned error is what callers see.
    fn on_chat_error(&self, error: ChatError, _ctx: &ChatErrorContext) -> ChatError {
        error
    }

    /// When a turn's bounded recovery (see [`crate::ChatRecovery`]) used up its attempts, before
    /// the turn ends with its terminal error: tell someone, switch a flag, schedule a later try.
    async fn on_recovery_exhausted(&self, _ctx: &RecoveryExhausted) -> HookResult<()> {
        Ok(())
    }

    /// When a turn fails at stage `stream` and reactive overflow recovery or chat recovery is
    /// on: map the error to a category. `context_overflow` runs the compact-and-retry backstop;
    /// `transient` and `rate_limit` run bounded recovery when [`crate::ChatRecovery`] is on.
    /// Assign [`mull_core::default_context_overflow_classifier`] for the common case.
    fn classify_chat_error(
        &self,
        _error: &ChatError,
        _ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        None
    }
}
