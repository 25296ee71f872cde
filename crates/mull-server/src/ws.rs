//! The WebSocket side, speaking the AI SDK's `WebSocketChatTransport` protocol: one socket
//! carries several chat requests at once, told apart by a client-chosen `requestId`.
//!
//! Client frames: `send {requestId, id, trigger, messageId, messages, headers, body}`,
//! `resume {requestId, id, lastSequence?, headers, body}`, `abort {requestId}`.
//! Server frames: `start`, `chunk {sequence, chunk}`, `end`, `error {errorText}`, `no-active`,
//! each with the `requestId` it answers. Sequences count a turn's chunks from 0; `resume` with
//! `lastSequence` continues right after that chunk, replayed from the log, then live.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use axum::extract::{State, WebSocketUpgrade};
use axum::response::Response;
use axum::Extension;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::chat::{self, Started};
use crate::error::ApiError;
use crate::health::Lifecycle;
use crate::quota::{self, ClientAddr, ClientTurns};
use crate::state::ServerState;
use crate::wire::{decode_at_path, ChatRequest, Trigger, WireMessage};

/// A frame a client sends.
#[derive(Debug, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
enum ClientFrame {
    Send {
        request_id: String,
        id: String,
        #[serde(default = "submit")]
        trigger: Trigger,
        #[serde(default)]
        message_id: Option<String>,
        messages: Vec<WireMessage>,
        #[serde(default)]
        body: Map<String, Value>,
    },
    Resume {
        request_id: String,
        id: String,
        #[serde(default)]
        last_sequence: Option<u64>,
    },
    Abort {
        request_id: String,
    },
}

fn submit() -> Trigger {
    Trigger::SubmitMessage
}

/// The most requests one socket streams at once; a `send` or `resume` past it is answered with
/// an error frame.
pub const MAX_REQUESTS_PER_SOCKET: usize = 32;

/// The most frames queued for a client that does not read: past it, the socket's requests wait
/// (their turns run on, and stay resumable from the log).
const OUTBOX_FRAMES: usize = 256;

/// The most chats a socket remembers to release when it closes (the rest go when idle).
const MAX_CHATS_RELEASED: usize = 1024;

/// How often a draining socket looks whether its requests have finished.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// `GET /api/chat/ws`: upgrades to the chat transport. A message, and so a frame (browsers send
/// each message as one frame), is at most the body limit; the read buffer starts small.
pub(crate) async fn upgrade(
    State(state): State<ServerState>,
    lifecycle: Option<Extension<Arc<Lifecycle>>>,
    turns: Option<Extension<Arc<ClientTurns>>>,
    client: Option<Extension<ClientAddr>>,
    ws: WebSocketUpgrade,
) -> Response {
    let limit = state.inner.max_body_bytes;
    let lifecycle = Socket {
        lifecycle: lifecycle.map(|Extension(l)| l),
        turns: turns.map(|Extension(t)| t),
        client: client.map(|Extension(c)| c),
    };
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(16 * 1024)
        .write_buffer_size(16 * 1024)
        .on_upgrade(move |socket| serve_socket(state, lifecycle, socket))
}

/// What a socket knows of the server and its client.
struct Socket {
    lifecycle: Option<Arc<Lifecycle>>,
    turns: Option<Arc<ClientTurns>>,
    client: Option<ClientAddr>,
}

/// What a request task tells the socket: a frame to send.
type Outbox = mpsc::Sender<Value>;

