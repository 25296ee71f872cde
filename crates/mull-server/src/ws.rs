//! The WebSocket side, speaking the AI SDK's `WebSocketChatTransport` protocol: one socket
//! carries several chat requests at once, told apart by a client-chosen `requestId`.
//!
//! Client frames: `send {requestId, id, trigger, messageId, messages, headers, body}`,
//! `resume {requestId, id, lastSequence?, headers, body}`, `abort {requestId}`.
//! Server frames: `start`, `chunk {sequence, chunk}`, `end`, `error {errorText}`, `no-active`,
//! each with the `requestId` it answers. Sequences count a turn's chunks from 0; `resume` with
//! `lastSequence` continues right after that chunk, replayed from the log, then live.

use std::collections::HashMap;

use axum::extract::ws::{Message, WebSocket};
use axum::extract::{State, WebSocketUpgrade};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::chat::{self, Started};
use crate::error::ApiError;
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

/// `GET /api/chat/ws`: upgrades to the chat transport.
pub(crate) async fn upgrade(State(state): State<ServerState>, ws: WebSocketUpgrade) -> Response {
    let limit = state.inner.max_body_bytes;
    ws.max_message_size(limit)
        .on_upgrade(move |socket| serve_socket(state, socket))
}

/// What a request task tells the socket: a frame to send.
type Outbox = mpsc::UnboundedSender<Value>;

/// Runs one socket: reads client frames, runs one task per request, writes their frames.
async fn serve_socket(state: ServerState, socket: WebSocket) {
    let (mut sink, mut source) = socket.split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Value>();
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
    let idle = state.inner.socket_idle_timeout;
    loop {
        let message = match tokio::time::timeout(idle, source.next()).await {
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
        handle_frame(&state, &text, &out_tx, &mut requests).await;
    }
    // The client is gone: stop streaming to it; turns go on and stay resumable.
    for (_, request) in requests {
        request.task.abort();
    }
    drop(out_tx);
    let _ = writer.await;
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
    text: &str,
    out: &Outbox,
    requests: &mut HashMap<String, Request>,
) {
    let frame = match parse_frame(text) {
        Ok(frame) => frame,
        Err(refused) => {
            tracing::debug!(error = %refused.error, "websocket frame refused");
            return send_error(out, refused.request_id.as_deref(), &refused.error);
        }
    };
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
            let started = chat::start(state, request).await;
            spawn_request(out, requests, request_id, id, started.map(Some), None);
        }
        ClientFrame::Resume {
            request_id,
            id,
            last_sequence,
        } => {
            let started = chat::resume(state, &id).await;
            spawn_request(out, requests, request_id, id, started, last_sequence);
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

fn send_error(out: &Outbox, request_id: Option<&str>, text: &str) {
    let mut frame = json!({"type": "error", "errorText": text});
    if let Some(request_id) = request_id {
        frame["requestId"] = json!(request_id);
    }
    let _ = out.send(frame);
}

fn spawn_request(
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
            let _ = out.send(json!({"type": "no-active", "requestId": request_id}));
            return;
        }
        Err(error) => return send_error(out, Some(&request_id), &error.to_string()),
    };
    let turn_request = started.request_id().map(str::to_owned);
    let out = out.clone();
    let id = request_id.clone();
    let task = tokio::spawn(async move {
        let mut stream = started.stream;
        let _ = out.send(json!({"type": "start", "requestId": id}));
        if let Some(last) = last_sequence {
            if let Err(error) = stream.skip_through(last).await {
                return send_error(&out, Some(&id), &error.to_string());
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
                    if out.send(frame).is_err() {
                        return;
                    }
                }
                Ok(None) => {
                    let _ = out.send(json!({"type": "end", "requestId": id}));
                    return;
                }
                Err(error) => return send_error(&out, Some(&id), &error.to_string()),
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
