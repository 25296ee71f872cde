//! How a sub-agent's progress reaches its parent's call, in lockstep: the child agent is
//! wrapped so that its `before_tool_call`, `after_tool_call` and `on_step_finish` each report
//! to the parent's call and wait until the parent has recorded the report. The child never runs
//! ahead of the parent's log, so the two sessions' events (and their clock readings and ids,
//! which they share) interleave the same way on every run.

use std::sync::Arc;

use async_trait::async_trait;
use mull_core::{ChatErrorClassification, LanguageModel};
use tokio::sync::{mpsc, oneshot};

use crate::agent::Agent;
use crate::config::{StepConfig, TurnConfig};
use crate::context::{
    ChatErrorContext, ChatResponseResult, ChunkContext, PrepareStepContext, StepContext,
    ToolCallContext, ToolCallDecision, ToolCallResultContext, TurnContext,
};
use crate::error::{ChatError, HookResult};
use crate::session_config::SessionConfig;
use crate::tool::ToolSet;
use crate::tool_source::ToolSource;

/// Something the child did that its parent's client should see.
#[derive(Debug, Clone)]
pub(super) enum Progress {
    /// `before_tool_call` ran for a call of the child's.
    ToolStarted { call_id: String, tool: String },
    /// The call's outcome is known.
    ToolEnded { call_id: String, success: bool },
    /// A step of the child ended, with its text.
    StepText(String),
}

/// A report and the way to say it was recorded.
pub(super) type Report = (Progress, oneshot::Sender<()>);

/// The child agent, with every hook delegated and the three above reporting after it ran.
pub(super) struct Reporting {
    pub agent: Arc<dyn Agent>,
    pub reports: mpsc::Sender<Report>,
}

impl Reporting {
    /// Sends `progress` and waits until the parent recorded it (or let go of the child).
    async fn report(&self, progress: Progress) {
        let (recorded, wait) = oneshot::channel();
        if self.reports.send((progress, recorded)).await.is_ok() {
            // An error means the parent's call ended: nobody is waiting for more.
            let _ = wait.await;
        }
    }
}

#[async_trait]
impl Agent for Reporting {
    fn name(&self) -> &str {
        self.agent.name()
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        self.agent.model()
    }

    fn tools(&self) -> ToolSet {
        self.agent.tools()
    }

    fn mcp_servers(&self) -> Vec<Arc<dyn ToolSource>> {
        self.agent.mcp_servers()
    }

    fn system_prompt(&self) -> String {
        self.agent.system_prompt()
    }

    fn resolve_model(&self, model_id: &str) -> Option<Arc<dyn LanguageModel>> {
        self.agent.resolve_model(model_id)
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
        self.agent.before_turn(ctx).await
    }

    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        self.agent.before_step(ctx).await
    }

    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        let decided = self.agent.before_tool_call(ctx).await;
        self.report(Progress::ToolStarted {
            call_id: ctx.tool_call_id.clone(),
            tool: ctx.tool_name.clone(),
        })
        .await;
        decided
    }

    async fn after_tool_call(&self, ctx: &ToolCallResultContext) -> HookResult<()> {
        let observed = self.agent.after_tool_call(ctx).await;
        self.report(Progress::ToolEnded {
            call_id: ctx.tool_call_id.clone(),
            success: ctx.success,
        })
        .await;
        observed
    }

    async fn on_step_finish(&self, ctx: &StepContext) -> HookResult<()> {
        let observed = self.agent.on_step_finish(ctx).await;
        self.report(Progress::StepText(ctx.record.text.clone()))
            .await;
        observed
    }

    async fn on_chunk(&self, ctx: &ChunkContext) -> HookResult<()> {
        self.agent.on_chunk(ctx).await
    }

    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
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
