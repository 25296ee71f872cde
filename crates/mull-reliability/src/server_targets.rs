//! The bodies of the server's fuzz targets: what a client sends is untrusted input too.
//!
//! - [`chat_body`]: `ChatRequest::from_slice` never panics; a refusal says whether the body
//!   was not JSON or which field did not fit; an accepted body's messages survive the wire
//!   mapping both ways.
//! - [`ws_frame`]: a WebSocket client frame decodes as the socket decodes it, never panics,
//!   and is refused with a reason when it is not a `send`, `resume` or `abort`.
//! - [`HttpTarget`]: the real router on 127.0.0.1, sent raw request bytes (a chat body, a resume
//!   path with an arbitrary chat id, or arbitrary bytes): it answers every request or closes
//!   the connection, never with a 500, refuses with a JSON body, and keeps serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull_core::LanguageModel;
use mull_engine::Agent;
use mull_providers::scripted::ScriptedModel;
use mull_server::wire::{messages_to_wire, ChatRequest, WireError};
use mull_server::{bind, decode_client_frame, ServerConfig, ServerState};
use mull_store::Log;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Decodes `data` as a chat request body and checks the decoder's promises.
pub fn chat_body(data: &[u8]) {
    let is_json = serde_json::from_slice::<Value>(data).is_ok();
    match ChatRequest::from_slice(data) {
        Ok(request) => {
            assert!(is_json, "a body that is not JSON was accepted");
            let wire =
                json!({"id": request.chat_id, "messages": messages_to_wire(&request.messages)});
            let again = ChatRequest::from_value(wire)
                .unwrap_or_else(|e| panic!("an accepted request's messages re-decode: {e}"));
            assert_eq!(
                again.messages, request.messages,
                "messages survive the wire mapping both ways"
            );
        }
        Err(WireError::NotJson(_)) => assert!(!is_json, "JSON refused as not JSON"),
        Err(WireError::BadShape { path, message }) => {
            assert!(is_json, "not JSON refused as a bad shape");
            assert!(
                !message.is_empty(),
                "a shape error says what is wrong (at {path})"
            );
        }
        #[allow(unreachable_patterns)]
        Err(other) => assert!(!other.to_string().is_empty()),
    }
}

/// Decodes `data` as a WebSocket client frame and checks the decoder's promises.
pub fn ws_frame(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match decode_client_frame(&text) {
        Ok((kind, _request_id)) => {
            assert!(["send", "resume", "abort"].contains(&kind), "{kind}");
            let value: Value = serde_json::from_str(&text).expect("an accepted frame is JSON");
            assert_eq!(value["type"], kind, "the frame is what its type says");
        }
        Err(error) => {
            assert!(!error.is_empty(), "a refused frame says why");
            if serde_json::from_str::<Value>(&text).is_err() {
                assert!(error.starts_with("frame is not JSON"), "{error}");
            }
        }
    }
}

/// The agent behind the fuzzed server: a scripted model with a few short answers, then
/// errors (a turn failing is an answer too).
struct FuzzAgent {
    model: Arc<ScriptedModel>,
}

#[async_trait]
impl Agent for FuzzAgent {
    fn name(&self) -> &str {
        "fuzz"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        self.model.clone()
    }
}

/// How long one request may take before the target calls it hung.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// How long raw bytes wait for an answer before the target moves on.
const RAW_PATIENCE: Duration = Duration::from_millis(300);

