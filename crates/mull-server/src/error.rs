//! Refusals as clients see them: an HTTP status and a JSON body
//! `{"error": {"code": "...", "message": "..."}}` that says what was wrong.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// A request the server refuses or could not serve.
#[derive(Debug, thiserror::Error)]
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
    /// The body is larger than the server accepts.
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
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
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
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
            ApiError::TooLarge { .. } => "body_too_large",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code(), "message": self.to_string()}});
        (self.status(), Json(body)).into_response()
    }
}
