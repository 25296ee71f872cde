//! The extensions' side of the hooks dispatcher: runs each subscribed extension in load order
//! right after the agent's own hook, through the engine's one failure guard, and answers their
//! host calls.

use std::sync::Arc;

use mull_core::UIMessage;

use crate::config::ResolvedTurn;
use crate::context::{
    ChunkContext, StepContext, ToolCallContext, ToolCallResultContext, TurnContext,
};
use crate::error::{EngineError, HookResult};
use crate::extension::patch::apply_patch;
use crate::extension::*;
use crate::recorder::Recorder;
use crate::session_config::SessionConfig;

/// A session's extensions with what their hooks and host calls use: the log and the session's
/// context blocks.
pub(crate) struct ExtensionHooks {
    session_id: String,
    extensions: Extensions,
    recorder: Arc<Recorder>,
    config: Arc<SessionConfig>,
}

/// The session's side of host calls: the conversation from the projection, and the session's
/// declared context blocks. A write is held to the block's budget and recorded as a
/// `context_block_updated` event (source `application`); it becomes durable at the turn's next
/// flush barrier and shows in the prompt from the next turn, like any application write.
struct SessionHost<'a> {
    inner: &'a ExtensionHooks,
}

impl ExtensionHost for SessionHost<'_> {
    fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    fn messages(&self) -> Vec<UIMessage> {
        self.inner.recorder.read(|s| s.messages.clone())
    }
    fn read_context_block(&self, name: &str) -> Result<Option<String>, HostCallError> {
        if self.inner.config.block(name).is_none() {
            return Err(HostCallError::Rejected(format!(
                "session {} has no context block {name:?}",
                self.inner.session_id
            )));
        }
        Ok(self
            .inner
            .recorder
            .read(|s| s.context_blocks.get(name).cloned()))
    }
    fn write_context_block(&self, name: &str, text: &str) -> Result<(), HostCallError> {
        crate::session_config::check_write(&self.inner.config, name, text, false)
            .map_err(|e| HostCallError::Rejected(e.to_string()))?;
        crate::session_config::block::append_write(
            &self.inner.recorder,
            name,
            text,
            mull_core::ContextBlockSource::Application,
            None,
        )
        .map_err(|e| HostCallError::Rejected(format!("the log refused the write: {e}")))
    }
}

/// Runs one extension hook through the engine's one failure guard, under the extension's
/// timeout: a failure is a `hook_failed` event naming the extension, and `None`.
async fn guarded<T>(
    inner: &ExtensionHooks,
    turn_id: Option<&str>,
    extension: &dyn Extension,
    hook: ExtensionHook,
    fut: impl std::future::Future<Output = HookResult<T>>,
) -> Result<Option<T>, EngineError> {
    let caller = crate::guard::Caller {
        hook: hook.hook_name(),
        source: extension.name(),
    };
    let limit = Some(extension.timeout(hook));
    Ok(
        crate::guard::guarded(&inner.recorder, turn_id, caller, limit, fut)
            .await?
            .ok(),
    )
}

impl ExtensionHooks {
    /// The extensions of session `session_id`, whose host calls read and write its context
    /// blocks as `config` declares them.
    pub(crate) fn new(
        session_id: String,
        extensions: Extensions,
        recorder: Arc<Recorder>,
        config: Arc<SessionConfig>,
    ) -> ExtensionHooks {
        ExtensionHooks {
            session_id,
            extensions,
            recorder,
            config,
        }
    }

    /// Runs every `before_turn` subscriber on the turn as configured so far and merges each
    /// reply's scalar fields into it, in load order.
    pub(crate) async fn before_turn(
        &self,
        turn_id: Option<&str>,
        ctx: &TurnContext,
        mut resolved: ResolvedTurn,
    ) -> Result<ResolvedTurn, EngineError> {
        let host = SessionHost { inner: self };
        for extension in self.extensions.subscribed(ExtensionHook::BeforeTurn) {
            let snapshot = TurnSnapshot {
                system: resolved.system.clone(),
                tool_names: resolved.tools.names(),
                active_tools: resolved.active_tools.clone(),
                message_count: u32::try_from(resolved.messages.len()).unwrap_or(u32::MAX),
                continuation: ctx.continuation,
                body: ctx.body.clone(),
                model_id: resolved.model.model_id().to_owned(),
            };
            let reply = guarded(
                self,
                turn_id,
                &**extension,
                ExtensionHook::BeforeTurn,
                extension.before_turn(&snapshot, &host),
            )
            .await?;
            if let Some(Some(patch)) = reply {
                apply_patch(&mut resolved, extension.name(), patch);
            }
        }
        Ok(resolved)
    }

