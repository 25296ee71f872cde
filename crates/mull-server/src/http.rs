//! The HTTP side: `POST /api/chat` answers with the UI message stream over SSE,
//! `GET /api/chat/{id}/stream` resumes the running turn (204 when none runs),
//! `POST /api/chat/{id}/cancel` aborts it. Every refusal is JSON (see [`crate::error`]).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use crate::chat::{self, TurnStream};
use crate::error::ApiError;
use crate::health::Lifecycle;
use crate::quota::{self, ClientAddr, ClientTurns};
use crate::state::ServerState;
use crate::ui_stream::UiChunk;
use crate::wire::ChatRequest;

/// The headers of a UI message stream response, as the AI SDK sends them.
pub const UI_MESSAGE_STREAM_HEADERS: [(&str, &str); 5] = [
    ("content-type", "text/event-stream"),
    ("cache-control", "no-cache"),
    ("connection", "keep-alive"),
    ("x-vercel-ai-ui-message-stream", "v1"),
    ("x-accel-buffering", "no"),
];

/// The SSE event carrying a chunk.
fn chunk_event(chunk: &UiChunk) -> Event {
    Event::default().data(chunk.to_json())
}

/// The SSE event that ends a UI message stream: `data: [DONE]`.
fn done_event() -> Event {
    Event::default().data("[DONE]")
}

/// Whether the request carries the server's bearer token (always true when none is set).
/// Also accepts `?token=` on the query string, for WebSocket clients that cannot set headers.
pub(crate) fn authorized(state: &ServerState, headers: &HeaderMap, query: Option<&str>) -> bool {
    let Some(expected) = state.inner.token.as_deref() else {
        return true;
    };
    let from_header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let from_query = query.and_then(|q| {
        q.split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == "token")
            .map(|(_, v)| v)
    });
    [from_header, from_query]
        .into_iter()
        .flatten()
        .any(|given| bool::from(given.as_bytes().ct_eq(expected.as_bytes())))
}

/// Refuses every request without the bearer token.
pub(crate) async fn require_token(
    State(state): State<ServerState>,
    request: Request,
    next: Next,
) -> Response {
    if authorized(&state, request.headers(), request.uri().query()) {
        next.run(request).await
    } else {
        ApiError::Unauthorized.into_response()
    }
}

/// Answers unknown routes with a JSON 404.
pub(crate) async fn not_found(request: Request) -> ApiError {
    ApiError::NotFound(format!("{} {}", request.method(), request.uri().path()))
}

/// Answers a known route asked with the wrong method with a JSON 405.
pub(crate) async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::MethodNotAllowed {
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
    }
}

/// Reads a request body within the body timeout and the size limit. A `Content-Length` over
/// the limit is refused before anything is read; a body that stops arriving (a length that
/// promised more than was sent) is refused when the timeout runs out, and the connection is
/// closed.
async fn read_body(state: &ServerState, request: Request) -> Result<Bytes, ApiError> {
    let limit = state.inner.max_body_bytes;
    if declared_length(request.headers()).is_some_and(|len| len > limit as u64) {
        return Err(ApiError::TooLarge { limit });
    }
    let timeout = state.inner.body_timeout;
    match tokio::time::timeout(timeout, Bytes::from_request(request, state)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(rejection)) => Err(body_error(state, rejection)),
        Err(_) => Err(ApiError::BodyTimeout {
            timeout_ms: timeout.as_millis(),
        }),
    }
}

/// The body length a request declares (`Content-Length`).
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Reads a body within the limit and the body timeout and drops it: a request refused before
/// its body was read gets its answer after the body, so a client still sending it reads the
/// refusal instead of a reset connection.
async fn discard_body(state: &ServerState, request: Request) {
    let limit = state.inner.max_body_bytes;
    if declared_length(request.headers()).is_some_and(|len| len > limit as u64) {
        return;
    }
    let mut data = request.into_body().into_data_stream();
    let _ = tokio::time::timeout(state.inner.body_timeout, async {
        let mut read = 0usize;
        while let Some(Ok(chunk)) = futures::StreamExt::next(&mut data).await {
            read += chunk.len();
            if read > limit {
                break;
            }
        }
    })
    .await;
}

fn body_error(state: &ServerState, rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::TooLarge {
            limit: state.inner.max_body_bytes,
        }
    } else {
        ApiError::BadRequest(format!(
            "request body could not be read: {}",
            rejection.body_text()
        ))
    }
}

