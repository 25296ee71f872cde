//! What a session remembers beyond the messages sent to the model, done on a session's
//! runtime: compaction of a long history ([`compaction`]), the system prompt built from named
//! blocks the model may write ([`context_blocks`]), full-text search of the conversation
//! ([`search`]). What they are configured with — the blocks, [`skills`], the token counting
//! ([`tokens`]) — is the session's configuration, below the runtime
//! ([`crate::session_config`]), and re-exported here.

pub mod compaction;
pub mod context_blocks;
pub mod search;

pub use crate::session_config::{skills, tokens};

use std::sync::Arc;

use crate::recorder::Recorder;
use crate::runtime::search_index::SearchIndex;
use crate::session_config::SessionConfig;
use crate::tool::ToolSet;

/// The tools the session itself offers (the layer of the merge after the agent's):
/// `update_context` when a block is writable, `search_messages` when asked for, `load_skill`
/// when the session has skills.
pub(crate) fn session_tools(
    recorder: &Arc<Recorder>,
    config: &Arc<SessionConfig>,
    index: &Arc<SearchIndex>,
) -> ToolSet {
    let mut tools = ToolSet::new();
    for tool in context_blocks::update_context_tool(recorder, config)
        .into_iter()
        .chain(search::search_tool(recorder, config, index))
        .chain(skills::load_skill_tool(&config.skills))
    {
        tools = tools.with(tool);
    }
    tools
}

#[cfg(test)]
mod tests {
    use mull_core::ContextBlockSource;

    use super::*;
    use crate::runtime::testing::runtime;
    use crate::session_config::block::ContextBlock;
    use crate::session_config::SessionConfig;

    /// Memory runs on a session's runtime alone: its tools are offered and a block write is
    /// recorded and folded into the projection, with no `Session` in sight.
    #[tokio::test]
    async fn memory_runs_on_a_runtime_without_a_session() {
        let config = SessionConfig::new()
            .with_context("notes", ContextBlock::writable("what the user likes", 50))
            .with_search_tool();
        let test = runtime("memory", config).await;
        let rt = &test.runtime;
        let tools = session_tools(rt.recorder(), rt.shared_config(), rt.search_index());
        assert_eq!(tools.names(), ["update_context", "search_messages"]);
        context_blocks::write(
            rt.recorder(),
            "notes",
            "green tea",
            ContextBlockSource::Application,
            None,
        )
        .await
        .expect("the write is recorded");
        let notes = rt
            .recorder()
            .read(|s| s.context_blocks.get("notes").cloned());
        assert_eq!(notes.as_deref(), Some("green tea"));
        let prompt = context_blocks::build_system_prompt(
            rt.recorder(),
            rt.hooks(),
            rt.config(),
            None,
            false,
        )
        .await
        .expect("the prompt builds")
        .expect("blocks make the prompt");
        assert!(prompt.contains("green tea"), "{prompt}");
    }
}