    /// Offers a decided tool call to every `before_tool_call` subscriber.
    pub(crate) async fn before_tool_call(
        &self,
        turn_id: Option<&str>,
        ctx: &ToolCallContext,
    ) -> Result<(), EngineError> {
        let mut subscribers = self
            .extensions
            .subscribed(ExtensionHook::BeforeToolCall)
            .peekable();
        if subscribers.peek().is_none() {
            return Ok(());
        }
        let host = SessionHost { inner: self };
        let snapshot = ToolCallSnapshot {
            tool_name: ctx.tool_name.clone(),
            tool_call_id: ctx.tool_call_id.clone(),
            input: ctx.input.clone(),
            step_number: ctx.step_number,
            dynamic: ctx.dynamic,
        };
        for extension in subscribers {
            let fut = extension.before_tool_call(&snapshot, &host);
            guarded(
                self,
                turn_id,
                &**extension,
                ExtensionHook::BeforeToolCall,
                fut,
            )
            .await?;
        }
        Ok(())
    }

    /// Offers a tool call's outcome to every `after_tool_call` subscriber.
    pub(crate) async fn after_tool_call(
        &self,
        turn_id: Option<&str>,
        ctx: &ToolCallResultContext,
    ) -> Result<(), EngineError> {
        let mut subscribers = self
            .extensions
            .subscribed(ExtensionHook::AfterToolCall)
            .peekable();
        if subscribers.peek().is_none() {
            return Ok(());
        }
        let host = SessionHost { inner: self };
        let snapshot = ToolResultSnapshot {
            tool_name: ctx.tool_name.clone(),
            tool_call_id: ctx.tool_call_id.clone(),
            input: ctx.input.clone(),
            step_number: ctx.step_number,
            duration_ms: ctx.duration_ms,
            success: ctx.success,
            output: ctx.output.clone(),
            error: ctx.error.clone(),
            dynamic: ctx.dynamic,
        };
        for extension in subscribers {
            let fut = extension.after_tool_call(&snapshot, &host);
            guarded(
                self,
                turn_id,
                &**extension,
                ExtensionHook::AfterToolCall,
                fut,
            )
            .await?;
        }
        Ok(())
    }

    /// At a step's end: each extension delivers the chunks it batched, then sees the step.
    pub(crate) async fn on_step_finish(
        &self,
        turn_id: Option<&str>,
        ctx: &StepContext,
    ) -> Result<(), EngineError> {
        let extensions = &self.extensions;
        if extensions.is_empty() {
            return Ok(());
        }
        let host = SessionHost { inner: self };
        let record = &ctx.record;
        let snapshot = StepSnapshot {
            step_number: ctx.step_number,
            finish_reason: record.finish_reason.as_str().to_owned(),
            text: record.text.clone(),
            reasoning_text: record.reasoning_text.clone(),
            tool_call_count: u32::try_from(record.tool_calls.len()).unwrap_or(u32::MAX),
            tool_result_count: u32::try_from(record.tool_results.len()).unwrap_or(u32::MAX),
            usage: UsageSnapshot::from(&record.usage),
            provider_metadata: record.provider_metadata.clone(),
        };
        for extension in &extensions.list {
            if extension.subscribes(ExtensionHook::OnChunk) {
                let fut = extension.flush_chunks(&host);
                guarded(self, turn_id, &**extension, ExtensionHook::OnChunk, fut).await?;
            }
            if extension.subscribes(ExtensionHook::OnStepFinish) {
                let fut = extension.on_step_finish(&snapshot, &host);
                guarded(
                    self,
                    turn_id,
                    &**extension,
                    ExtensionHook::OnStepFinish,
                    fut,
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Whether any extension subscribes to `hook`.
    pub(crate) fn has_subscribers(&self, hook: ExtensionHook) -> bool {
        self.extensions.subscribed(hook).next().is_some()
    }

    /// Offers a logged stream part to every `on_chunk` subscriber.
    pub(crate) async fn on_chunk(
        &self,
        turn_id: Option<&str>,
        ctx: &ChunkContext,
    ) -> Result<(), EngineError> {
        let mut subscribers = self
            .extensions
            .subscribed(ExtensionHook::OnChunk)
            .peekable();
        if subscribers.peek().is_none() {
            return Ok(());
        }
        let host = SessionHost { inner: self };
        let snapshot = ChunkSnapshot::from(&ctx.chunk);
        for extension in subscribers {
            let fut = extension.on_chunk(&snapshot, &host);
            guarded(self, turn_id, &**extension, ExtensionHook::OnChunk, fut).await?;
        }
        Ok(())
    }
}
