//! What a load balancer asks, and what a stopping server tells its own parts.
//!
//! `GET /healthz` answers 200 while the process serves at all; `GET /readyz` answers 200 only
//! while the server starts new turns: it is not draining and its log takes writes
//! ([`mull_store::EventLog::health`]); otherwise 503 with the reasons. Neither needs the token
//! (probes rarely carry one) and neither touches a chat.
//!
//! [`Lifecycle`] is the one place that knows the server is draining: the routes refuse new
//! turns then, and each WebSocket finishes its running requests and closes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use mull_store::EventLog;
use serde_json::json;
use tokio::sync::watch;

use crate::error::ApiError;
use crate::state::ServerState;

/// Whether the server is draining, and how many WebSockets are still open.
#[derive(Debug)]
pub struct Lifecycle {
    draining: watch::Sender<bool>,
    sockets: watch::Sender<usize>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            draining: watch::Sender::new(false),
            sockets: watch::Sender::new(0),
        }
    }
}

impl Lifecycle {
    /// Stops new turns from starting; running ones go on.
    pub fn start_draining(&self) {
        self.draining.send_replace(true);
    }

    /// Whether the server is draining.
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// Refuses a new turn while draining.
    pub fn admit(&self) -> Result<(), ApiError> {
        if self.is_draining() {
            Err(ApiError::Draining)
        } else {
            Ok(())
        }
    }

    /// Resolves once draining starts.
    pub async fn draining(&self) {
        let mut rx = self.draining.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Counts an open WebSocket until the returned guard is dropped.
    pub fn socket_opened(self: &Arc<Self>) -> SocketGuard {
        self.sockets.send_modify(|n| *n += 1);
        SocketGuard(Arc::clone(self))
    }

    /// How many WebSockets are open.
    pub fn open_sockets(&self) -> usize {
        *self.sockets.borrow()
    }

    /// Resolves once no WebSocket is open.
    pub async fn sockets_closed(&self) {
        let mut rx = self.sockets.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// An open WebSocket, counted until dropped.
#[derive(Debug)]
pub struct SocketGuard(Arc<Lifecycle>);

impl Drop for SocketGuard {
    fn drop(&mut self) {
        self.0.sockets.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The probe routes.
pub(crate) fn routes(state: ServerState, lifecycle: Arc<Lifecycle>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state((state, lifecycle))
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State((state, lifecycle)): State<(ServerState, Arc<Lifecycle>)>) -> Response {
    let mut reasons = Vec::new();
    if lifecycle.is_draining() {
        reasons.push("draining: the server is shutting down".to_owned());
    }
    if let Err(e) = state.log().health() {
        reasons.push(format!("the log takes no writes: {e}"));
    }
    if reasons.is_empty() {
        Json(json!({"ready": true})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "ready": false,
                "reasons": reasons,
                "error": {"code": "not_ready", "message": reasons.join("; ")},
            })),
        )
            .into_response()
    }
}
