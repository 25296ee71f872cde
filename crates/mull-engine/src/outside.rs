//! The outside world a session touches, as one seam: the language models its steps call, the
//! tools its turns offer, and the points where it is about to call one of the agent's hooks.
//!
//! It is injected like the [`Clock`](mull_core::Clock) and the [`IdSource`](mull_core::IdSource)
//! ([`SessionOptions::outside`](crate::SessionOptions::outside)), and the default,
//! [`RealWorld`], changes nothing: the agent's own models and tools, and no pause before a hook.
//! Another implementation stands in for the world without wrapping the agent — the session
//! runs the agent's code as itself, and only what crosses this seam is served differently:
//!
//! - re-execution replay ([`crate::replay`]) presents every model under the name the agent
//!   chose but streams the recorded output, answers every tool call with its recorded result,
//!   and uses the hook points to re-issue recorded cancellations and to stop where a recorded
//!   process stopped;
//! - a sub-agent's session reports its progress to the parent's tool call at its hook points
//!   (see [`crate::subagent`]);
//! - a test harness can serve a model or a tool from its own recording.
//!
//! A sub-agent's session shares its parent's outside world, as it shares its clock and ids.

use std::sync::Arc;

use async_trait::async_trait;
use mull_core::{HookName, LanguageModel};

use crate::context::{
    ChatResponseResult, ChunkContext, PrepareStepContext, StepContext, ToolCallContext,
    ToolCallResultContext, TurnContext,
};
use crate::tool::ToolSet;

/// What a session reaches outside the agent's decisions. Every method has a default that lets
/// the real world through; implement only what you stand in for.
#[async_trait]
pub trait Outside: Send + Sync {
    /// The model a step calls, given the one the agent chose: its default
    /// ([`Agent::model`](crate::Agent::model)), a [`ModelChoice`](crate::ModelChoice) of
    /// `before_turn` or `before_step`, or what [`Agent::resolve_model`](crate::Agent::resolve_model)
    /// answered for an id. Hooks see the returned model as the turn's (its provider and model
    /// id are recorded in `turn_configured`), so a stand-in keeps the chosen one's names unless
    /// it means to change them.
    fn model(&self, chosen: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        chosen
    }

    /// The tools a turn offers. Every tool passes through here once per turn: first the merged
    /// set (the agent's, the session's own, the MCP servers', the client's and the caller's),
    /// then the tools `before_turn` adds. Whatever is returned is what the model is offered,
    /// what hooks see and what executes.
    fn tools(&self, tools: ToolSet) -> ToolSet {
        tools
    }

    /// The engine is about to call the agent's hook at `point` (for an observer hook, the event
    /// it observes is already appended). The session waits for this to return before it goes
    /// on, outside the hook's time limit: the place to act on a running turn from outside at a
    /// known point (cancel it, hold it), or to report what it does.
    async fn at_hook(&self, point: HookPoint<'_>) {
        let _ = point;
    }
}

/// The outside world as it is: the agent's models and tools, unchanged, and no pause.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealWorld;

impl Outside for RealWorld {}

/// Where the engine is about to call one of the agent's hooks, with what the hook will see.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum HookPoint<'a> {
    BeforeTurn(&'a TurnContext),
    BeforeStep(&'a PrepareStepContext),
    BeforeToolCall(&'a ToolCallContext),
    AfterToolCall(&'a ToolCallResultContext),
    OnStepFinish(&'a StepContext),
    OnChunk(&'a ChunkContext),
    OnChatResponse(&'a ChatResponseResult),
}

impl HookPoint<'_> {
    /// The hook about to run.
    pub fn hook(&self) -> HookName {
        match self {
            HookPoint::BeforeTurn(_) => HookName::BeforeTurn,
            HookPoint::BeforeStep(_) => HookName::BeforeStep,
            HookPoint::BeforeToolCall(_) => HookName::BeforeToolCall,
            HookPoint::AfterToolCall(_) => HookName::AfterToolCall,
            HookPoint::OnStepFinish(_) => HookName::OnStepFinish,
            HookPoint::OnChunk(_) => HookName::OnChunk,
            HookPoint::OnChatResponse(_) => HookName::OnChatResponse,
        }
    }
}

impl std::fmt::Debug for HookPoint<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HookPoint({:?})", self.hook())
    }
}
