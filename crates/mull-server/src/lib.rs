//! mull's chat server: an axum router that speaks the Vercel AI SDK's chat protocols — the UI
//! message stream over SSE and the WebSocket chat transport — served from the event log.
//!
//! A service mounts [`router`] (or runs [`serve`]); `mull serve` only wires it up.
//!
//! | route | what |
//! |---|---|
//! | `POST /api/chat` | the AI SDK chat request; answers with the UI message stream (SSE) |
//! | `GET /api/chat/{id}/stream` | resume: the running turn from its first chunk, then live; 204 when none runs |
//! | `POST /api/chat/{id}/cancel` | abort the running turn (its partial message is kept); on another node's chat, 202: the cancellation is recorded for that node |
//! | `GET /api/chat/ws` | WebSocket: `WebSocketChatTransport` frames, several chats per socket |
//! | `GET /healthz`, `GET /readyz` | probes: the process serves; it starts turns (not draining, log writable) |
//!
//! What you use:
//! - [`ServerState`]: the log and the agent each chat runs ([`ServerState::new`] for one agent,
//!   [`ServerState::with_agents`] to choose per chat id, [`ServerState::on`] for any
//!   [`mull_store::EventLog`], PostgreSQL's included), with builder methods for the token,
//!   session options, limits and idle eviction. Open sessions are a cache of the log: an idle
//!   chat leaves memory and is opened again from the log on its next request.
//! - [`router`] to mount the routes in an axum app of your own, or [`serve`] with a
//!   [`ServerConfig`] to run them behind the server's own edge: connection caps per client,
//!   request-head deadlines, `Host` and browser-origin checks ([`EdgePolicy`]), each client's
//!   share of running turns and of request bytes in flight, and a clean stop on the future you pass (running turns get
//!   [`ServerConfig::grace`], the rest end `aborted` in the log and their clients get the end).
//! - [`wire`] (the AI SDK's message and request shapes) and [`ui_stream`] (events → UI
//!   message stream chunks) if you speak the protocol yourself.
//!
//! ```
//! use std::sync::Arc;
//!
//! use mull_engine::Agent;
//! use mull_server::{router, serve, ServerConfig, ServerState};
//! use mull_store::Log;
//!
//! /// A chat server on 127.0.0.1:3000: every chat runs `agent`, every event goes to `chat.db`.
//! async fn run(agent: Arc<dyn Agent>) -> Result<(), Box<dyn std::error::Error>> {
//!     let state = ServerState::new(Log::open("chat.db")?, agent);
//!     // Stops cleanly when this future ends (wire it to SIGTERM and Ctrl-C).
//!     let stop = std::future::pending::<()>();
//!     serve(ServerConfig::default(), state, stop).await?;
//!     Ok(())
//! }
//!
//! /// Or the routes inside an app of your own, beside its other routes.
//! fn app(log: Log, agent: Arc<dyn Agent>) -> axum::Router {
//!     axum::Router::new().merge(router(ServerState::new(log, agent)))
//! }
//! ```
//!
//! One session per chat id; a stream only ever carries events of its own chat's session.

pub mod chat;
pub mod drain;
pub mod edge;
pub mod error;
pub mod follow;
pub mod health;
mod http;
pub mod ids;
pub mod inbox;
mod listen;
mod memory;
mod prefixed;
pub mod quota;
pub mod state;
pub mod ui_stream;
pub mod wire;
mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

pub use drain::DEFAULT_GRACE;
pub use edge::{EdgeConfigError, EdgePolicy};
pub use error::ApiError;
pub use health::Lifecycle;
pub use http::UI_MESSAGE_STREAM_HEADERS;
pub use listen::{
    ConnectionLimits, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT, MAX_REQUEST_LINE,
};
pub use quota::{DEFAULT_MAX_BYTES_PER_CLIENT, DEFAULT_MAX_TURNS_PER_CLIENT};
pub use state::{
    AgentSource, ChatSession, OptionsSource, ServerState, DEFAULT_BODY_TIMEOUT, DEFAULT_IDLE_TTL,
    DEFAULT_LEASE_WAIT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_OPEN_SESSIONS, DEFAULT_SHARED_IDLE_TTL,
    DEFAULT_SOCKET_IDLE_TIMEOUT,
};
pub use ws::decode_client_frame;