/// Runs one socket: reads client frames, runs one task per request, writes their frames. Once
/// the server drains, it takes no new request, and closes when its running ones have ended.
async fn serve_socket(state: ServerState, edge: Socket, socket: WebSocket) {
    let _open = edge.lifecycle.as_ref().map(Lifecycle::socket_opened);
    let (mut sink, mut source) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Value>(OUTBOX_FRAMES);
    let writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            if sink
                .send(Message::Text(frame.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let mut requests: HashMap<String, Request> = HashMap::new();
    // The chats this socket asked for (bounded), released when it closes.
    let mut chats: HashSet<String> = HashSet::new();
    let idle = state.inner.socket_idle_timeout;
    let draining = async {
        match &edge.lifecycle {
            Some(lifecycle) => lifecycle.draining().await,
            None => std::future::pending().await,
        }
    };
    let mut draining = std::pin::pin!(draining);
    let mut drained = false;
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout(idle, source.next()) => next,
            () = &mut draining, if !drained => {
                drained = true;
                continue;
            }
            () = tokio::time::sleep(DRAIN_POLL), if drained => {
                requests.retain(|_, r| !r.task.is_finished());
                if requests.is_empty() {
                    break;
                }
                continue;
            }
        };
        let message = match next {
            Ok(Some(Ok(message))) => message,
            Ok(_) => break,
            Err(_) => {
                // Idle: close unless a request is still streaming to the client.
                requests.retain(|_, r| !r.task.is_finished());
                if requests.is_empty() {
                    break;
                }
                continue;
            }
        };
        let text = match message {
            Message::Text(text) => text.to_string(),
            Message::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
        };
        requests.retain(|_, r| !r.task.is_finished());
        // The message counts against its client's bytes in flight while it is decoded, and
        // until its turn ends if it starts one; past the share it is refused undecoded.
        let bytes = match quota::bytes(edge.turns.as_ref(), edge.client, text.len()) {
            Ok(bytes) => bytes,
            Err(refused) => {
                send_error(&out_tx, None, &refused.to_string()).await;
                continue;
            }
        };
        handle_frame(&state, &edge, &text, bytes, &out_tx, &mut requests).await;
        for request in requests.values() {
            if chats.len() < MAX_CHATS_RELEASED && !chats.contains(&request.chat_id) {
                chats.insert(request.chat_id.clone());
            }
        }
    }
    // The client is gone, or the server drained: stop streaming to it; turns go on and stay
    // resumable.
    for (_, request) in requests {
        request.task.abort();
    }
    drop(out_tx);
    let _ = writer.await;
    // Its chats leave memory now unless something still runs or waits in them.
    for chat_id in chats {
        state.release_if_unused(&chat_id);
    }
}

/// A request being served on the socket.
struct Request {
    task: JoinHandle<()>,
    chat_id: String,
    /// The request id of the turn followed: `abort` cancels it.
    turn_request: Option<String>,
}

async fn handle_frame(
    state: &ServerState,
    edge: &Socket,
    text: &str,
    bytes: Option<quota::BytesPermit>,
    out: &Outbox,
    requests: &mut HashMap<String, Request>,
) {
    let frame = match parse_frame(text) {
        Ok(frame) => frame,
        Err(refused) => {
            tracing::debug!(error = %refused.error, "websocket frame refused");
            let echo = refused
                .request_id
                .as_deref()
                .filter(|id| crate::ids::check_id("requestId", id).is_ok());
            return send_error(out, echo, &refused.error).await;
        }
    };
    if let ClientFrame::Send { request_id, .. } | ClientFrame::Resume { request_id, .. } = &frame {
        let admitted = crate::ids::check_id("requestId", request_id)
            .and_then(|()| edge.lifecycle.as_deref().map_or(Ok(()), Lifecycle::admit))
            .and_then(|()| {
                if requests.len() >= MAX_REQUESTS_PER_SOCKET {
                    Err(ApiError::BadRequest(format!(
                        "this socket already streams {MAX_REQUESTS_PER_SOCKET} requests, its \
                         limit; abort one or open another socket"
                    )))
                } else {
                    Ok(())
                }
            });
        if let Err(error) = admitted {
            // A refused request id is not echoed back: it may be what was wrong.
            let echo = crate::ids::check_id("requestId", request_id)
                .is_ok()
                .then_some(request_id.as_str());
            return send_error(out, echo, &error.to_string()).await;
        }
    }
    match frame {
        ClientFrame::Abort { request_id } => {
            if let Some(request) = requests.remove(&request_id) {
                request.task.abort();
                if let Some(turn) = request.turn_request {
                    if let Ok(session) = state.existing_session(&request.chat_id).await {
                        let _ = session.cancel_chat(&turn);
                    }
                }
            }
        }
        ClientFrame::Send {
            request_id,
            id,
            trigger,
            message_id,
            messages,
            body,
        } => {
            let request = ChatRequest::new(id.clone(), messages, trigger, message_id, body);
            let started = match quota::permit(edge.turns.as_ref(), edge.client) {
                Ok(permit) => {
                    let permit = permit.map(|permit| permit.holding(bytes));
                    chat::start_holding(state, request, permit).await
                }
                Err(refused) => Err(refused),
            };
            spawn_request(out, requests, request_id, id, started.map(Some), None).await;
        }
        ClientFrame::Resume {
            request_id,
            id,
            last_sequence,
        } => {
            let started = chat::resume(state, &id).await;
            spawn_request(out, requests, request_id, id, started, last_sequence).await;
        }
    }
}

