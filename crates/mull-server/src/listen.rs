//! The accept loop under hostile clients: a cap on open connections (one past it is answered
//! with a JSON 503 and closed, never queued), and a deadline for each request head, so a
//! client that trickles its headers, or keeps a connection open without asking anything, is
//! closed instead of holding a slot forever. Request bodies have their own deadline in the
//! router (`http`), and a WebSocket its idle timeout (`ws`).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::error::ApiError;

/// The default most connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The default time a request head (request line and headers) may take to arrive, counted from
/// when the connection starts waiting for it: a new connection, or a kept-alive one between
/// requests (so it is also how long an idle HTTP connection stays open).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a refused connection gets to take its 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// What one listener allows its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// The most connections open at once (WebSockets and streams included).
    pub max_connections: usize,
    /// See [`DEFAULT_HEADER_TIMEOUT`].
    pub header_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}

/// Accepts connections until `shutdown` resolves, then lets open requests finish.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(%error, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tokio::spawn(refuse(stream, limits.max_connections));
            continue;
        };
        let app = app.clone();
        let mut stop = stop_rx.clone();
        let done = done_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _done = done;
            let _ = stream.set_nodelay(true);
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let service = TowerToHyperService::new(app);
            let mut conn = pin!(builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades());
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(error) = result {
                            tracing::debug!(%error, "connection ended");
                        }
                        break;
                    }
                    changed = stop.changed() => {
                        conn.as_mut().graceful_shutdown();
                        if changed.is_err() {
                            // The loop is gone; finish without listening for it again.
                            let _ = conn.as_mut().await;
                            break;
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(done_rx);
    done_tx.closed().await;
}

/// Answers a connection past the cap with a JSON 503 and closes it.
async fn refuse(mut stream: TcpStream, cap: usize) {
    let error = ApiError::Overloaded { connections: cap };
    let body = error.body().to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await?;
        // Drain what the client sent, so closing does not reset the connection under the
        // answer before the client has read it.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}
