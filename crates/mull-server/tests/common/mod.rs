//! What the server's test files share: the router bound to 127.0.0.1:0 over a log in a
//! temporary folder, with the examples' scripted agent for every chat.

#![allow(dead_code)]

#[path = "../../examples/common/agent.rs"]
pub mod agent;

use std::net::SocketAddr;

use mull_server::{bind, ServerConfig, ServerState};
use mull_store::Log;
use serde_json::Value;
use tokio::sync::oneshot;

/// A running server; it stops when dropped (or, waiting for it, on [`TestServer::shut_down`]).
pub struct TestServer {
    pub addr: SocketAddr,
    pub log: Log,
    _dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestServer {
    /// Starts a server with no token and the default state.
    pub async fn start() -> TestServer {
        TestServer::start_with(None, |s| s).await
    }

    /// Starts a server that requires `token` (when set), with the state `configure` returns.
    pub async fn start_with(
        token: Option<&str>,
        configure: impl FnOnce(ServerState) -> ServerState,
    ) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("chat.db")).expect("log");
        let state = configure(ServerState::with_agents(
            log.clone(),
            std::sync::Arc::new(|chat_id: &str| agent::ScriptAgent::for_chat(chat_id)),
        ));
        let config = ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: token.map(str::to_owned),
        };
        let bound = bind(&config, state).await.expect("bind");
        let addr = bound.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = bound
                .run(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        TestServer {
            addr,
            log,
            _dir: dir,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `http://` this server's address, then `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs `body` to `/api/chat`.
    pub async fn post_chat(&self, client: &reqwest::Client, body: &Value) -> reqwest::Response {
        client
            .post(self.url("/api/chat"))
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
