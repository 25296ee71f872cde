//! MCP servers' tools in mull turns.
//!
//! An [`McpServer`] is one Model Context Protocol server — a child process spoken to over
//! stdio, or a streamable HTTP endpoint — reached through the official Rust SDK (`rmcp`). It
//! is a [`mull_engine::ToolSource`]: give it to an agent ([`mull_engine::Agent::mcp_servers`])
//! or a session ([`mull_engine::SessionOptions::with_mcp_server`]) and every turn lists its
//! tools, merged after the agent's and the session's own tools and before the client's and the
//! caller's, as Think merges them.
//!
//! What a turn sees, as Think has it:
//! - A tool is named `tool_<server>_<name>` (the server's name with `-` removed), so two
//!   servers' tools cannot clash with each other or with the agent's.
//! - Its input schema is the server's, and the model's input is validated against it before
//!   any hook, like any tool's. It is `dynamic` (registered at run time) in hook contexts.
//! - A call is a tool call like any other: a decision, events, a duration, `after_tool_call`;
//!   a re-execution replay serves it from the log and never calls the server.
//! - The output is the server's whole `CallToolResult` (`content`, `structuredContent` …).
//!
//! What goes wrong stays a tool's problem, never the turn's: a server that cannot be started
//! or reached, dies, does not answer within its call timeout, or answers `isError` gives the
//! model a tool error whose text names the server. A server that cannot list its tools at a
//! turn's setup offers the tools it listed last (or none), and the turn's `turn_configured`
//! event says why. The connection is made at the first listing and made again when it is
//! found closed.

mod connection;
mod server;
mod tool;
mod transport;

pub use server::{McpError, McpServer, DEFAULT_CALL_TIMEOUT, DEFAULT_START_TIMEOUT};
pub use tool::tool_name;
pub use transport::McpTransport;
