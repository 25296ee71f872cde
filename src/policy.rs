//! Tool policies: a stricter `before_tool_call` laid over an agent, and the built-in examples
//! `mull fork` and `mull backtest` take by name.
//!
//! [`Guarded`] is an agent that is its inner agent in every respect (name, model, tools,
//! prompt, every hook) except that a [`ToolPolicy`] is asked about each tool call the inner
//! agent lets run. A policy can only narrow: a call the inner agent blocks or substitutes stays
//! that way. That is the shape of the question a backtest answers: "what would this guard have
//! blocked?".

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull_core::{ChatErrorClassification, LanguageModel};
use mull_engine::{
    Agent, ChatError, ChatErrorContext, ChatResponseResult, ChunkContext, HookResult,
    PrepareStepContext, SessionConfig, StepConfig, StepContext, ToolCallContext, ToolCallDecision,
    ToolCallResultContext, ToolSet, TurnConfig, TurnContext,
};

/// Which tool calls a policy blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    /// The policy's name, quoted in every block reason.
    pub name: String,
    /// Tools that may never run.
    pub blocked: Vec<String>,
    /// When set, only these tools may run.
    pub only: Option<Vec<String>>,
}

impl ToolPolicy {
    /// The built-in examples:
    /// - `guides-only`: only `search_guides` may run (the demo's forecast is blocked);
    /// - `no-weather`: `weather` may not run;
    /// - `demo`: what the demo agent already does (blocks `cancel_booking`) — a backtest with it
    ///   changes nothing.
    pub fn builtin(name: &str) -> Option<ToolPolicy> {
        let policy = |blocked: &[&str], only: Option<&[&str]>| ToolPolicy {
            name: name.to_owned(),
            blocked: blocked.iter().map(|s| (*s).to_owned()).collect(),
            only: only.map(|o| o.iter().map(|s| (*s).to_owned()).collect()),
        };
        match name {
            "guides-only" => Some(policy(&[], Some(&["search_guides"]))),
            "no-weather" => Some(policy(&["weather"], None)),
            "demo" => Some(policy(&["cancel_booking"], None)),
            _ => None,
        }
    }

    /// The names [`ToolPolicy::builtin`] knows.
    pub const BUILTIN: &'static [&'static str] = &["guides-only", "no-weather", "demo"];

    /// The block reason for `tool`, or `None` when the policy lets it run.
    pub fn check(&self, tool: &str) -> Option<String> {
        let listed = self.blocked.iter().any(|b| b == tool);
        let outside = self
            .only
            .as_ref()
            .is_some_and(|only| !only.iter().any(|o| o == tool));
        (listed || outside).then(|| format!("policy {}: {tool} may not run", self.name))
    }
}

/// An agent with a [`ToolPolicy`] over its own `before_tool_call`.
pub struct Guarded {
    inner: Arc<dyn Agent>,
    policy: ToolPolicy,
    model: Option<Arc<dyn LanguageModel>>,
}

impl Guarded {
    /// `inner`, with `policy` asked about every call `inner` lets run.
    pub fn new(inner: Arc<dyn Agent>, policy: ToolPolicy) -> Guarded {
        Guarded {
            inner,
            policy,
            model: None,
        }
    }

    /// The same, answered by `model` instead of the inner agent's model: how a backtest goes
    /// on live, past the point where its recording stops being usable, with another model.
    pub fn with_model(mut self, model: Arc<dyn LanguageModel>) -> Guarded {
        self.model = Some(model);
        self
    }

    /// The policy.
    pub fn policy(&self) -> &ToolPolicy {
        &self.policy
    }
}

#[async_trait]
impl Agent for Guarded {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        self.model.clone().unwrap_or_else(|| self.inner.model())
    }
    fn tools(&self) -> ToolSet {
        self.inner.tools()
    }
    fn system_prompt(&self) -> String {
        self.inner.system_prompt()
    }
    fn resolve_model(&self, model_id: &str) -> Option<Arc<dyn LanguageModel>> {
        self.inner.resolve_model(model_id)
    }
    fn max_steps(&self) -> u32 {
        self.inner.max_steps()
    }
    fn send_reasoning(&self) -> bool {
        self.inner.send_reasoning()
    }
    fn chat_stream_stall_timeout_ms(&self) -> u64 {
        self.inner.chat_stream_stall_timeout_ms()
    }
    fn max_retries(&self) -> u32 {
        self.inner.max_retries()
    }
    fn hook_timeout(&self) -> Option<Duration> {
        self.inner.hook_timeout()
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        self.inner.configure_session(session).await
    }
    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.inner.before_turn(ctx).await
    }
    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        self.inner.before_step(ctx).await
    }
    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        let decided = self.inner.before_tool_call(ctx).await?;
        let runs = matches!(
            decided,
            None | Some(ToolCallDecision::Allow | ToolCallDecision::AllowWithInput(_))
        );
        match self.policy.check(&ctx.tool_name) {
            Some(reason) if runs => Ok(Some(ToolCallDecision::Block {
                reason: Some(reason),
            })),
            _ => Ok(decided),
        }
    }
    async fn after_tool_call(&self, ctx: &ToolCallResultContext) -> HookResult<()> {
        self.inner.after_tool_call(ctx).await
    }
    async fn on_step_finish(&self, ctx: &StepContext) -> HookResult<()> {
        self.inner.on_step_finish(ctx).await
    }
    async fn on_chunk(&self, ctx: &ChunkContext) -> HookResult<()> {
        self.inner.on_chunk(ctx).await
    }
    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
        self.inner.on_chat_response(result).await
    }
    fn on_chat_error(&self, error: ChatError, ctx: &ChatErrorContext) -> ChatError {
        self.inner.on_chat_error(error, ctx)
    }
    fn classify_chat_error(
        &self,
        error: &ChatError,
        ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        self.inner.classify_chat_error(error, ctx)
    }
}
