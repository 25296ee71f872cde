//! A local HTTP server that answers every request with a scripted reply, records what it
//! received, and can send a streamed body in pieces, with pauses, or cut the connection.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use mull_core::{
    LanguageModel, ModelError, ModelMessage, ModelRequest, ModelRole, ModelStream, StreamPart,
};
use serde_json::Value;

/// What the server answers.
#[derive(Clone)]
pub enum Reply {
    /// A `text/event-stream` body sent as these pieces, each flushed after a short pause so the
    /// client sees separate reads; `cut` ends the connection with an error instead of cleanly.
    Sse { pieces: Vec<Vec<u8>>, cut: bool },
    /// A plain response.
    Status {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// Waits this long before answering (for timeouts).
    Stall(Duration),
    /// A `text/event-stream` body that sends these pieces and then neither sends more nor ends
    /// (a model that hangs mid-answer).
    SseThenHang { pieces: Vec<Vec<u8>> },
    /// The n-th request gets the n-th reply; the last one answers every request after it.
    Sequence(Vec<Reply>),
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Clone)]
struct ServerState {
    reply: Reply,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Reply {
    /// The reply to the request numbered `n` (from 0).
    fn for_request(self, n: usize) -> Reply {
        match self {
            Reply::Sequence(replies) => {
                let last = replies.len().saturating_sub(1);
                replies
                    .into_iter()
                    .nth(n.min(last))
                    .map(|reply| reply.for_request(n))
                    .unwrap_or(Reply::Status {
                        status: 500,
                        headers: Vec::new(),
                        body: "an empty sequence answers nothing".into(),
                    })
            }
            other => other,
        }
    }
}

/// A running server on 127.0.0.1.
pub struct TestServer {
    pub base_url: String,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("lock").clone()
    }

    /// Shuts the server down; later connections are refused.
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Starts a server on a free port that gives `reply` to every request.
pub async fn serve(reply: Reply) -> TestServer {
    let received = Arc::new(Mutex::new(Vec::new()));
    let state = ServerState {
        reply,
        received: received.clone(),
    };
    let app = axum::Router::new().fallback(handle).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    TestServer {
        base_url: format!("http://{addr}/v1"),
        received,
        task,
    }
}

/// Starts a server that streams `wire` as an SSE body in pieces of `piece_size` bytes and,
/// when `cut`, then cuts the connection.
pub async fn serve_sse(wire: &str, piece_size: usize, cut: bool) -> TestServer {
    serve(Reply::Sse {
        pieces: pieces(wire, piece_size),
        cut,
    })
    .await
}

/// Streams `request` through the model that `model` builds for a server sending `wire` (as
/// [`serve_sse`] does), and reads the stream to its end.
pub async fn stream_from_sse<M: LanguageModel>(
    wire: &str,
    piece_size: usize,
    cut: bool,
    model: impl FnOnce(&str) -> M,
    request: ModelRequest,
) -> (Vec<StreamPart>, Option<ModelError>) {
    let server = serve_sse(wire, piece_size, cut).await;
    let stream = model(&server.base_url)
        .stream(request)
        .await
        .expect("stream opens");
    collect(stream).await
}

/// A request with one user message, "hi".
pub fn say_hi() -> ModelRequest {
    ModelRequest {
        messages: vec![ModelMessage::text(ModelRole::User, "hi")],
        ..ModelRequest::default()
    }
}

/// `wire` as a byte stream that delivers it in one read, for the pure decoders.
pub fn one_read(
    wire: &str,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::convert::Infallible>> {
    futures::stream::iter([Ok(wire.as_bytes().to_vec())])
}

async fn handle(
    State(state): State<ServerState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let n = {
        let mut received = state.received.lock().expect("lock");
        received.push(Received {
            path: uri.path().to_owned(),
            headers,
            body,
        });
        received.len() - 1
    };
    match state.reply.for_request(n) {
        Reply::Sse { pieces, cut } => {
            let tail: Vec<Result<Vec<u8>, std::io::Error>> = if cut {
                vec![Err(std::io::Error::other("connection cut"))]
            } else {
                Vec::new()
            };
            let stream = futures::stream::iter(pieces.into_iter().map(Ok))
                .then(|piece| async move {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    piece
                })
                .chain(futures::stream::iter(tail).then(|item| async move {
                    // Let the pieces before the cut reach the client first.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    item
                }));
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .expect("response")
        }
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let mut response =
                Response::builder().status(StatusCode::from_u16(status).expect("status"));
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response.body(Body::from(body)).expect("response")
        }
        Reply::Stall(wait) => {
            tokio::time::sleep(wait).await;
            Response::new(Body::from("late"))
        }
        Reply::SseThenHang { pieces } => {
            let stream = futures::stream::iter(pieces.into_iter().map(Ok::<_, std::io::Error>))
                .chain(futures::stream::pending());
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .expect("response")
        }
        Reply::Sequence(_) => unreachable!("for_request resolves sequences"),
    }
}

/// Splits `text` into pieces of `size` bytes (cutting through UTF-8 characters and lines).
pub fn pieces(text: &str, size: usize) -> Vec<Vec<u8>> {
    text.as_bytes().chunks(size).map(<[u8]>::to_vec).collect()
}

/// Reads a model stream to its end: the content parts (the call's metadata — `stream-start`,
/// `response-metadata` — left out; [`collect_all`] keeps it), and the error that ended it, if
/// any.
pub async fn collect(stream: ModelStream) -> (Vec<StreamPart>, Option<ModelError>) {
    let (mut parts, error) = collect_all(stream).await;
    parts.retain(|p| !p.is_call_metadata());
    (parts, error)
}

/// Reads a model stream to its end: every part, and the error that ended it, if any.
pub async fn collect_all(mut stream: ModelStream) -> (Vec<StreamPart>, Option<ModelError>) {
    let mut parts = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(part) => parts.push(part),
            Err(error) => {
                assert!(stream.next().await.is_none(), "nothing may follow an error");
                return (parts, Some(error));
            }
        }
    }
    (parts, None)
}
