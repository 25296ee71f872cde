//! The accept loop under hostile clients: a cap on open connections in total and another per
//! client address, so one client cannot take every slot (one past either is answered with a
//! JSON 503 and closed, never queued); a deadline for each request head, so a client that
//! trickles its headers, or keeps a connection open without asking anything, is closed instead
//! of holding a slot forever; and a request line longer than [`MAX_REQUEST_LINE`] is answered
//! with a JSON 414 (see `prefixed`). A connection carries one request, so every request line
//! passes that check. Request bodies have their own deadline in the router
//! (`http`), and a WebSocket its idle timeout (`ws`).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::response::Response;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

use crate::error::ApiError;
use crate::prefixed::{read_request_line, Prefixed, RequestLine};
use crate::quota::ClientAddr;

/// The default most connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The default most connections one client address may hold at once: a quarter of the total,
/// so one client leaves the rest to the others. Behind a proxy every connection comes from the
/// proxy's address: raise it to the total there.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 256;

/// The longest request line read (method, URI, version). Every route's URI is short (ids are
/// at most [`crate::ids::MAX_ID_LEN`] bytes); a longer one is refused with a JSON 414.
pub const MAX_REQUEST_LINE: usize = 8 * 1024;

/// The default time a request head (request line and headers) may take to arrive, counted from
/// when the connection opens (so it is also how long an idle HTTP connection stays open).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a refused connection gets to take its 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// Binds `addr` and listens with a queue of not-yet-accepted connections as long as the most
/// connections the server may have open (the kernel caps it at `net.core.somaxconn`). The usual
/// 128 (the standard library's and tokio's) is shorter than a burst a proxy or a page of clients
/// can send at once: past it the kernel drops a new connection's handshake, and the client's
/// TCP tries again only after a second.
pub(crate) fn listen(addr: SocketAddr, limits: &ConnectionLimits) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As tokio's own `bind`: a restarted server binds again at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    // Within what `listen(2)` takes (an `int`); the kernel lowers it to its own bound.
    let backlog = limits.max_connections.clamp(1, i32::MAX as usize) as u32;
    socket.listen(backlog)
}

/// What one listener allows its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// The most connections open at once (WebSockets and streams included).
    pub max_connections: usize,
    /// The most connections one client address may hold at once.
    pub max_per_client: usize,
    /// See [`DEFAULT_HEADER_TIMEOUT`].
    pub header_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}

/// Connections open per client address.
#[derive(Default)]
struct PerClient {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its client's share until dropped.
struct ClientSlot {
    clients: Arc<PerClient>,
    ip: IpAddr,
}

impl PerClient {
    fn take(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<ClientSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Connections that stopped being accepted and are finishing.
pub(crate) struct Closing {
    done: watch::Sender<()>,
}

impl Closing {
    /// Resolves once every connection has ended.
    pub(crate) async fn finished(self) {
        self.done.closed().await;
    }
}

/// Accepts connections until `shutdown` resolves, then asks open ones to finish: what is in
/// flight completes, idle kept-alive connections close. [`Closing::finished`] waits for them.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> Closing {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let clients = Arc::new(PerClient::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
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
            let refusal = ApiError::Overloaded {
                connections: limits.max_connections,
            };
            tokio::spawn(refuse(stream, refusal));
            continue;
        };
        let Some(slot) = clients.take(peer.ip(), limits.max_per_client.max(1)) else {
            drop(permit);
            tracing::debug!(client = %peer, "connection refused: the client holds its share");
            let refusal = ApiError::ClientOverloaded {
                connections: limits.max_per_client,
            };
            tokio::spawn(refuse(stream, refusal));
            continue;
        };
        let app = app.clone();
        let stop = stop_rx.clone();
        let done = done_rx.clone();
        tokio::spawn(async move {
            let _held = (permit, slot, done);
            serve_one(stream, peer, app, limits, stop).await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(done_rx);
    Closing { done: done_tx }
}

/// Serves one connection: its first request line read here (so an overlong one gets a JSON
/// answer), the rest by hyper.
async fn serve_one(
    mut stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let head = tokio::select! {
        head = tokio::time::timeout(
            limits.header_timeout,
            read_request_line(&mut stream, MAX_REQUEST_LINE),
        ) => head,
        _ = stop.changed() => return,
    };
    let prefix = match head {
        Ok(Ok(RequestLine::Read(prefix))) => prefix,
        Ok(Ok(RequestLine::TooLong)) => {
            tracing::debug!(client = %peer, "request line too long");
            let refusal = ApiError::UriTooLong {
                limit: MAX_REQUEST_LINE,
            };
            return refuse(stream, refusal).await;
        }
        // Closed, failed or silent before a request began: nothing to answer.
        Ok(Ok(RequestLine::Closed)) | Ok(Err(_)) | Err(_) => return,
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    // Each request carries its client's address (per-client turn shares).
    let client = ClientAddr(peer.ip());
    let service = TowerToHyperService::new(
        app.map_request(move |mut request: Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(client);
            request
        })
        .map_response(one_request_per_connection),
    );
    let io = TokioIo::new(Prefixed::new(prefix, stream));
    let mut conn = pin!(builder.serve_connection(io, service).with_upgrades());
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
}

/// Closes the connection after each answer but a WebSocket upgrade: every request line is then
/// read by [`serve_one`] first, so an overlong one always gets the JSON 414 (hyper answers one on
/// a kept-alive connection with a bare 414). A chat request is a long stream, so a new
/// connection per request costs little. (hyper's own `keep_alive(false)` would also close the
/// upgrades.)
fn one_request_per_connection(mut response: Response) -> Response {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Answers a connection the server will not serve (past a cap, an overlong request line) with
/// the refusal's JSON and closes it.
async fn refuse(mut stream: TcpStream, error: ApiError) {
    let body = error.body().to_string();
    let status = error.status();
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
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
