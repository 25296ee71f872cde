//! The recording agent every scenario runs: each hook records its call as one line (folded for
//! snapshots), and a test can give any hook a closure that decides what it returns.

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use mull::core::{ChatErrorClassification, LanguageModel};
use mull::engine::{
    Agent, ChatError, ChatErrorContext, ChatResponseResult, ChunkContext, HookResult,
    PrepareStepContext, RecoveryExhausted, SessionConfig, StepConfig, StepContext, ToolCallContext,
    ToolCallDecision, ToolCallResultContext, ToolSet, TurnConfig, TurnContext,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::Value;

use crate::support::hook_calls::HookCalls;

type Slot<F> = Option<Box<F>>;
type BeforeTurnFn =
    dyn Fn(&TurnContext) -> HookResult<Option<TurnConfig>> + Send + std::marker::Sync;
type BeforeStepFn =
    dyn Fn(&PrepareStepContext) -> HookResult<Option<StepConfig>> + Send + std::marker::Sync;
type BeforeToolFn =
    dyn Fn(&ToolCallContext) -> HookResult<Option<ToolCallDecision>> + Send + std::marker::Sync;
type ObserveFn<C> = dyn Fn(&C) -> HookResult<()> + Send + std::marker::Sync;
type ResponseFn =
    dyn Fn(ChatResponseResult) -> BoxFuture<'static, HookResult<()>> + Send + std::marker::Sync;
type ErrorFn = dyn Fn(ChatError, &ChatErrorContext) -> ChatError + Send + std::marker::Sync;
type ClassifyFn = dyn Fn(&ChatError, &ChatErrorContext) -> Option<ChatErrorClassification>
    + Send
    + std::marker::Sync;
type ConfigureFn = dyn Fn(SessionConfig) -> SessionConfig + Send + std::marker::Sync;

/// An agent whose hooks record every call and optionally do something.
pub(crate) struct Rec {
    model: Arc<dyn LanguageModel>,
    extra_models: Vec<Arc<dyn LanguageModel>>,
    tools: ToolSet,
    system: String,
    pub(crate) stall_ms: u64,
    send_reasoning: bool,
    max_retries: u32,
    calls: HookCalls,
    /// The records `on_step_finish` received, in order.
    steps: std::sync::Mutex<Vec<mull::core::StepRecord>>,
    before_turn: Slot<BeforeTurnFn>,
    before_step: Slot<BeforeStepFn>,
    before_tool_call: Slot<BeforeToolFn>,
    after_tool_call: Slot<ObserveFn<ToolCallResultContext>>,
    on_chunk: Slot<ObserveFn<ChunkContext>>,
    on_step_finish: Slot<ObserveFn<StepContext>>,
    on_chat_response: Slot<ResponseFn>,
    on_chat_error: Slot<ErrorFn>,
    classify: Slot<ClassifyFn>,
    configure: Slot<ConfigureFn>,
}

impl Rec {
    pub(crate) fn new(model: &ScriptedModel) -> Rec {
        Rec {
            model: Arc::new(model.clone()),
            extra_models: Vec::new(),
            tools: ToolSet::new(),
            system: "You are terse.".into(),
            stall_ms: 0,
            send_reasoning: true,
            max_retries: 2,
            calls: HookCalls::default(),
            steps: std::sync::Mutex::default(),
            before_turn: None,
            before_step: None,
            before_tool_call: None,
            after_tool_call: None,
            on_chunk: None,
            on_step_finish: None,
            on_chat_response: None,
            on_chat_error: None,
            classify: None,
            configure: None,
        }
    }
    pub(crate) fn tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }
    pub(crate) fn before_turn(
        mut self,
        f: impl Fn(&TurnContext) -> HookResult<Option<TurnConfig>> + Send + std::marker::Sync + 'static,
    ) -> Self {
        self.before_turn = Some(Box::new(f));
        self
    }
    pub(crate) fn before_step(
        mut self,
        f: impl Fn(&PrepareStepContext) -> HookResult<Option<StepConfig>>
            + Send
            + std::marker::Sync
            + 'static,
    ) -> Self {
        self.before_step = Some(Box::new(f));
        self
    }
    pub(crate) fn before_tool_call(
        mut self,
        f: impl Fn(&ToolCallContext) -> HookResult<Option<ToolCallDecision>>
            + Send
            + std::marker::Sync
            + 'static,
    ) -> Self {
        self.before_tool_call = Some(Box::new(f));
        self
    }
    pub(crate) fn after_tool_call(
        mut self,
        f: impl Fn(&ToolCallResultContext) -> HookResult<()> + Send + std::marker::Sync + 'static,
    ) -> Self {
        self.after_tool_call = Some(Box::new(f));
        self
    }
    pub(crate) fn on_chunk(
        mut self,
        f: impl Fn(&ChunkContext) -> HookResult<()> + Send + std::marker::Sync + 'static,
    ) -> Self {
        self.on_chunk = Some(Box::new(f));
        self
    }
    pub(crate) fn on_step_finish(
        mut self,
        f: impl Fn(&StepContext) -> HookResult<()> + Send + std::marker::Sync + 'static,
    ) -> Self {
        self.on_step_finish = Some(Box::new(f));
        self
    }
    pub(crate) fn on_chat_response(
        mut self,
        f: impl Fn(ChatResponseResult) -> BoxFuture<'static, HookResult<()>>
            + Send
            + std::marker::Sync
            + 'static,
    ) -> Self {
        self.on_chat_response = Some(Box::new(f));
        self
    }
    pub(crate) fn on_chat_error(
        mut self,
        f: impl Fn(ChatError, &ChatErrorContext) -> ChatError + Send + std::marker::Sync + 'static,
    ) -> Self {
        self.on_chat_error = Some(Box::new(f));
        self
    }
    pub(crate) fn classify(
        mut self,
        f: impl Fn(&ChatError, &ChatErrorContext) -> Option<ChatErrorClassification>
            + Send
            + std::marker::Sync
            + 'static,
    ) -> Self {
        self.classify = Some(Box::new(f));
        self
    }
    pub(crate) fn configure(
        mut self,
        f: impl Fn(SessionConfig) -> SessionConfig + Send + std::marker::Sync + 'static,
    ) -> Self {
        self.configure = Some(Box::new(f));
        self
    }
    fn record(&self, line: String) {
        self.calls.record(line);
    }
    pub(crate) fn calls(&self) -> Vec<String> {
        self.calls.lines()
    }
    /// The records `on_step_finish` received, in order.
    pub(crate) fn step_records(&self) -> Vec<mull::core::StepRecord> {
        self.steps.lock().unwrap().clone()
    }
    /// Hook calls with runs of identical `on_chunk` lines folded into `… xN`.
    pub(crate) fn calls_folded(&self) -> String {
        self.calls.folded()
    }
}

