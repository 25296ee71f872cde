//! What `configure_session` sets up once per session: the compaction callback and context
//! overflow recovery. (Context blocks, search and skills come with the full Session.)

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use mull_core::{CompactionReason, UIMessage};

use crate::error::HookError;

/// What a compaction callback is asked to shorten.
#[derive(Debug, Clone)]
pub struct CompactionRequest {
    /// The conversation as it stands.
    pub messages: Vec<UIMessage>,
    pub reason: CompactionReason,
    /// 1 for the first compaction of this turn.
    pub attempt: u32,
}

/// What a compaction callback did: which messages it replaced and by what.
#[derive(Debug, Clone, Default)]
pub struct Compaction {
    /// Ids of the messages to remove from the conversation.
    pub replaced_ids: Vec<String>,
    /// A message shown where the first replaced one stood.
    pub summary: Option<UIMessage>,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

type CompactionFn =
    dyn Fn(CompactionRequest) -> BoxFuture<'static, Result<Compaction, HookError>> + Send + Sync;

/// Recovery from a context-overflow error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOverflow {
    /// Compact and retry when `classify_chat_error` answers `context_overflow`.
    pub reactive: bool,
    /// How many compact-and-retry rounds a turn may take.
    pub max_retries: u32,
}

impl Default for ContextOverflow {
    fn default() -> ContextOverflow {
        ContextOverflow {
            reactive: false,
            max_retries: 1,
        }
    }
}

/// The session's configuration, built in `configure_session`.
#[derive(Clone, Default)]
pub struct SessionConfig {
    pub(crate) compaction: Option<Arc<CompactionFn>>,
    pub(crate) context_overflow: ContextOverflow,
}

impl SessionConfig {
    /// A configuration with nothing set: no compaction, overflow recovery off.
    pub fn new() -> SessionConfig {
        SessionConfig::default()
    }

    /// The callback that shortens the conversation when it must be compacted.
    pub fn on_compaction<F, Fut>(mut self, f: F) -> SessionConfig
    where
        F: Fn(CompactionRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Compaction, HookError>> + Send + 'static,
    {
        self.compaction = Some(Arc::new(move |req| Box::pin(f(req))));
        self
    }

    /// Turns reactive overflow recovery on or off, with at most `max_retries` rounds per turn.
    pub fn context_overflow(mut self, reactive: bool, max_retries: u32) -> SessionConfig {
        self.context_overflow = ContextOverflow {
            reactive,
            max_retries,
        };
        self
    }

    /// The overflow recovery settings.
    pub fn overflow(&self) -> ContextOverflow {
        self.context_overflow
    }

    /// Whether a compaction callback is registered.
    pub fn has_compaction(&self) -> bool {
        self.compaction.is_some()
    }
}

impl std::fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionConfig")
            .field("compaction", &self.compaction.is_some())
            .field("context_overflow", &self.context_overflow)
            .finish()
    }
}
