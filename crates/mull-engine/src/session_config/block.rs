//! What a context block is: a named piece of the system prompt, either *provided* (an async
//! closure computes it) or *writable* (by the model or the application) within a token budget,
//! and why a write is refused. How blocks are rendered, written and refreshed is
//! `memory/context_blocks.rs`.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use mull_core::{ContextBlockSource, Event, TurnStatus};

use crate::error::{EngineError, HookError};
use crate::recorder::Recorder;

type ProviderFn = dyn Fn() -> BoxFuture<'static, Result<String, HookError>> + Send + Sync;

/// Computes a block's value (e.g. from a file, a database, the time of day).
#[derive(Clone)]
pub struct BlockProvider(Arc<ProviderFn>);

impl BlockProvider {
    /// A provider from an async closure.
    pub fn new<F, Fut>(f: F) -> BlockProvider
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, HookError>> + Send + 'static,
    {
        BlockProvider(Arc::new(move || f().boxed()))
    }

    pub(crate) async fn get(&self) -> Result<String, HookError> {
        (self.0)().await
    }
}

impl std::fmt::Debug for BlockProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockProvider(..)")
    }
}

/// One named piece of the system prompt.
#[derive(Debug, Clone, Default)]
pub struct ContextBlock {
    /// Computes the value; a block without one is written by the model or the application.
    pub provider: Option<BlockProvider>,
    /// What the block holds, shown to the model (and in the `update_context` tool).
    pub description: Option<String>,
    /// The most tokens a written value may have.
    pub max_tokens: Option<u64>,
    /// A block without a provider that only the application may write.
    pub read_only: bool,
}

impl ContextBlock {
    /// A block computed by `f` before turns.
    pub fn provided<F, Fut>(f: F) -> ContextBlock
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, HookError>> + Send + 'static,
    {
        ContextBlock {
            provider: Some(BlockProvider::new(f)),
            ..ContextBlock::default()
        }
    }

    /// A block the model may rewrite, described for it and held to `max_tokens`.
    pub fn writable(description: impl Into<String>, max_tokens: u64) -> ContextBlock {
        ContextBlock {
            description: Some(description.into()),
            max_tokens: Some(max_tokens),
            ..ContextBlock::default()
        }
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> ContextBlock {
        self.description = Some(description.into());
        self
    }

    /// Sets the token budget.
    pub fn with_max_tokens(mut self, max_tokens: u64) -> ContextBlock {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Keeps the model from writing the block (the application still may).
    pub fn read_only(mut self) -> ContextBlock {
        self.read_only = true;
        self
    }

    /// Whether the model may write the block.
    pub fn is_writable(&self) -> bool {
        self.provider.is_none() && !self.read_only
    }
}

/// A write that was refused.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("no context block {block:?} (the session has: {known})")]
    UnknownBlock { block: String, known: String },
    #[error("context block {block:?} is not writable by the model")]
    NotWritable { block: String },
    #[error(
        "content for context block {block:?} is {tokens} tokens; the block allows at most {max_tokens}"
    )]
    OverBudget {
        block: String,
        tokens: u64,
        max_tokens: u64,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Records a block's new value on the running turn (if any), without waiting for the flush.
pub(crate) fn append_write(
    recorder: &Recorder,
    block: &str,
    content: &str,
    source: ContextBlockSource,
    call_id: Option<String>,
) -> Result<(), EngineError> {
    let turn_id = recorder.read(|s| {
        s.turns
            .iter()
            .rev()
            .find(|t| t.status == TurnStatus::Running)
            .and_then(|t| t.turn_id.clone())
    });
    recorder.append(
        turn_id.as_deref(),
        Event::ContextBlockUpdated {
            block: block.to_owned(),
            content: content.to_owned(),
            source,
            call_id,
        },
    )?;
    Ok(())
}
