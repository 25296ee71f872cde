//! One MCP server: how to reach it, its connection (made lazily, made again once closed), and
//! the tools it listed last.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use mull_engine::{ToolListing, ToolSet, ToolSource};
use rmcp::model::Tool as RemoteTool;
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use tokio::io::AsyncReadExt;

use crate::tool::McpTool;

/// How long starting (or reaching) a server and listing its tools may take.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tool call may take before it is a tool error.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The most of a stdio server's stderr kept for an error message, in bytes.
const STDERR_TAIL: usize = 2_000;

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

/// How a server is reached.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout. It is started at the first
    /// listing, started again when it has died, and killed when the server is closed or
    /// dropped.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

impl McpTransport {
    /// A child process started with `command`.
    pub fn stdio(command: impl Into<String>) -> McpTransport {
        McpTransport::Stdio {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        }
    }

    /// A streamable HTTP endpoint at `url` (e.g. `http://127.0.0.1:8000/mcp`).
    pub fn http(url: impl Into<String>) -> McpTransport {
        McpTransport::Http {
            url: url.into(),
            headers: Vec::new(),
        }
    }

    /// Adds an argument (stdio only; ignored for HTTP).
    pub fn arg(mut self, arg: impl Into<String>) -> McpTransport {
        if let McpTransport::Stdio { args, .. } = &mut self {
            args.push(arg.into());
        }
        self
    }

    /// Sets an environment variable of the child (stdio only).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> McpTransport {
        if let McpTransport::Stdio { env, .. } = &mut self {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// Sets the child's working directory (stdio only).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> McpTransport {
        if let McpTransport::Stdio { cwd, .. } = &mut self {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds a request header (HTTP only), e.g. an authorization header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> McpTransport {
        if let McpTransport::Http { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }
}

/// One MCP server whose tools join every turn of the agent or session it is given to.
///
/// Cheap to clone: clones share one connection.
#[derive(Clone)]
pub struct McpServer {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    /// The name as given (errors and traces use it).
    pub(crate) name: String,
    /// The name as it appears in tool names (`-` removed, as Think does).
    pub(crate) key: String,
    transport: McpTransport,
    headers: HashMap<http::HeaderName, http::HeaderValue>,
    start_timeout: Duration,
    pub(crate) call_timeout: Duration,
    connection: tokio::sync::Mutex<Option<Connection>>,
    /// What the last successful listing returned.
    listed: StdMutex<Option<Vec<RemoteTool>>>,
}

struct Connection {
    service: RunningService<RoleClient, ()>,
    /// The tail of a stdio child's stderr, for messages about its failure.
    stderr: Option<Arc<StdMutex<String>>>,
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
            shared: Arc::new(Shared {
                name,
                key,
                transport,
                headers,
                start_timeout: DEFAULT_START_TIMEOUT,
                call_timeout: DEFAULT_CALL_TIMEOUT,
                connection: tokio::sync::Mutex::new(None),
                listed: StdMutex::new(None),
            }),
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
            .field("transport", &self.shared.transport)
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
            Err(problem) => {
                let cached = self
                    .shared
                    .listed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                match cached {
                    Some(remote) => ToolListing {
                        tools: self.tool_set(&remote),
                        problem: Some(format!("{problem}; its tools as last listed are offered")),
                    },
                    None => ToolListing {
                        tools: ToolSet::new(),
                        problem: Some(format!("{problem}; none of its tools are offered")),
                    },
                }
            }
        }
    }
}

impl Shared {
    /// Lists every tool (all pages), connecting first when needed; remembers the list.
    async fn list_remote(&self) -> Result<Vec<RemoteTool>, String> {
        let peer = self.peer().await?;
        let listed = match tokio::time::timeout(self.start_timeout, peer.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                return Err(self
                    .failure(&format!("could not list its tools: {e}"))
                    .await)
            }
            Err(_) => {
                return Err(format!(
                    "MCP server {:?} did not list its tools within {} ms",
                    self.name,
                    self.start_timeout.as_millis()
                ))
            }
        };
        *self.listed.lock().unwrap_or_else(|p| p.into_inner()) = Some(listed.clone());
        Ok(listed)
    }

