//! The session's memory, as the application reaches it: context blocks, search of the
//! conversation and compaction on demand. The work itself is in `memory/`.

use std::collections::BTreeMap;

use mull_core::{CompactionReason, ContextBlockSource};

use crate::error::EngineError;
use crate::memory::compaction::Compactor;
use crate::memory::context_blocks::{
    build_system_prompt, check_write, render, write, ContextError,
};
use crate::memory::search::{search, SearchError, SearchHit};

use super::handle::Session;

impl Session {
    /// The current value of every context block.
    pub fn context_blocks(&self) -> BTreeMap<String, String> {
        self.read_state(|s| s.context_blocks.clone())
    }

    /// Sets a block's value as the application (any declared block, held to its budget). The
    /// next turn's prompt shows it.
    pub async fn set_context_block(&self, block: &str, content: &str) -> Result<(), ContextError> {
        check_write(self.inner.config(), block, content, false)?;
        write(
            self.inner.recorder(),
            block,
            content,
            ContextBlockSource::Application,
            None,
        )
        .await?;
        Ok(())
    }

    /// The system prompt built from the blocks' current values (what the next turn of a cached
    /// prompt sends), or `None` when the session has no blocks.
    pub fn context_prompt(&self) -> Option<String> {
        let config = self.inner.config();
        (!config.blocks.is_empty()).then(|| self.read_state(|s| render(config, &s.context_blocks)))
    }

    /// Runs every block provider now and records the values that changed (a cached prompt picks
    /// them up from the next turn).
    pub async fn refresh_context_blocks(&self) -> Result<(), EngineError> {
        let inner = &self.inner;
        build_system_prompt(inner.recorder(), inner.hooks(), inner.config(), None, true)
            .await
            .map(|_| ())
    }

    /// The messages of the conversation that contain every word of `query`, best first, at
    /// most `limit` of them.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, SearchError> {
        search(
            self.inner.recorder(),
            self.inner.search_index(),
            query,
            limit,
        )
    }

    /// Compacts the conversation now (reason `manual`), between turns: waits for the running
    /// turn to end. Returns whether the conversation got shorter. Refused from inside a hook of
    /// a running turn of this session, which it would wait on forever.
    pub async fn compact(&self) -> Result<bool, EngineError> {
        self.check_not_in_turn("compact")?;
        let _turn_lock = self.inner.turn_lock().lock().await;
        let inner = &self.inner;
        let compactor = Compactor {
            recorder: inner.recorder(),
            hooks: inner.hooks(),
            config: inner.config(),
            ids: &*inner.options().ids,
        };
        compactor.apply(None, CompactionReason::Manual, 1).await
    }
}
