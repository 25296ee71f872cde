//! The state one MCP server's clones and tools share: its configuration, its connection (made
//! lazily, made again once closed) and the tools it listed last.

/// The most of a stdio server's stderr kept for an error message, in bytes.
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use rmcp::model::Tool as RemoteTool;
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use tokio::io::AsyncReadExt;

use crate::transport::McpTransport;

const STDERR_TAIL: usize = 2_000;

pub(crate) struct Shared {
    /// The name as given (errors and traces use it).
    pub(crate) name: String,
    /// The name as it appears in tool names (`-` removed, as Think does).
    pub(crate) key: String,
    transport: McpTransport,
    headers: HashMap<http::HeaderName, http::HeaderValue>,
    pub(crate) start_timeout: Duration,
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

impl Shared {
    /// A server not yet connected.
    pub(crate) fn new(
        name: String,
        key: String,
        transport: McpTransport,
        headers: HashMap<http::HeaderName, http::HeaderValue>,
        start_timeout: Duration,
        call_timeout: Duration,
    ) -> Shared {
        Shared {
            name,
            key,
            transport,
            headers,
            start_timeout,
            call_timeout,
            connection: tokio::sync::Mutex::new(None),
            listed: StdMutex::new(None),
        }
    }

    /// How the server is reached.
    pub(crate) fn transport(&self) -> &McpTransport {
        &self.transport
    }

    /// What the last successful listing returned, if any.
    pub(crate) fn last_listed(&self) -> Option<Vec<RemoteTool>> {
        self.listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Lists every tool (all pages), connecting first when needed; remembers the list.
    pub(crate) async fn list_remote(&self) -> Result<Vec<RemoteTool>, String> {
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
