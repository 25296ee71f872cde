//! Refusals as clients see them: an HTTP status and a JSON body
//! `{"error": {"code": "...", "message": "..."}}` that says what was wrong.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// A request the server refuses or could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The body did not decode (not JSON, or not the chat request shape).
    #[error("{0}")]
    BadRequest(String),
    /// No bearer token, or the wrong one.
    #[error("a valid bearer token is required (Authorization: Bearer <MULL_TOKEN>)")]
    Unauthorized,
    /// The chat id names no session in the log.
    #[error("no chat with id {0:?}")]
    UnknownChat(String),
    /// No such route.
    #[error("no route for {0}")]
    NotFound(String),
    /// The route exists, not for this method.
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// The body is larger than the server accepts.
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// The body did not arrive in time (a `Content-Length` that promised more than was sent).
    #[error("request body did not arrive within {timeout_ms} ms")]
    BodyTimeout { timeout_ms: u128 },
    /// Every connection slot is taken.
    #[error("the server is at its limit of {connections} open connections; retry shortly")]
    Overloaded { connections: usize },
    /// Another node works on the chat (a log shared by several nodes) and did not give it
    /// back in time.
    #[error(
        "chat {chat_id:?} is busy on node {owner}; retry shortly, or follow its running turn \
         with GET /api/chat/{chat_id}/stream on any node"
    )]
    Busy { chat_id: String, owner: String },
    /// A browser page of an origin the server does not allow, or a `Host` that does not name
    /// the server (DNS rebinding): see [`crate::edge`].
    #[error("{0}")]
    Forbidden(String),
    /// A chat request whose body is not declared `application/json`.
    #[error(
        "a chat request must be sent with content-type: application/json (got {0}); \
         browsers send text/plain only from forms and simple requests, which are refused"
    )]
    UnsupportedMediaType(String),
    /// An id the client chose is too long or uses characters ids may not have.
    #[error("{field}: {reason}")]
    InvalidId { field: String, reason: String },
    /// The request line (its URI) is longer than the server reads.
    #[error("the request URI is longer than the limit of {limit} bytes")]
    UriTooLong { limit: usize },
    /// One client address holds all the connections it may.
    #[error(
        "this client address already holds {connections} open connections, its share; \
         close some or retry shortly"
    )]
    ClientOverloaded { connections: usize },
    /// One client address runs all the turns it may at once.
    #[error(
        "this client address already runs {turns} turns at once, its share; wait for one to \
         end or retry shortly"
    )]
    TooManyTurns { turns: usize },
    #[error(
        "this client address already has {held} bytes of requests in flight, and its share is \
         {limit} bytes; wait for one of its turns to end or retry shortly"
    )]
    TooManyBytes { held: usize, limit: usize },
    /// The server is shutting down: it finishes running turns but starts no new one.
    #[error("the server is shutting down and starts no new turn; retry on another node or after it restarts")]
    Draining,
    /// The log can take no new turn now (its database is unreachable and being reconnected);
    /// `reason` says why. Running turns and the node itself carry on.
    #[error("the log is unavailable, so no new turn starts here; retry shortly or on another node: {reason}")]
    Unavailable { reason: String },
    /// The engine or the log failed.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::UnknownChat(_) | ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Busy { .. } => StatusCode::CONFLICT,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::InvalidId { .. } => StatusCode::BAD_REQUEST,
            ApiError::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            ApiError::TooManyTurns { .. } | ApiError::TooManyBytes { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::ClientOverloaded { .. } | ApiError::Draining => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A stable machine-readable name of the refusal.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unauthorized => "unauthorized",
            ApiError::UnknownChat(_) => "unknown_chat",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::TooLarge { .. } => "body_too_large",
            ApiError::BodyTimeout { .. } => "body_timeout",
            ApiError::Overloaded { .. } => "overloaded",
            ApiError::Busy { .. } => "busy",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::InvalidId { .. } => "invalid_id",
            ApiError::UriTooLong { .. } => "uri_too_long",
            ApiError::ClientOverloaded { .. } => "client_overloaded",
            ApiError::TooManyTurns { .. } => "too_many_turns",
            ApiError::TooManyBytes { .. } => "too_many_request_bytes",
            ApiError::Draining => "draining",
            ApiError::Unavailable { .. } => "log_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The JSON body of the refusal.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code(), "message": self.to_string()}})
    }

    /// Whether the connection must close after the refusal: the body was not read, so what
    /// follows on the connection is not the start of a request.
    fn closes_connection(&self) -> bool {
        matches!(
            self,
            ApiError::TooLarge { .. }
                | ApiError::BodyTimeout { .. }
                | ApiError::Unauthorized
                | ApiError::Forbidden(_)
                | ApiError::UnsupportedMediaType(_)
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let close = self.closes_connection();
        let mut response = (self.status(), Json(self.body())).into_response();
        if close {
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}