/// `POST /api/chat`: runs what the request asks and streams the turn back.
pub(crate) async fn post_chat(
    State(state): State<ServerState>,
    lifecycle: Option<Extension<Arc<Lifecycle>>>,
    turns: Option<Extension<Arc<ClientTurns>>>,
    request: Request,
) -> Result<Response, ApiError> {
    crate::edge::require_json(request.headers())?;
    let limit = state.inner.max_body_bytes;
    let declared = declared_length(request.headers());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(ApiError::TooLarge { limit });
    }
    let client = request.extensions().get::<ClientAddr>().copied();
    let turns = turns.as_ref().map(|Extension(t)| t);
    // The body counts against its client's bytes in flight from before it is read (once read
    // when its length is not declared) until its turn ends.
    let admitted = lifecycle
        .as_ref()
        .map_or(Ok(()), |Extension(lifecycle)| lifecycle.admit())
        .and_then(|()| quota::permit(turns, client))
        .and_then(|permit| {
            let bytes = match declared {
                Some(len) => quota::bytes(turns, client, len as usize)?,
                None => None,
            };
            Ok(permit.map(|permit| permit.holding(bytes)))
        });
    let permit = match admitted {
        Ok(permit) => permit,
        Err(refused) => {
            discard_body(&state, request).await;
            return Err(refused);
        }
    };
    let body = read_body(&state, request).await?;
    let permit = match (declared, permit) {
        (None, Some(permit)) => Some(permit.holding(quota::bytes(turns, client, body.len())?)),
        (_, permit) => permit,
    };
    let request = match ChatRequest::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            let message = e.to_string();
            record_parse_failure(&state, &body, &message).await;
            return Err(ApiError::BadRequest(message));
        }
    };
    let started = chat::start_holding(&state, request, permit).await?;
    Ok(sse_response(started.stream))
}

/// A body that names an existing chat but cannot be decoded is a `parse`-stage failure in that
/// chat's log. Bodies naming no chat, or an unknown one, leave the log alone: a stranger's
/// garbage must not create sessions.
async fn record_parse_failure(state: &ServerState, body: &[u8], message: &str) {
    let chat_id = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned))
        .filter(|id| crate::ids::check_id("id", id).is_ok());
    if let Some(chat_id) = chat_id {
        if let Ok(session) = state.existing_session(&chat_id).await {
            session.record_parse_failure(message).await;
        }
    }
}

/// The chat id of a `/api/chat/{id}/…` path; one that does not decode (not UTF-8 once
/// percent-decoded) is a JSON 400 like every other refusal.
fn chat_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(id)| id)
        .map_err(|rejection| ApiError::BadRequest(format!("chat id: {}", rejection.body_text())))
}

/// `GET /api/chat/{id}/stream`: the running turn from its first chunk, then live.
pub(crate) async fn resume_chat(
    State(state): State<ServerState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let chat_id = chat_id(path)?;
    match chat::resume(&state, &chat_id).await? {
        Some(started) => Ok(sse_response(started.stream)),
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// `POST /api/chat/{id}/cancel`: aborts the running turn; its partial message is kept.
pub(crate) async fn cancel_chat(
    State(state): State<ServerState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let chat_id = chat_id(path)?;
    Ok(match chat::cancel(&state, &chat_id).await? {
        chat::Cancel::Here(cancelled) => {
            Json(json!({"cancelled": !cancelled.is_empty(), "requestIds": cancelled}))
                .into_response()
        }
        // Accepted: the node running the chat cancels it when it next looks.
        chat::Cancel::Requested { owner } => (
            axum::http::StatusCode::ACCEPTED,
            Json(json!({"cancelled": false, "requested": true, "owner": owner})),
        )
            .into_response(),
    })
}

/// Where a turn's SSE stream is.
enum SseState {
    Streaming(Box<TurnStream>),
    /// An error part was sent: `[DONE]` follows.
    Failed,
    Over,
}

/// Streams a turn as SSE (axum's `Sse`): one `data:` event per chunk, then `data: [DONE]`; a
/// stream that fails sends an error part, then `[DONE]`.
fn sse_response(stream: TurnStream) -> Response {
    let events =
        futures::stream::unfold(SseState::Streaming(Box::new(stream)), |state| async move {
            let (event, next) = match state {
                SseState::Streaming(mut stream) => match stream.next().await {
                    Ok(Some((_, chunk))) => (chunk_event(&chunk), SseState::Streaming(stream)),
                    Ok(None) => (done_event(), SseState::Over),
                    Err(error) => {
                        let chunk = UiChunk::Error {
                            error_text: error.to_string(),
                        };
                        (chunk_event(&chunk), SseState::Failed)
                    }
                },
                SseState::Failed => (done_event(), SseState::Over),
                SseState::Over => return None,
            };
            Some((Ok::<_, Infallible>(event), next))
        });
    let mut response = Sse::new(events).into_response();
    for (name, value) in UI_MESSAGE_STREAM_HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}
