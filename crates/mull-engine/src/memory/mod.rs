//! What a session remembers beyond the messages sent to the model: compaction of a long
//! history ([`compaction`]), the system prompt built from named blocks the model may write
//! ([`context_blocks`]), full-text search of the conversation ([`search`]), and the token
//! counting they rely on ([`tokens`]).

pub(crate) mod block;
pub mod compaction;
pub mod context_blocks;
pub mod search;
pub(crate) mod search_index;
pub mod tokens;

use std::sync::Arc;

use crate::runtime::Runtime;
use crate::tool::ToolSet;

/// The tools the session itself offers (the second layer of the merge, after the agent's):
/// `update_context` when a block is writable, `search_messages` when asked for — served from
/// the recording instead when the session is a re-execution replay.
pub(crate) fn session_tools(inner: &Arc<Runtime>) -> ToolSet {
    let mut tools = ToolSet::new();
    for tool in context_blocks::update_context_tool(inner)
        .into_iter()
        .chain(search::search_tool(inner))
    {
        tools = tools.with(tool);
    }
    match &inner.options.serve_session_tools {
        Some(serve) => serve(inner, tools),
        None => tools,
    }
}
