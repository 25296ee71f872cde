//! The one hooks dispatcher: a session's agent, its extensions and the one failure guard
//! (`guard.rs`) around each of their hooks. Every part below the session that calls a hook —
//! a turn, compaction, a context block's provider — calls it here: bounded by the agent's hook
//! timeout (an extension's by its own), a failure or panic recorded as `hook_failed`, and the
//! observer hooks called in one order (the agent's, then each extension's in load order).

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use mull_core::HookName;

use super::extensions::ExtensionHooks;
use super::observed::Observed;
use crate::agent::Agent;
use crate::error::{EngineError, HookResult};
use crate::extension::ExtensionHook;
use crate::guard::{guarded, panic_text, record_failure, Caller};
use crate::outside::{HookPoint, Outside};
use crate::recorder::Recorder;

/// A session's agent and extensions, with the log their failures are recorded in.
pub(crate) struct Hooks {
    agent: Arc<dyn Agent>,
    extensions: ExtensionHooks,
    /// What happens before each of the agent's hooks (see [`Outside::at_hook`]).
    outside: Arc<dyn Outside>,
    recorder: Arc<Recorder>,
}

impl Hooks {
    /// The dispatcher of `agent`'s and `extensions`' hooks, recording their failures through
    /// `recorder`; `outside` sees each of the agent's hook points first.
    pub(crate) fn new(
        agent: Arc<dyn Agent>,
        extensions: ExtensionHooks,
        outside: Arc<dyn Outside>,
        recorder: Arc<Recorder>,
    ) -> Hooks {
        Hooks {
            agent,
            extensions,
            outside,
            recorder,
        }
    }

    /// The session's agent.
    pub(crate) fn agent(&self) -> &Arc<dyn Agent> {
        &self.agent
    }

    /// The session's extensions, for the hooks only they have (`before_turn`,
    /// `before_tool_call`).
    pub(crate) fn extensions(&self) -> &ExtensionHooks {
        &self.extensions
    }

    /// Runs `fut`, code of `caller`, under the agent's hook timeout. `Ok(Err(text))` means it
    /// failed (recorded as `hook_failed`) and the caller applies that hook's failure rule.
    pub(crate) async fn guard<T>(
        &self,
        turn_id: Option<&str>,
        caller: Caller<'_>,
        fut: impl Future<Output = HookResult<T>>,
    ) -> Result<Result<T, String>, EngineError> {
        let limit = self.agent.hook_timeout();
        guarded(&self.recorder, turn_id, caller, limit, fut).await
    }

    /// Runs one of the agent's hooks at `point` under its hook timeout, once the session's
    /// outside world has seen the point (outside the time limit: see [`Outside::at_hook`]).
    pub(crate) async fn guard_hook<T>(
        &self,
        turn_id: Option<&str>,
        point: HookPoint<'_>,
        fut: impl Future<Output = HookResult<T>>,
    ) -> Result<Result<T, String>, EngineError> {
        let hook = point.hook();
        self.outside.at_hook(point).await;
        self.guard(turn_id, Caller::agent(hook), fut).await
    }

    /// Runs one of the agent's synchronous hooks, `hook`: a panic is recorded as `hook_failed`
    /// (a log that refuses it is only logged, the caller being on its way to report something
    /// else) and gives `None`.
    pub(crate) fn catching<T>(
        &self,
        turn_id: Option<&str>,
        hook: HookName,
        call: impl FnOnce(&dyn Agent) -> T,
    ) -> Option<T> {
        // What the hook saw is dropped or handed back whole: a panic leaves nothing half-done.
        match catch_unwind(AssertUnwindSafe(|| call(&*self.agent))) {
            Ok(value) => Some(value),
            Err(panic) => {
                let caller = Caller::agent(hook);
                let error = panic_text(&panic);
                if let Err(e) = record_failure(&self.recorder, turn_id, caller, error, true, false)
                {
                    tracing::warn!(error = %e, "hook_failed could not be recorded");
                }
                None
            }
        }
    }

    /// Calls the agent's hook for `observed`, then each extension's in load order (on a
    /// step's end, each extension first delivers the chunks it batched). A hook's failure is
    /// recorded and the turn goes on; only a log that refuses `hook_failed` is an error, and
    /// then no extension is called.
    pub(crate) async fn dispatch(
        &self,
        turn_id: Option<&str>,
        observed: &Observed,
    ) -> Result<(), EngineError> {
        let agent = &self.agent;
        let fut = match observed {
            Observed::Chunk(ctx) => agent.on_chunk(ctx),
            Observed::ToolResult(ctx) => agent.after_tool_call(ctx),
            Observed::Step(ctx) => agent.on_step_finish(ctx),
            Observed::ChatResponse(result) => agent.on_chat_response(result),
        };
        // A failure is recorded as `hook_failed`, and the extensions are still called.
        self.guard_hook(turn_id, observed.point(), fut).await?.ok();
        let extensions = &self.extensions;
        match observed {
            // Per streamed part: the extensions' calls wait in a future of their own, built
            // only when one subscribes, so that dispatching a chunk stays small to build and
            // move.
            Observed::Chunk(ctx) if extensions.has_subscribers(ExtensionHook::OnChunk) => {
                Box::pin(extensions.on_chunk(turn_id, ctx)).await
            }
            Observed::Chunk(_) => Ok(()),
            Observed::ToolResult(ctx) => extensions.after_tool_call(turn_id, ctx).await,
            Observed::Step(ctx) => extensions.on_step_finish(turn_id, ctx).await,
            // Extensions do not subscribe to it.
            Observed::ChatResponse(_) => Ok(()),
        }
    }
}
