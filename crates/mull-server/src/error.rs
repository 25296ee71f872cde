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
            ApiError::TooLarge { .. } | ApiError::BodyTimeout { .. } | ApiError::Unauthorized
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