/// The real router on 127.0.0.1:0 over a log in a temporary directory, and a runtime of its
/// own; dropped, it stops.
pub struct HttpTarget {
    runtime: tokio::runtime::Runtime,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl HttpTarget {
    /// Starts the server.
    pub fn start() -> HttpTarget {
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let log = Log::open(dir.path().join("fuzz.db")).expect("opens the log");
        let mut builder = ScriptedModel::builder("scripted-fuzz");
        for _ in 0..8 {
            builder = builder.step(|s| s.text_deltas(["fine", "."]).usage(5, 2));
        }
        let agent = Arc::new(FuzzAgent {
            model: Arc::new(builder.build()),
        });
        let state = ServerState::new(log, agent).with_body_timeout(Duration::from_millis(500));
        let config = ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            ..ServerConfig::default()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let addr = runtime.block_on(async {
            let bound = bind(&config, state).await.expect("binds 127.0.0.1:0");
            let addr = bound.local_addr();
            tokio::spawn(bound.run(async move {
                let _ = stopped.await;
            }));
            addr
        });
        HttpTarget {
            runtime,
            addr,
            stop: Some(stop),
            _dir: dir,
        }
    }

    /// `POST /api/chat` with `body`.
    pub fn chat_body(&self, body: &[u8]) {
        let mut request = format!(
            "POST /api/chat HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            self.addr,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        self.check_answer(&request, true);
    }

    /// `GET /api/chat/{id}/stream`, the id percent-encoded from arbitrary bytes.
    pub fn resume(&self, id: &[u8]) {
        let encoded: String = id
            .iter()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    char::from(*b).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect();
        let request = format!(
            "GET /api/chat/{encoded}/stream HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
            self.addr
        );
        self.check_answer(request.as_bytes(), true);
    }

    /// Arbitrary bytes as a request: hyper may refuse them itself, without JSON.
    pub fn raw(&self, bytes: &[u8]) {
        self.check_answer(bytes, false);
    }

    /// Sends `request`, reads the answer to the end and checks it; then checks the server
    /// still answers a plain request.
    fn check_answer(&self, request: &[u8], routed: bool) {
        // Bytes that are not a whole request may be held until the server's head deadline
        // (the hostile-client test covers that): only a routed request must be answered.
        let wait = if routed {
            REQUEST_DEADLINE
        } else {
            RAW_PATIENCE
        };
        match self.exchange(request, wait) {
            Some(answer) => check_response(&answer, routed),
            None => assert!(!routed, "a whole request got no answer"),
        }
        let probe = format!(
            "GET /api/chat/alive/stream HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
            self.addr
        );
        let alive = self
            .exchange(probe.as_bytes(), REQUEST_DEADLINE)
            .expect("the server answers after a fuzzed request");
        let alive = String::from_utf8_lossy(&alive);
        assert!(
            alive.starts_with("HTTP/1.1 404") && alive.contains("\"unknown_chat\""),
            "{alive}"
        );
    }

    /// Writes `request` and reads until the server closes the connection, or `wait` passes;
    /// `None` when no byte came back.
    fn exchange(&self, request: &[u8], wait: Duration) -> Option<Vec<u8>> {
        let addr = self.addr;
        self.runtime.block_on(async move {
            let mut stream = TcpStream::connect(addr).await.expect("connects");
            // A request the server refuses early may find the socket closed mid-write.
            let _ = stream.write_all(request).await;
            let mut answer = Vec::new();
            let read = tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await;
            if read.is_err() && wait == REQUEST_DEADLINE {
                panic!(
                    "no answer within {wait:?}: {}",
                    String::from_utf8_lossy(&answer)
                );
            }
            (!answer.is_empty()).then_some(answer)
        })
    }
}

impl Drop for HttpTarget {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The promises of one answer: a status line, never a 500, and — for a request the router
/// saw — a refusal with a JSON body.
fn check_response(answer: &[u8], routed: bool) {
    let text = String::from_utf8_lossy(answer);
    let status: u16 = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    assert!(status < 500 || status == 503, "a server error: {text}");
    if routed && status >= 400 {
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "a refusal is JSON: {text}"
        );
        let value: Value = serde_json::from_str(body.trim())
            .unwrap_or_else(|e| panic!("a refusal's body is JSON ({e}): {text}"));
        assert!(
            value.get("error").is_some(),
            "a refusal names its error: {text}"
        );
    }
}
