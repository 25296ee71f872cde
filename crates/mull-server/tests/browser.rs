//! A real browser against the edge: headless Chromium (Debian's `chromium`, which `.ci/run`
//! installs) loads a small chat page and chats with the server the way the AI SDK's transports
//! do — `fetch` POSTing the chat request as JSON and reading the UI message stream
//! (`DefaultChatTransport`), and a WebSocket speaking the `send`/`chunk`/`end` frames
//! (`WebSocketChatTransport`). Served from an origin the server allows (`--allow-origin`), the
//! page chats over both; the same page served from another origin is refused over both, and
//! nothing it sent reaches the log.
//!
//! The page is plain JavaScript rather than a bundled `useChat`: it sends exactly what the
//! transports send (method, headers, body, frames), which is what the browser's origin rules
//! act on. In CI a missing Chromium fails the test; elsewhere it is skipped with a message.

mod harness;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::Html;
use axum::routing::{get, post};
use harness::server_configured;
use serde_json::Value;
use tokio::process::Command;
use tokio::sync::Notify;

/// The chat page: one chat over HTTP, one over WebSocket; the outcome is posted back to the
/// page's own server (`/result`), where the test waits for it.
const PAGE: &str = r#"<!doctype html>
<html><head><title>chat</title></head><body><pre id="result">pending</pre><script type="module">
const server = 'SERVER';
const tag = 'TAG';
const user = (chat) => [{ id: `u-${chat}`, role: 'user', parts: [{ type: 'text', text: 'Hello from a browser' }] }];
const result = {};
try {
  const response = await fetch(`${server}/api/chat`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ id: `http-${tag}`, messages: user(`http-${tag}`), trigger: 'submit-message', messageId: undefined }),
  });
  const text = await response.text();
  result.http = { status: response.status, done: text.includes('data: [DONE]'), finish: text.includes('"type":"finish"') };
} catch (e) {
  result.http = { refused: String(e) };
}
result.ws = await new Promise((resolve) => {
  let socket;
  try { socket = new WebSocket(`${server.replace('http', 'ws')}/api/chat/ws`); }
  catch (e) { resolve({ refused: String(e) }); return; }
  const seen = [];
  socket.onopen = () => socket.send(JSON.stringify({
    type: 'send', requestId: 'r1', id: `ws-${tag}`, trigger: 'submit-message', messages: user(`ws-${tag}`),
  }));
  socket.onmessage = (event) => {
    const frame = JSON.parse(event.data);
    seen.push(frame.type);
    if (frame.type === 'end' || frame.type === 'error') { socket.close(); resolve({ frames: seen }); }
  };
  socket.onerror = () => resolve({ refused: 'websocket error', frames: seen });
});
document.getElementById('result').textContent = JSON.stringify(result);
await fetch('/result', { method: 'POST', body: JSON.stringify(result) });
</script></body></html>"#;

/// Where Debian's Chromium is, if installed.
fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// The page's server: serves the page and takes the result it posts.
struct PageServer {
    addr: SocketAddr,
    result: Arc<(Notify, Mutex<Option<Value>>)>,
    task: tokio::task::JoinHandle<()>,
}

impl PageServer {
    /// Serves the page (pointing at `server`, tagging its chats `tag`) on `listener`.
    fn start(listener: tokio::net::TcpListener, server: SocketAddr, tag: &str) -> PageServer {
        let page = PAGE
            .replace("SERVER", &format!("http://{server}"))
            .replace("TAG", tag);
        let result: Arc<(Notify, Mutex<Option<Value>>)> = Arc::default();
        let posted = Arc::clone(&result);
        let app = axum::Router::new()
            .route(
                "/",
                get(move || {
                    let page = page.clone();
                    async move { Html(page) }
                }),
            )
            .route(
                "/result",
                post(move |body: String| {
                    let posted = Arc::clone(&posted);
                    async move {
                        *posted.1.lock().expect("result") = serde_json::from_str(&body).ok();
                        posted.0.notify_waiters();
                        "ok"
                    }
                }),
            );
        let addr = listener.local_addr().expect("address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        PageServer { addr, result, task }
    }

    /// Loads the page in headless Chromium and returns what it posted.
    async fn load(&self, chromium: &PathBuf) -> Value {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut browser = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("http://{}/", self.addr))
            // Its own scratch files (a killed browser leaves them) go in the profile's folder,
            // which is removed with it, not in the machine's /tmp.
            .env("TMPDIR", profile.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromium starts");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let result = loop {
            let notified = self.result.0.notified();
            if let Some(result) = self.result.1.lock().expect("result").clone() {
                break result;
            }
            assert!(
                tokio::time::timeout_at(deadline, notified).await.is_ok(),
                "the page posted no result within 2 minutes"
            );
        };
        let _ = browser.kill().await;
        result
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_chats_from_an_allowed_origin_and_is_refused_from_another() {
    let Some(chromium) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "Chromium is missing; .ci/run installs Debian's chromium package"
        );
        eprintln!("skipped: no Chromium (apt-get install chromium, or run .ci/run)");
        return;
    };
    // The allowed page's port must be known before the server starts: bind it first.
    let allowed_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds the allowed page's port");
    let allowed_origin = format!("http://{}", allowed_listener.local_addr().expect("address"));
    let server = server_configured(|config| {
        config.allowed_origins = vec![allowed_origin];
    })
    .await;

    let page = PageServer::start(allowed_listener, server.addr, "allowed");
    let started = std::time::Instant::now();
    let allowed = page.load(&chromium).await;
    eprintln!("allowed page: {:?}", started.elapsed());
    assert_eq!(allowed["http"]["status"], 200, "{allowed}");
    assert_eq!(allowed["http"]["done"], true, "{allowed}");
    assert_eq!(allowed["http"]["finish"], true, "{allowed}");
    let frames = allowed["ws"]["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("no WebSocket frames: {allowed}"));
    assert!(frames.iter().any(|f| f == "chunk"), "{allowed}");
    assert_eq!(
        frames.last().and_then(Value::as_str),
        Some("end"),
        "{allowed}"
    );

    // Another origin: the same page, refused over both.
    let foreign_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds the foreign page's port");
    let foreign = PageServer::start(foreign_listener, server.addr, "foreign");
    let started = std::time::Instant::now();
    let refused = foreign.load(&chromium).await;
    eprintln!("foreign page: {:?}", started.elapsed());
    assert!(refused["http"]["refused"].is_string(), "{refused}");
    assert!(refused["ws"]["refused"].is_string(), "{refused}");
    assert!(
        refused["ws"]["frames"].as_array().is_none_or(Vec::is_empty),
        "{refused}"
    );

    server.log.flush().await.expect("flush");
    let reader = server.log.reader().expect("reader");
    let chats: Vec<String> = reader
        .sessions()
        .expect("sessions")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert!(chats.contains(&"http-allowed".to_owned()), "{chats:?}");
    assert!(chats.contains(&"ws-allowed".to_owned()), "{chats:?}");
    assert!(
        !chats.iter().any(|c| c.ends_with("foreign")),
        "a refused page reached the log: {chats:?}"
    );
}
