//! Tools that live outside the process and are listed again for every turn: an MCP server's
//! tools are the case in point (the `mull-mcp` crate implements [`ToolSource`] over the
//! official MCP SDK). The engine knows only this trait, so it depends on no MCP library.
//!
//! Where they go: Think's merged tool set is "workspace + getTools + session + MCP + client +
//! caller", so a turn lists every source after the agent's and the session's own tools and
//! before the client's and the caller's — the agent's sources ([`crate::Agent::mcp_servers`])
//! first, then the session's ([`crate::SessionOptions::with_mcp_server`]).
//!
//! A source that cannot list its tools never fails the turn: its listing says what went wrong
//! ([`ToolListing::problem`]), the turn's `turn_configured` event records that sentence, and the
//! turn goes on with the tools the source could still answer for (an MCP server keeps the last
//! list it served, so a call to a server that died answers with a tool error naming it).

use std::sync::Arc;

use async_trait::async_trait;

use crate::tool::ToolSet;

/// What a source offers for one turn.
#[derive(Debug, Clone, Default)]
pub struct ToolListing {
    /// The tools, already named as the model will call them.
    pub tools: ToolSet,
    /// Why the listing is incomplete (the source could not be reached, timed out …), naming
    /// the source; `None` when it listed normally.
    pub problem: Option<String>,
}

/// Tools listed from outside the process at every turn's setup.
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// The source's name (an MCP server's), for errors and traces.
    fn name(&self) -> &str;

    /// The tools the source offers now. Must return within a bounded time: a turn waits for it.
    async fn list(&self) -> ToolListing;
}

/// Lists every source of a turn — the agent's, then the session's, as `sources` holds them —
/// at once, and merges their tools in that order. Returns the tools and the problems the
/// listings reported.
pub(crate) async fn list_all(sources: &[Arc<dyn ToolSource>]) -> (ToolSet, Vec<String>) {
    let mut tools = ToolSet::new();
    let mut problems = Vec::new();
    if sources.is_empty() {
        return (tools, problems);
    }
    let listings = futures::future::join_all(sources.iter().map(|s| s.list())).await;
    for listing in listings {
        tools.merge(&listing.tools);
        problems.extend(listing.problem);
    }
    (tools, problems)
}
