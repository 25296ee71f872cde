//! What the server's test files share: the router on 127.0.0.1:0 with the scripted agent,
//! an SSE reader, and the log read back per session.

#![allow(dead_code)]

#[path = "../../examples/common/agent.rs"]
pub mod agent;

use std::net::SocketAddr;

use futures::StreamExt;
use mull_core::Envelope;
use mull_server::ui_stream::UiStreamMapper;
use mull_server::{bind, ConnectionLimits, ServerConfig, ServerState};
use mull_store::Log;
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// A running server; it stops when dropped (or, waiting for it, on [`Server::shut_down`]).
pub struct Server {
    pub addr: SocketAddr,
    pub log: Log,
    /// Shares the open sessions with the running router.
    pub state: ServerState,
    /// Whether it drains (what `/readyz` answers from).
    pub lifecycle: std::sync::Arc<mull_server::Lifecycle>,
    _dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Posts `body` to `/api/chat`, as the AI SDK's `useChat` does.
    pub async fn post_chat(&self, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("http://{}/api/chat", self.addr))
            .json(body)
            .send()
            .await
            .expect("post")
    }

    /// Stops the server and waits until it has.
    pub async fn shut_down(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub async fn server_with(
    token: Option<&str>,
    configure: impl FnOnce(ServerState) -> ServerState,
) -> Server {
    server_with_limits(token, ConnectionLimits::default(), configure).await
}

/// A server with its own connection cap and request-head deadline.
pub async fn server_with_limits(
    token: Option<&str>,
    limits: ConnectionLimits,
    configure: impl FnOnce(ServerState) -> ServerState,
) -> Server {
    // One agent per chat for the server's life: a chat's script goes on where it stopped
    // when its session is evicted and re-opened, as a stateless model would.
    let agents = std::sync::Mutex::new(std::collections::HashMap::new());
    let agents: mull_server::AgentSource = std::sync::Arc::new(move |chat_id: &str| {
        let mut agents = agents.lock().expect("agents");
        std::sync::Arc::clone(
            agents
                .entry(chat_id.to_owned())
                .or_insert_with(|| agent::ScriptAgent::for_chat(chat_id)),
        )
    });
    start(token, limits, agents, configure).await
}

/// A server whose chats all run the agent `agents` picks for them.
pub async fn server_for(agents: mull_server::AgentSource) -> Server {
    start(None, ConnectionLimits::default(), agents, |s| s).await
}

/// A server with the scripted agent and its own config (origins, hosts, caps); the address is
/// 127.0.0.1:0.
pub async fn server_configured(configure: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut config = ServerConfig::default();
    configure(&mut config);
    let agents: mull_server::AgentSource =
        std::sync::Arc::new(|chat_id: &str| agent::ScriptAgent::for_chat(chat_id));
    start_with(config, agents, |s| s).await
}

async fn start(
    token: Option<&str>,
    limits: ConnectionLimits,
    agents: mull_server::AgentSource,
    configure: impl FnOnce(ServerState) -> ServerState,
) -> Server {
    // Every client of these tests is 127.0.0.1: its share of turns is its share of connections.
    let config = ServerConfig {
        token: token.map(str::to_owned),
        limits,
        max_turns_per_client: limits.max_per_client,
        // Unbounded unless a test sets it: its many chats all come from 127.0.0.1.
        max_bytes_per_client: usize::MAX,
        ..ServerConfig::default()
    };
    start_with(config, agents, configure).await
}

async fn start_with(
    mut config: ServerConfig,
    agents: mull_server::AgentSource,
    configure: impl FnOnce(ServerState) -> ServerState,
) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("chat.db")).expect("log");
    let state = configure(ServerState::with_agents(log.clone(), agents));
    config.addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let bound = bind(&config, state.clone()).await.expect("bind");
    let lifecycle = bound.lifecycle();
    let addr = bound.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = bound
            .run(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Server {
        addr,
        log,
        state,
        lifecycle,
        _dir: dir,
        stop: Some(stop),
        task: Some(task),
    }
}

pub async fn server() -> Server {
    server_with(None, |s| s).await
}

pub fn user_request(chat_id: &str, text: &str) -> Value {
    json!({
        "id": chat_id,
        "trigger": "submit-message",
        "messageId": null,
        "messages": [{"id": format!("u-{chat_id}"), "role": "user",
                      "parts": [{"type": "text", "text": text}]}],
        "tenant": "acme"
    })
}

/// Reads SSE events (`data:` payloads) until `[DONE]` or `limit` events.
pub async fn read_sse(response: reqwest::Response, limit: usize) -> (Vec<Value>, bool) {
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(bytes) = stream.next().await {
        buffer.push_str(&String::from_utf8_lossy(&bytes.expect("body bytes")));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data = event
                .strip_prefix("data: ")
                .expect("every event is a data line")
                .trim_end();
            if data == "[DONE]" {
                return (events, true);
            }
            events.push(serde_json::from_str(data).expect("chunk is JSON"));
            if events.len() == limit {
                return (events, false);
            }
        }
    }
    (events, false)
}

pub fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

pub async fn session_events(log: &Log, session: &str) -> Vec<Envelope> {
    log.flush().await.expect("flush");
    log.reader()
        .expect("reader")
        .session_page(session, 0, 100_000)
        .expect("page")
}

/// The UI stream of each turn of `session`, mapped from the log.
pub async fn turns_from_log(log: &Log, session: &str) -> Vec<Vec<Value>> {
    let mut turns: Vec<(String, UiStreamMapper, Vec<Value>)> = Vec::new();
    for env in session_events(log, session).await {
        let Some(turn_id) = env.turn_id.clone() else {
            continue;
        };
        if !turns.iter().any(|(id, _, _)| *id == turn_id) {
            turns.push((turn_id.clone(), UiStreamMapper::new(), Vec::new()));
        }
        if let Some((_, mapper, out)) = turns.iter_mut().find(|(id, _, _)| *id == turn_id) {
            for chunk in mapper.map(&env) {
                out.push(serde_json::to_value(chunk).expect("chunk"));
            }
        }
    }
    turns.into_iter().map(|(_, _, out)| out).collect()
}