/// How often a node on a shared log looks for chats whose node stopped without giving them
/// back, to take them over and recover their turns.
pub const TAKE_OVER_PERIOD: Duration = Duration::from_millis(500);

/// The router a service mounts. Requests need the state's token when one is set.
pub fn router(state: ServerState) -> Router {
    let limit = state.inner.max_body_bytes;
    Router::new()
        .route("/api/chat", post(http::post_chat))
        .route("/api/chat/ws", get(ws::upgrade))
        .route("/api/chat/{id}/stream", get(http::resume_chat))
        .route("/api/chat/{id}/cancel", post(http::cancel_chat))
        .fallback(http::not_found)
        .method_not_allowed_fallback(http::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http::require_token,
        ))
        .with_state(state)
}

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The address to bind; loopback unless a token is set.
    pub addr: SocketAddr,
    /// The bearer token every request must carry (`MULL_TOKEN`).
    pub token: Option<String>,
    /// The connection caps and the request-head deadline.
    pub limits: ConnectionLimits,
    /// Host names the server answers besides its address (behind a proxy, the public name).
    pub allowed_hosts: Vec<String>,
    /// Browser origins, besides the server's own, whose pages may use it.
    pub allowed_origins: Vec<String>,
    /// How long running turns get to finish once a stop is asked for.
    pub grace: Duration,
    /// The most turns one client address runs at once.
    pub max_turns_per_client: usize,
    /// The most request bytes one client address has in flight: bodies and WebSocket messages
    /// being read and decoded, and the requests of its running turns (see [`quota`]).
    pub max_bytes_per_client: usize,
}

impl Default for ServerConfig {
    /// Loopback port 3000, no token, default limits, only the server's own origin.
    fn default() -> Self {
        ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
            token: None,
            limits: ConnectionLimits::default(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            grace: DEFAULT_GRACE,
            max_turns_per_client: DEFAULT_MAX_TURNS_PER_CLIENT,
            max_bytes_per_client: DEFAULT_MAX_BYTES_PER_CLIENT,
        }
    }
}

impl ServerConfig {
    /// The defaults, with the token from `MULL_TOKEN` when set (even to an empty value, which
    /// [`ServerConfig::check`] then refuses).
    pub fn from_env() -> ServerConfig {
        ServerConfig {
            token: std::env::var("MULL_TOKEN").ok(),
            ..ServerConfig::default()
        }
    }

    /// Refuses a token no request could match (empty, or with whitespace around it: the
    /// header's value is trimmed), a non-loopback address without a token (anyone on the
    /// network could read and drive every chat), a cap of no connections, and hosts or
    /// origins that are not ones.
    pub fn check(&self) -> Result<(), ServeError> {
        if let Some(token) = &self.token {
            if token.trim().is_empty() || token.trim() != token {
                return Err(ServeError::BlankToken);
            }
        }
        if !self.addr.ip().is_loopback() && self.token.is_none() {
            return Err(ServeError::TokenRequired(self.addr));
        }
        if self.limits.max_connections == 0 || self.limits.max_per_client == 0 {
            return Err(ServeError::NoConnections);
        }
        self.edge(self.addr)?;
        Ok(())
    }

