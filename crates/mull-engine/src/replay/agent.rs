//! The agent a replay runs: the current agent's decisions, with its models and tools served
//! from the recording.

use std::sync::Arc;

use async_trait::async_trait;
use mull_core::{ChatErrorClassification, LanguageModel};

use crate::agent::Agent;
use crate::config::{StepConfig, TurnConfig};
use crate::error::{ChatError, HookResult};
use crate::hooks::context::{
    ChatErrorContext, ChatResponseResult, ChunkContext, PrepareStepContext, StepContext,
    ToolCallContext, ToolCallDecision, ToolCallResultContext, TurnContext,
};
use crate::session_config::SessionConfig;
use crate::tool::ToolSet;

use super::Shared;

/// The agent under replay: its own hooks, with recorded models and tools, and a point after
/// every observed event where recorded cancellations are re-issued.
pub(super) struct ReplayAgent {
    pub(super) agent: Arc<dyn Agent>,
    pub(super) shared: Arc<Shared>,
}

#[async_trait]
impl Agent for ReplayAgent {
    fn name(&self) -> &str {
        self.agent.name()
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        self.shared.present(&self.agent.model())
    }

    fn tools(&self) -> ToolSet {
        self.shared.wrap_tools(self.agent.tools(), None)
    }

    fn mcp_servers(&self) -> Vec<Arc<dyn crate::tool_source::ToolSource>> {
        // Their tools are wrapped with the session's own when the turn merges them.
        self.agent.mcp_servers()
    }

    fn system_prompt(&self) -> String {
        self.agent.system_prompt()
    }

    fn resolve_model(&self, model_id: &str) -> Option<Arc<dyn LanguageModel>> {
        self.agent
            .resolve_model(model_id)
            .map(|model| self.shared.present(&model))
    }

    fn max_steps(&self) -> u32 {
        self.agent.max_steps()
    }

    fn send_reasoning(&self) -> bool {
        self.agent.send_reasoning()
    }

    fn chat_stream_stall_timeout_ms(&self) -> u64 {
        self.agent.chat_stream_stall_timeout_ms()
    }

    fn max_retries(&self) -> u32 {
        self.agent.max_retries()
    }

    fn hook_timeout(&self) -> Option<std::time::Duration> {
        self.agent.hook_timeout()
    }

    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        self.agent.configure_session(session).await
    }

    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.shared.checkpoint().await;
        let mut config = self.agent.before_turn(ctx).await?;
        if let Some(config) = &mut config {
            config.model = self.shared.wrap_choice(config.model.take());
            config.tools = config.tools.take().map(|t| self.shared.wrap_tools(t, None));
        }
        Ok(config)
    }

    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        self.shared.checkpoint().await;
        let mut config = self.agent.before_step(ctx).await?;
        if let Some(config) = &mut config {
            config.model = self.shared.wrap_choice(config.model.take());
        }
        Ok(config)
    }

    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        self.shared.checkpoint().await;
        self.agent.before_tool_call(ctx).await
    }

    async fn after_tool_call(&self, ctx: &ToolCallResultContext) -> HookResult<()> {
        self.shared.checkpoint().await;
        self.agent.after_tool_call(ctx).await
    }

    async fn on_step_finish(&self, ctx: &StepContext) -> HookResult<()> {
        self.shared.checkpoint().await;
        self.agent.on_step_finish(ctx).await
    }

    async fn on_chunk(&self, ctx: &ChunkContext) -> HookResult<()> {
        self.shared.checkpoint().await;
        self.agent.on_chunk(ctx).await
    }

    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
        self.shared.stop_point().await;
        self.agent.on_chat_response(result).await
    }

    fn on_chat_error(&self, error: ChatError, ctx: &ChatErrorContext) -> ChatError {
        self.agent.on_chat_error(error, ctx)
    }

    fn classify_chat_error(
        &self,
        error: &ChatError,
        ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        self.agent.classify_chat_error(error, ctx)
    }
}