/// A client frame that does not decode: the error frame's text, and the request it names if
/// it names one.
struct Refused {
    request_id: Option<String>,
    error: String,
}

/// Decodes one client frame: the only way a socket's text becomes a request.
fn parse_frame(text: &str) -> Result<ClientFrame, Refused> {
    let value: Value = serde_json::from_str(text).map_err(|e| Refused {
        request_id: None,
        error: format!("frame is not JSON: {e}"),
    })?;
    let request_id = value
        .get("requestId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    decode_at_path(value).map_err(|e| Refused {
        request_id,
        error: e.to_string(),
    })
}

/// Decodes a client frame as the socket does, for fuzzing and tests: the frame's type
/// (`send`, `resume` or `abort`) and its request id, or the error frame's text.
pub fn decode_client_frame(text: &str) -> Result<(&'static str, String), String> {
    match parse_frame(text) {
        Ok(ClientFrame::Send { request_id, .. }) => Ok(("send", request_id)),
        Ok(ClientFrame::Resume { request_id, .. }) => Ok(("resume", request_id)),
        Ok(ClientFrame::Abort { request_id }) => Ok(("abort", request_id)),
        Err(refused) => Err(refused.error),
    }
}

async fn send_error(out: &Outbox, request_id: Option<&str>, text: &str) {
    let mut frame = json!({"type": "error", "errorText": text});
    if let Some(request_id) = request_id {
        frame["requestId"] = json!(request_id);
    }
    let _ = out.send(frame).await;
}

async fn spawn_request(
    out: &Outbox,
    requests: &mut HashMap<String, Request>,
    request_id: String,
    chat_id: String,
    started: Result<Option<Started>, ApiError>,
    last_sequence: Option<u64>,
) {
    let started = match started {
        Ok(Some(started)) => started,
        Ok(None) => {
            let _ = out
                .send(json!({"type": "no-active", "requestId": request_id}))
                .await;
            return;
        }
        Err(error) => return send_error(out, Some(&request_id), &error.to_string()).await,
    };
    let turn_request = started.request_id().map(str::to_owned);
    let out = out.clone();
    let id = request_id.clone();
    let task = tokio::spawn(async move {
        let mut stream = started.stream;
        let _ = out.send(json!({"type": "start", "requestId": id})).await;
        if let Some(last) = last_sequence {
            if let Err(error) = stream.skip_through(last).await {
                return send_error(&out, Some(&id), &error.to_string()).await;
            }
        }
        loop {
            match stream.next().await {
                Ok(Some((sequence, chunk))) => {
                    let frame = json!({
                        "type": "chunk",
                        "requestId": id,
                        "sequence": sequence,
                        "chunk": chunk,
                    });
                    if out.send(frame).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {
                    let _ = out.send(json!({"type": "end", "requestId": id})).await;
                    return;
                }
                Err(error) => return send_error(&out, Some(&id), &error.to_string()).await,
            }
        }
    });
    requests.insert(
        request_id,
        Request {
            task,
            chat_id,
            turn_request,
        },
    );
}