    /// The edge policy of this config once bound to `addr`.
    pub fn edge(&self, addr: SocketAddr) -> Result<EdgePolicy, ServeError> {
        Ok(EdgePolicy::new(
            addr,
            &self.allowed_hosts,
            &self.allowed_origins,
        )?)
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error(
        "refusing to listen on {0} without a token: set MULL_TOKEN to bind a non-loopback address"
    )]
    TokenRequired(SocketAddr),
    #[error(
        "MULL_TOKEN is empty or has spaces around it, so no request could match it: \
         set it to the token clients send, or unset it"
    )]
    BlankToken,
    #[error("the connection caps (in total and per client) must allow at least one connection")]
    NoConnections,
    #[error(transparent)]
    Edge(#[from] EdgeConfigError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A bound listener, ready to serve: tells the address actually bound (port 0 picks one).
pub struct Bound {
    listener: tokio::net::TcpListener,
    limits: ConnectionLimits,
    app: Router,
    addr: SocketAddr,
    state: ServerState,
    lifecycle: Arc<Lifecycle>,
    grace: Duration,
}

/// How long, after the turns ended, open connections and sockets get to deliver their ends.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

impl Bound {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether it drains; `/readyz` answers from it.
    pub fn lifecycle(&self) -> Arc<Lifecycle> {
        Arc::clone(&self.lifecycle)
    }

    /// Serves until `shutdown` resolves, then stops cleanly: accepts nothing more, lets
    /// running turns finish within the grace period and cancels the rest (see [`drain`]),
    /// lets every stream deliver its turn's end, and gives the chats back. Meanwhile idle
    /// sessions are evicted every half idle TTL (at least every minute); on a shared log, chats
    /// other nodes left behind are taken over every [`TAKE_OVER_PERIOD`].
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let period =
            (self.state.idle_ttl() / 2).clamp(Duration::from_millis(10), Duration::from_secs(60));
        let state = self.state;
        let lifecycle = self.lifecycle;
        let taker = state.log().is_shared().then(|| {
            let state = state.clone();
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(TAKE_OVER_PERIOD);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    if state.log().unavailable().is_some() {
                        // The database is away: nothing to take over or cancel until it is back.
                        continue;
                    }
                    if let Err(e) = state.take_over_abandoned(64).await {
                        tracing::warn!("{e}");
                    }
                    // Cancellations other nodes recorded for chats held here.
                    match state.log().take_cancel_requests().await {
                        Ok(chats) => {
                            for chat_id in chats {
                                match chat::cancel_here(&state, &chat_id).await {
                                    Ok(ids) => tracing::info!(chat = %chat_id, ?ids, "cancelled at another node's request"),
                                    Err(e) => tracing::warn!(chat = %chat_id, "cancelling: {e}"),
                                }
                            }
                        }
                        Err(e) => tracing::warn!("taking cancellation requests: {e}"),
                    }
                }
            })
        });
        let swept = state.clone();
        let sweeper = tokio::spawn(async move {
            let state = swept;
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut open = state.open_sessions();
            loop {
                ticks.tick().await;
                let evicted = state.evict_idle();
                if evicted > 0 {
                    tracing::debug!(evicted, "idle chat sessions evicted");
                }
                // Chats left memory (idle, or their sockets closed): give what they used back.
                let now_open = state.open_sessions();
                if now_open < open {
                    memory::release_freed();
                }
                open = now_open;
            }
        });
        let drained = Arc::clone(&lifecycle);
        let closing = listen::serve_connections(self.listener, self.app, self.limits, async move {
            shutdown.await;
            drained.start_draining();
        })
        .await;
        tracing::info!(
            grace_ms = self.grace.as_millis() as u64,
            "stopping: no new connections or turns"
        );
        let cancelled = drain::finish_turns(&state, self.grace).await;
        let delivered = tokio::time::timeout(CLOSE_WAIT, async {
            closing.finished().await;
            lifecycle.sockets_closed().await;
        })
        .await;
        if delivered.is_err() {
            tracing::warn!(
                sockets = lifecycle.open_sockets(),
                "connections still open after the turns ended; closing them"
            );
        }
        sweeper.abort();
        if let Some(taker) = taker {
            taker.abort();
        }
        state.give_back_all().await;
        tracing::info!(cancelled = cancelled.len(), "stopped");
        Ok(())
    }
}

/// Checks the config, applies its token to the state and binds the address. The router gets
/// the probes and, in front, the edge (hosts and origins, see [`edge`]).
pub async fn bind(config: &ServerConfig, state: ServerState) -> Result<Bound, ServeError> {
    config.check()?;
    let state = state.with_token(config.token.clone());
    let listener =
        listen::listen(config.addr, &config.limits).map_err(|source| ServeError::Bind {
            addr: config.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: config.addr,
        source,
    })?;
    let lifecycle = Arc::new(Lifecycle::default());
    let app = health::routes(state.clone(), Arc::clone(&lifecycle))
        .merge(router(state.clone()))
        .layer(axum::Extension(Arc::clone(&lifecycle)))
        .layer(axum::Extension(quota::ClientTurns::with_max_bytes(
            config.max_turns_per_client,
            config.max_bytes_per_client,
        )));
    let app = edge::protect(app, config.edge(addr)?);
    Ok(Bound {
        listener,
        limits: config.limits,
        app,
        addr,
        state,
        lifecycle,
        grace: config.grace,
    })
}

/// Binds and serves until `shutdown` resolves.
pub async fn serve(
    config: ServerConfig,
    state: ServerState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    bind(&config, state).await?.run(shutdown).await
}
