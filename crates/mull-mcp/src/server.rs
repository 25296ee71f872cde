//! One MCP server as a tool source: its name and configuration checked once, its tools listed
//! for every turn.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull_engine::{ToolListing, ToolSet, ToolSource};
use rmcp::model::Tool as RemoteTool;

use crate::connection::Shared;
use crate::tool::McpTool;
use crate::transport::McpTransport;

/// How long starting (or reaching) a server and listing its tools may take.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tool call may take before it is a tool error.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A server's configuration was not usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// Tool names are `tool_<server>_<name>`: the server's name must fit in one.
    #[error(
        "MCP server name {0:?} must be non-empty and use only ASCII letters, digits, '_' and '-'"
    )]
    BadName(String),
    /// A header given for an HTTP server is not a valid HTTP header.
    #[error("MCP server {server:?}: header {header:?} is not a valid HTTP header")]
    BadHeader { server: String, header: String },
}

/// One MCP server whose tools join every turn of the agent or session it is given to.
///
/// Cheap to clone: clones share one connection.
#[derive(Clone)]
pub struct McpServer {
    pub(crate) shared: Arc<Shared>,
}

impl McpServer {
    /// A server called `name` (its tools are `tool_<name>_<tool>`), reached by `transport`.
    pub fn new(name: impl Into<String>, transport: McpTransport) -> Result<McpServer, McpError> {
        let name = name.into();
        let key: String = name.chars().filter(|c| *c != '-').collect();
        if key.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(McpError::BadName(name));
        }
        let mut headers = HashMap::new();
        if let McpTransport::Http { headers: given, .. } = &transport {
            for (header, value) in given {
                let bad = || McpError::BadHeader {
                    server: name.clone(),
                    header: header.clone(),
                };
                let header_name =
                    http::HeaderName::from_bytes(header.as_bytes()).map_err(|_| bad())?;
                let header_value = http::HeaderValue::from_str(value).map_err(|_| bad())?;
                headers.insert(header_name, header_value);
            }
        }
        Ok(McpServer {
            shared: Arc::new(Shared::new(
                name,
                key,
                transport,
                headers,
                DEFAULT_START_TIMEOUT,
                DEFAULT_CALL_TIMEOUT,
            )),
        })
    }

    /// Bounds starting the server and listing its tools (default [`DEFAULT_START_TIMEOUT`])
    /// and each tool call (default [`DEFAULT_CALL_TIMEOUT`]). Call before the server is shared.
    pub fn with_timeouts(mut self, start: Duration, call: Duration) -> McpServer {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.start_timeout = start;
            shared.call_timeout = call;
        }
        self
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The server behind an `Arc`, ready for an agent or [`mull_engine::SessionOptions`].
    pub fn shared(self) -> Arc<dyn ToolSource> {
        Arc::new(self)
    }

    /// Closes the connection (a stdio child is stopped and waited for). The next listing or
    /// call connects again.
    pub async fn close(&self) {
        self.shared.discard().await;
    }

    /// The tools the server offers now, as listed from it (not from the cache).
    pub async fn list_tools(&self) -> Result<ToolSet, String> {
        let remote = self.shared.list_remote().await?;
        Ok(self.tool_set(&remote))
    }

    fn tool_set(&self, remote: &[RemoteTool]) -> ToolSet {
        let mut tools = ToolSet::new();
        for tool in remote {
            tools.insert(mull_engine::ToolEntry::Server(Arc::new(McpTool::new(
                Arc::clone(&self.shared),
                tool,
            ))));
        }
        tools
    }
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.shared.name)
            .field("transport", self.shared.transport())
            .finish()
    }
}

#[async_trait]
impl ToolSource for McpServer {
    fn name(&self) -> &str {
        &self.shared.name
    }

    async fn list(&self) -> ToolListing {
        match self.shared.list_remote().await {
            Ok(remote) => ToolListing {
                tools: self.tool_set(&remote),
                problem: None,
            },
            Err(problem) => match self.shared.last_listed() {
                Some(remote) => ToolListing {
                    tools: self.tool_set(&remote),
                    problem: Some(format!("{problem}; its tools as last listed are offered")),
                },
                None => ToolListing {
                    tools: ToolSet::new(),
                    problem: Some(format!("{problem}; none of its tools are offered")),
                },
            },
        }
    }
}