    /// A handle to the running server, starting (or reaching) it first when there is no
    /// open connection.
    pub(crate) async fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let mut connection = self.connection.lock().await;
        if let Some(open) = connection.as_ref() {
            if !open.service.is_closed() {
                return Ok(open.service.peer().clone());
            }
        }
        // A connection that closed (the process died, the endpoint went away) is replaced.
        if let Some(closed) = connection.take() {
            let _ = closed.service.cancel().await;
        }
        let opened = match tokio::time::timeout(self.start_timeout, self.connect()).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(format!(
                    "MCP server {:?} did not start within {} ms",
                    self.name,
                    self.start_timeout.as_millis()
                ))
            }
        };
        let peer = opened.service.peer().clone();
        *connection = Some(opened);
        Ok(peer)
    }

    async fn connect(&self) -> Result<Connection, String> {
        let failed =
            |e: &dyn std::fmt::Display| format!("MCP server {:?} failed to start: {e}", self.name);
        match &self.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).kill_on_drop(true);
                for (key, value) in env {
                    cmd.env(key, value);
                }
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| failed(&format_args!("{command}: {e}")))?;
                let tail = stderr.map(|stderr| {
                    let tail = Arc::new(StdMutex::new(String::new()));
                    tokio::spawn(keep_tail(stderr, Arc::clone(&tail)));
                    tail
                });
                match ().serve(transport).await {
                    Ok(service) => Ok(Connection {
                        service,
                        stderr: tail,
                    }),
                    Err(e) => {
                        // Give the reader a moment to collect what the child said as it died.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Err(failed(&with_stderr(&e.to_string(), tail.as_ref())))
                    }
                }
            }
            McpTransport::Http { url, .. } => {
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(self.headers.clone());
                let transport = StreamableHttpClientTransport::from_config(config);
                match ().serve(transport).await {
                    Ok(service) => Ok(Connection {
                        service,
                        stderr: None,
                    }),
                    Err(e) => Err(failed(&format_args!("{url}: {e}"))),
                }
            }
        }
    }

    /// Drops the connection (stopping a stdio child), so the next request connects again.
    pub(crate) async fn discard(&self) {
        let connection = self.connection.lock().await.take();
        if let Some(connection) = connection {
            let _ = connection.service.cancel().await;
        }
    }

    /// A sentence about a failed request, naming the server, with what a stdio child last
    /// wrote to stderr.
    pub(crate) async fn failure(&self, what: &str) -> String {
        let tail = {
            let connection = self.connection.lock().await;
            connection.as_ref().and_then(|c| c.stderr.clone())
        };
        if tail.is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        format!(
            "MCP server {:?} {}",
            self.name,
            with_stderr(what, tail.as_ref())
        )
    }
}

fn with_stderr(what: &str, tail: Option<&Arc<StdMutex<String>>>) -> String {
    let said = tail
        .map(|t| {
            t.lock()
                .unwrap_or_else(|p| p.into_inner())
                .trim()
                .to_owned()
        })
        .unwrap_or_default();
    if said.is_empty() {
        what.to_owned()
    } else {
        format!("{what} (its stderr ends: {said})")
    }
}

/// Reads a child's stderr to its end, keeping the last [`STDERR_TAIL`] bytes.
async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<StdMutex<String>>) {
    let mut buf = [0u8; 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut kept = tail.lock().unwrap_or_else(|p| p.into_inner());
                kept.push_str(&String::from_utf8_lossy(&buf[..n]));
                if kept.len() > STDERR_TAIL {
                    let mut cut = kept.len() - STDERR_TAIL;
                    while !kept.is_char_boundary(cut) {
                        cut += 1;
                    }
                    kept.drain(..cut);
                }
            }
        }
    }
}