#[async_trait]
impl Agent for Rec {
    fn name(&self) -> &str {
        "rec"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn tools(&self) -> ToolSet {
        self.tools.clone()
    }
    fn system_prompt(&self) -> String {
        self.system.clone()
    }
    fn resolve_model(&self, id: &str) -> Option<Arc<dyn LanguageModel>> {
        self.extra_models
            .iter()
            .find(|m| m.model_id() == id)
            .cloned()
    }
    fn chat_stream_stall_timeout_ms(&self) -> u64 {
        self.stall_ms
    }
    fn send_reasoning(&self) -> bool {
        self.send_reasoning
    }
    fn max_retries(&self) -> u32 {
        self.max_retries
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        self.record("configure_session".into());
        match &self.configure {
            Some(f) => f(session),
            None => session,
        }
    }
    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.record(format!(
            "before_turn(entry={:?}, continuation={}, messages={}, tools={:?})",
            ctx.entry,
            ctx.continuation,
            ctx.messages.len(),
            ctx.tools.names()
        ));
        match &self.before_turn {
            Some(f) => f(ctx),
            None => Ok(None),
        }
    }
    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        self.record(format!(
            "before_step({}, previous_steps={}, messages={})",
            ctx.step_number,
            ctx.steps.len(),
            ctx.messages.len()
        ));
        match &self.before_step {
            Some(f) => f(ctx),
            None => Ok(None),
        }
    }
    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        self.record(format!(
            "before_tool_call({}, step={}, input={})",
            ctx.tool_name, ctx.step_number, ctx.input
        ));
        match &self.before_tool_call {
            Some(f) => f(ctx),
            None => Ok(None),
        }
    }
    async fn after_tool_call(&self, ctx: &ToolCallResultContext) -> HookResult<()> {
        self.record(format!(
            "after_tool_call({}, decision={}, success={}, input={}, effective_input={}, output={}, error={:?}, duration_ms={})",
            ctx.tool_name,
            ctx.decision.as_str(),
            ctx.success,
            ctx.input,
            ctx.effective_input,
            ctx.output.clone().unwrap_or(Value::Null),
            ctx.error,
            ctx.duration_ms
        ));
        match &self.after_tool_call {
            Some(f) => f(ctx),
            None => Ok(()),
        }
    }
    async fn on_step_finish(&self, ctx: &StepContext) -> HookResult<()> {
        self.record(format!(
            "on_step_finish({}, {})",
            ctx.step_number,
            ctx.record.finish_reason.as_str()
        ));
        self.steps.lock().unwrap().push(ctx.record.clone());
        match &self.on_step_finish {
            Some(f) => f(ctx),
            None => Ok(()),
        }
    }
    async fn on_chunk(&self, ctx: &ChunkContext) -> HookResult<()> {
        self.record(format!("on_chunk({})", ctx.chunk.kind()));
        match &self.on_chunk {
            Some(f) => f(ctx),
            None => Ok(()),
        }
    }
    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
        self.record(format!(
            "on_chat_response({}, parts={}, continuation={}, error={:?})",
            result.status.as_str(),
            result.message.parts.len(),
            result.continuation,
            result.error
        ));
        match &self.on_chat_response {
            Some(f) => f(result.clone()).await,
            None => Ok(()),
        }
    }
    async fn on_recovery_exhausted(&self, ctx: &RecoveryExhausted) -> HookResult<()> {
        self.record(format!(
            "on_recovery_exhausted(attempts={}, classification={:?}, error={:?})",
            ctx.attempts, ctx.classification, ctx.error
        ));
        Ok(())
    }
    fn on_chat_error(&self, error: ChatError, ctx: &ChatErrorContext) -> ChatError {
        self.record(format!(
            "on_chat_error({:?}, persisted={}, classification={:?}, request={}, error={:?})",
            ctx.stage,
            ctx.messages_persisted,
            ctx.classification,
            ctx.request_id.is_some(),
            error.message
        ));
        match &self.on_chat_error {
            Some(f) => f(error, ctx),
            None => error,
        }
    }
    fn classify_chat_error(
        &self,
        error: &ChatError,
        ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        self.record(format!("classify_chat_error({:?})", ctx.stage));
        match &self.classify {
            Some(f) => f(error, ctx),
            None => None,
        }
    }
}
