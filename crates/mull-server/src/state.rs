//! What the router serves from: the log, the agent each chat runs, and the open sessions (one
//! per chat id, opened from the log on first use).
//!
//! Open sessions are a cache of the log, not a second truth: a session nobody uses — no
//! request holds it, no stream reads it, no turn runs or waits in it — is dropped once it has
//! been idle for the idle TTL, or sooner, oldest first, when more sessions are open than the
//! cap allows. The next request for that chat opens it from the log again, with the same state.
//!
//! Every user of a session holds a [`ChatSession`] lease, taken under the map's lock; a session
//! is only evicted under that lock while nobody holds a lease, so two requests can never end up
//! with two open sessions of one chat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mull_core::TurnStatus;
use mull_engine::{Agent, EngineError, Session, SessionOptions};
use mull_store::{EventLog, Log, StoreError};

use crate::error::ApiError;

/// Chooses the agent of a chat (by chat id).
pub type AgentSource = Arc<dyn Fn(&str) -> Arc<dyn Agent> + Send + Sync>;

/// Chooses the session options of a chat (clock, ids, auto-continue …).
pub type OptionsSource = Arc<dyn Fn(&str) -> SessionOptions + Send + Sync>;

/// The default largest request body: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The default time a request body may take to arrive once its head has: 30 seconds.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The default time a WebSocket may stay open with no frame from its client and no request
/// running on it: 5 minutes.
pub const DEFAULT_SOCKET_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The default time an unused session stays open: 10 minutes.
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(10 * 60);

/// The default time an unused session stays open on a shared log (several nodes): none, it is
/// given back at once, so another node may take the chat at once. Where a chat's requests go
/// to one node (sticky routing), keeping it ([`ServerState::with_shared_idle_ttl`]) spares its
/// next turn there the lease and the history read; where they go to any node, a request for a
/// chat kept idle elsewhere waits until it is given back.
pub const DEFAULT_SHARED_IDLE_TTL: Duration = Duration::ZERO;

/// The default most sessions kept open at once (idle ones beyond it are evicted, oldest first).
pub const DEFAULT_MAX_OPEN_SESSIONS: usize = 10_000;

/// The default longest a request waits for a chat another node is working on (a shared log).
pub const DEFAULT_LEASE_WAIT: Duration = Duration::from_secs(30);

/// How often a request waiting for another node's chat asks again.
const LEASE_POLL: Duration = Duration::from_millis(20);

/// Who holds a chat whose lease this node lost while its turn still runs here.
const STILL_ENDING: &str = "here, ending a turn whose lease ran out or was taken over";

/// Shared state of the router. Cheap to clone; clones share the open sessions.
#[derive(Clone)]
pub struct ServerState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub log: Arc<dyn EventLog>,
    pub agents: AgentSource,
    pub options: OptionsSource,
    pub sessions: Arc<Sessions>,
    pub token: Option<String>,
    pub max_body_bytes: usize,
    pub hide_reasoning: bool,
    pub idle_ttl: Duration,
    /// [`Inner::idle_ttl`] on a shared log.
    pub shared_idle_ttl: Duration,
    pub max_open_sessions: usize,
    pub body_timeout: Duration,
    pub socket_idle_timeout: Duration,
    pub lease_wait: Duration,
}

/// The open sessions, one slot per chat id. The map lock is held only to find, lease or evict
/// a slot, so chats open in parallel while two requests for one chat still open it once.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Arc<Slot>>>,
}

/// One chat's session, opened on first use.
#[derive(Default)]
struct Slot {
    session: tokio::sync::OnceCell<Session>,
    /// When a lease on it was last taken or given back.
    last_used: Mutex<Option<Instant>>,
}

impl Slot {
    fn touch(&self) {
        *lock(&self.last_used) = Some(Instant::now());
    }

    fn idle_since(&self) -> Option<Instant> {
        *lock(&self.last_used)
    }

    /// Whether the session may be dropped: nothing runs or waits in it. (The caller has
    /// checked that nobody holds a lease.)
    fn is_quiet(&self) -> bool {
        match self.session.get() {
            None => true,
            Some(session) => {
                !session.is_busy()
                    && !session
                        .read_state(|s| s.turns.iter().any(|t| t.status == TurnStatus::Running))
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A lease on a chat's open session: while any lease is held the session stays open. Derefs to
/// the [`Session`].
pub struct ChatSession {
    slot: Arc<Slot>,
    session: Session,
}

impl ChatSession {
    /// Another lease on the same session.
    pub fn lease(&self) -> ChatSession {
        self.slot.touch();
        ChatSession {
            slot: Arc::clone(&self.slot),
            session: self.session.clone(),
        }
    }
}

impl std::ops::Deref for ChatSession {
    type Target = Session;
    fn deref(&self) -> &Session {
        &self.session
    }
}

impl Drop for ChatSession {
    fn drop(&mut self) {
        self.slot.touch();
    }
}

impl ServerState {
    /// Every chat runs `agent`, with real time and random ids.
    pub fn new(log: Log, agent: Arc<dyn Agent>) -> ServerState {
        Self::with_agents(log, Arc::new(move |_: &str| Arc::clone(&agent)))
    }

    /// Each chat runs the agent `agents` picks for its id (e.g. a fresh scripted model per chat).
    pub fn with_agents(log: Log, agents: AgentSource) -> ServerState {
        Self::on(Arc::new(log), agents)
    }

    /// On any backend of the log. On a shared one (PostgreSQL, several nodes) a chat's session
    /// is given back once nothing has run in it for the shared idle TTL
    /// ([`ServerState::with_shared_idle_ttl`]), a request for a chat another node works on
    /// waits for it (up to [`ServerState::with_lease_wait`]), a resume follows such a chat from
    /// the log, and the sessions of nodes that died are taken over and recovered.
    pub fn on(log: Arc<dyn EventLog>, agents: AgentSource) -> ServerState {
        ServerState {
            inner: Arc::new(Inner {
                log,
                agents,
                options: Arc::new(|id: &str| SessionOptions::new(id)),
                sessions: Arc::default(),
                token: None,
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                hide_reasoning: false,
                idle_ttl: DEFAULT_IDLE_TTL,
                shared_idle_ttl: DEFAULT_SHARED_IDLE_TTL,
                max_open_sessions: DEFAULT_MAX_OPEN_SESSIONS,
                body_timeout: DEFAULT_BODY_TIMEOUT,
                socket_idle_timeout: DEFAULT_SOCKET_IDLE_TIMEOUT,
                lease_wait: DEFAULT_LEASE_WAIT,
            }),
        }
    }

    fn map(self, f: impl FnOnce(&mut Inner)) -> ServerState {
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => Inner {
                log: Arc::clone(&shared.log),
                agents: Arc::clone(&shared.agents),
                options: Arc::clone(&shared.options),
                sessions: Arc::clone(&shared.sessions),
                token: shared.token.clone(),
                max_body_bytes: shared.max_body_bytes,
                hide_reasoning: shared.hide_reasoning,
                idle_ttl: shared.idle_ttl,
                shared_idle_ttl: shared.shared_idle_ttl,
                max_open_sessions: shared.max_open_sessions,
                body_timeout: shared.body_timeout,
                socket_idle_timeout: shared.socket_idle_timeout,
                lease_wait: shared.lease_wait,
            },
        };
        f(&mut inner);
        ServerState {
            inner: Arc::new(inner),
        }
    }

    /// Session options per chat (deterministic clocks and ids in tests, for instance).
    pub fn with_session_options(self, options: OptionsSource) -> ServerState {
        self.map(|i| i.options = options)
    }

    /// Requires `Authorization: Bearer <token>` on every request when set.
    pub fn with_token(self, token: Option<String>) -> ServerState {
        self.map(|i| i.token = token)
    }

    /// The largest request body accepted.
    pub fn with_max_body_bytes(self, limit: usize) -> ServerState {
        self.map(|i| i.max_body_bytes = limit)
    }

    /// Never streams reasoning to clients, whatever a turn's `send_reasoning` says.
    pub fn with_reasoning_hidden(self, hidden: bool) -> ServerState {
        self.map(|i| i.hide_reasoning = hidden)
    }

    /// How long an unused session stays open before it is evicted (re-opened from the log on
    /// the next request). Default [`DEFAULT_IDLE_TTL`].
    pub fn with_idle_ttl(self, ttl: Duration) -> ServerState {
        self.map(|i| i.idle_ttl = ttl)
    }

    /// How long an unused session stays open on a shared log (several nodes) before it is
    /// evicted and its lease given back: the node keeps the chat for its next turn meanwhile,
    /// and another node's request for it waits. Zero gives a chat back as soon as nothing runs
    /// in it. Default [`DEFAULT_SHARED_IDLE_TTL`].
    pub fn with_shared_idle_ttl(self, ttl: Duration) -> ServerState {
        self.map(|i| i.shared_idle_ttl = ttl)
    }

    /// The most sessions kept open; beyond it, idle sessions are evicted oldest first, whatever
    /// their idle time. Default [`DEFAULT_MAX_OPEN_SESSIONS`].
    pub fn with_max_open_sessions(self, cap: usize) -> ServerState {
        self.map(|i| i.max_open_sessions = cap)
    }

    /// How long a request body may take to arrive. Default [`DEFAULT_BODY_TIMEOUT`].
    pub fn with_body_timeout(self, timeout: Duration) -> ServerState {
        self.map(|i| i.body_timeout = timeout)
    }

    /// How long a WebSocket stays open with no client frame and no request running on it.
    /// Default [`DEFAULT_SOCKET_IDLE_TIMEOUT`].
    pub fn with_socket_idle_timeout(self, timeout: Duration) -> ServerState {
        self.map(|i| i.socket_idle_timeout = timeout)
    }

    /// How long a request waits for a chat another node is working on before it is refused
    /// as busy (a shared log only). Default [`DEFAULT_LEASE_WAIT`].
    pub fn with_lease_wait(self, wait: Duration) -> ServerState {
        self.map(|i| i.lease_wait = wait)
    }

    /// How long an unused session stays open (on a shared log, the shared idle TTL).
    pub fn idle_ttl(&self) -> Duration {
        if self.inner.log.is_shared() {
            self.inner.shared_idle_ttl
        } else {
            self.inner.idle_ttl
        }
    }

    /// The log the server writes to.
    pub fn log(&self) -> &Arc<dyn EventLog> {
        &self.inner.log
    }

    /// How many chats have a session open.
    pub fn open_sessions(&self) -> usize {
        lock(&self.inner.sessions.map).len()
    }

    /// The open chats where a turn runs or something waits in the session: a server draining
    /// waits for them to end.
    pub fn busy_chats(&self) -> Vec<String> {
        lock(&self.inner.sessions.map)
            .iter()
            .filter(|(_, slot)| !slot.is_quiet())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Drops the session of `chat_id` at once if nobody uses it (its client went away): it
    /// reopens from the log on its next request. Returns whether it was dropped.
    pub fn release_if_unused(&self, chat_id: &str) -> bool {
        let mut map = lock(&self.inner.sessions.map);
        let unused = map
            .get(chat_id)
            .is_some_and(|slot| Arc::strong_count(slot) == 1 && slot.is_quiet());
        if !unused {
            return false;
        }
        map.remove(chat_id);
        if self.inner.log.is_shared() {
            // Under the map lock, as in `evict_idle`: the release names the lease held now.
            let release = self.inner.log.release_session(chat_id);
            let id = chat_id.to_owned();
            tokio::spawn(async move {
                if let Err(e) = release.await {
                    tracing::warn!(chat = %id, "giving the chat back: {e}");
                }
            });
        }
        true
    }

    /// Whether the session of `chat_id` is open.
    pub fn is_open(&self, chat_id: &str) -> bool {
        lock(&self.inner.sessions.map).contains_key(chat_id)
    }

    /// Evicts every session that nobody uses and that has been idle for the idle TTL, then, while
    /// more sessions are open than the cap, the longest-idle unused ones; and any session
    /// another writer took over (its cache is stale, its writes would be refused). Returns how
    /// many were evicted. The router runs this periodically; a service may call it too. On a
    /// shared log each evicted session is given back to the log, so another node may take it.
    pub fn evict_idle(&self) -> usize {
        let now = Instant::now();
        let ttl = self.idle_ttl();
        let log = &self.inner.log;
        let mut evicted = Vec::new();
        let mut map = lock(&self.inner.sessions.map);
        // Only the map holds the slot: no lease, no stream, no turn task.
        let unused = |slot: &Arc<Slot>| Arc::strong_count(slot) == 1 && slot.is_quiet();
        map.retain(|id, slot| {
            let expired = slot
                .idle_since()
                .is_none_or(|since| now.duration_since(since) >= ttl);
            // Lost: taken over, or its lease past its expiry by this node's clock. Only once
            // nothing uses it (its turn there has ended): see `open_once`.
            let lost =
                slot.session.get().is_some() && !log.holds(id) && Arc::strong_count(slot) == 1;
            let keep = !(lost || expired && unused(slot));
            if !keep {
                evicted.push(id.clone());
            }
            keep
        });
        if map.len() > self.inner.max_open_sessions {
            let mut idle: Vec<(Option<Instant>, String)> = map
                .iter()
                .filter(|(_, slot)| unused(slot))
                .map(|(id, slot)| (slot.idle_since(), id.clone()))
                .collect();
            idle.sort();
            let excess = map.len() - self.inner.max_open_sessions;
            for (_, id) in idle.into_iter().take(excess) {
                map.remove(&id);
                evicted.push(id);
            }
        }
        if log.is_shared() {
            for id in &evicted {
                // Called under the map lock: the release names the lease held now, before any
                // request could open the chat again.
                let release = log.release_session(id);
                let id = id.clone();
                tokio::spawn(async move {
                    if let Err(e) = release.await {
                        tracing::warn!(chat = %id, "giving the chat back: {e}");
                    }
                });
            }
        }
        evicted.len()
    }

    /// A lease on the session of `chat_id`, opened (and created in the log) when not open. On
    /// a shared log, a chat another node works on is waited for, up to the lease wait.
    pub async fn session(&self, chat_id: &str) -> Result<ChatSession, ApiError> {
        self.open(chat_id, self.inner.lease_wait).await
    }

    /// Refuses new work while the log cannot take it (see [`EventLog::unavailable`]).
    fn check_available(&self) -> Result<(), ApiError> {
        match self.inner.log.unavailable() {
            Some(reason) => Err(ApiError::Unavailable { reason }),
            None => Ok(()),
        }
    }

    /// Opens the session of `chat_id`, waiting up to `wait` while another node holds it.
    /// Refused while the log is unavailable.
    async fn open(&self, chat_id: &str, wait: Duration) -> Result<ChatSession, ApiError> {
        self.check_available()?;
        let deadline = Instant::now() + wait;
        loop {
            match self.open_once(chat_id).await {
                Err(Opened::Held(owner)) if Instant::now() < deadline => {
                    let _ = owner;
                    tokio::time::sleep(LEASE_POLL).await;
                }
                Err(Opened::Held(owner)) => {
                    return Err(ApiError::Busy {
                        chat_id: chat_id.to_owned(),
                        owner,
                    })
                }
                Err(Opened::Failed(e)) => return Err(e),
                Ok(session) => return Ok(session),
            }
        }
    }

    async fn open_once(&self, chat_id: &str) -> Result<ChatSession, Opened> {
        let (slot, over_cap) = {
            let mut map = lock(&self.inner.sessions.map);
            // A session this node no longer holds (taken over, or its lease past its expiry by
            // this node's clock) is stale: open it afresh — but only once nothing uses it. While
            // its turn still runs here, a second session of the chat on this node would write
            // through the same lease as that turn; the chat is busy until the turn ends.
            if let Some(slot) = map.get(chat_id) {
                if slot.session.get().is_some() && !self.inner.log.holds(chat_id) {
                    if Arc::strong_count(slot) > 1 {
                        return Err(Opened::Held(STILL_ENDING.to_owned()));
                    }
                    map.remove(chat_id);
                }
            }
            let slot = Arc::clone(map.entry(chat_id.to_owned()).or_default());
            (slot, map.len() > self.inner.max_open_sessions)
        };
        slot.touch();
        if over_cap {
            self.evict_idle();
        }
        let opened = slot
            .session
            .get_or_try_init(|| async {
                let agent = (self.inner.agents)(chat_id);
                let options = (self.inner.options)(chat_id);
                Session::open_on(Arc::clone(&self.inner.log), agent, options).await
            })
            .await;
        match opened {
            Ok(session) => {
                let session = session.clone();
                Ok(ChatSession { slot, session })
            }
            Err(e) => {
                drop(slot);
                self.forget_unopened(chat_id);
                match e {
                    // Held by another node, or taken by one while this open was slow (its
                    // lease ran out before the first append): either way the chat is busy
                    // elsewhere, and nothing was written here.
                    EngineError::Store {
                        source:
                            StoreError::LeaseHeld { owner, .. } | StoreError::Fenced { owner, .. },
                        ..
                    } => Err(Opened::Held(owner)),
                    // The database went away while the chat was being opened (whichever of
                    // the node's connections saw it first): retry shortly, not a server fault.
                    EngineError::Store {
                        source: source @ StoreError::Server { .. },
                        ..
                    } => Err(Opened::Failed(ApiError::Unavailable {
                        reason: self
                            .inner
                            .log
                            .unavailable()
                            .unwrap_or_else(|| source.to_string()),
                    })),
                    e => Err(Opened::Failed(match self.inner.log.unavailable() {
                        Some(reason) => ApiError::Unavailable { reason },
                        None => ApiError::Internal(format!("opening chat {chat_id:?}: {e}")),
                    })),
                }
            }
        }
    }

    /// Drops the map's slot of a chat whose session could not be opened (nobody else uses it).
    fn forget_unopened(&self, chat_id: &str) {
        let mut map = lock(&self.inner.sessions.map);
        if map
            .get(chat_id)
            .is_some_and(|slot| slot.session.get().is_none() && Arc::strong_count(slot) == 1)
        {
            map.remove(chat_id);
        }
    }

    pub(crate) fn open_session(&self, chat_id: &str) -> Option<ChatSession> {
        let slot = Arc::clone(lock(&self.inner.sessions.map).get(chat_id)?);
        let session = slot.session.get()?.clone();
        if !self.inner.log.holds(chat_id) {
            return None;
        }
        slot.touch();
        Some(ChatSession { slot, session })
    }

    /// Whether the log holds any event of `chat_id`.
    async fn is_known(&self, chat_id: &str) -> Result<bool, ApiError> {
        let page = self
            .inner
            .log
            .session_page(chat_id, 0, 1)
            .await
            .map_err(|e| ApiError::Internal(format!("looking up chat {chat_id:?}: {e}")))?;
        Ok(!page.is_empty())
    }

    /// A lease on the session of an existing chat: open already, or present in the log.
    /// Unknown ids are refused without writing anything.
    pub async fn existing_session(&self, chat_id: &str) -> Result<ChatSession, ApiError> {
        self.check_available()?;
        if let Some(session) = self.open_session(chat_id) {
            return Ok(session);
        }
        if !self.is_known(chat_id).await? {
            return Err(ApiError::UnknownChat(chat_id.to_owned()));
        }
        self.session(chat_id).await
    }

    /// An existing chat here, or — on a shared log, while another node works on it — that
    /// node's name, without waiting: a resume then follows the chat from the log.
    pub(crate) async fn existing_or_holder(&self, chat_id: &str) -> Result<Local, ApiError> {
        if let Some(session) = self.open_session(chat_id) {
            return Ok(Local::Here(session));
        }
        if !self.is_known(chat_id).await? {
            return Err(ApiError::UnknownChat(chat_id.to_owned()));
        }
        match self.open(chat_id, Duration::ZERO).await {
            Ok(session) => Ok(Local::Here(session)),
            Err(ApiError::Busy { owner, .. }) => Ok(Local::Elsewhere(owner)),
            Err(e) => Err(e),
        }
    }

    /// Closes every open session and gives each back to the log (a server shutting down): on
    /// a shared log, other nodes can take its chats at once instead of after the lease expired.
    pub async fn give_back_all(&self) {
        let ids: Vec<String> = {
            let mut map = lock(&self.inner.sessions.map);
            map.drain().map(|(id, _)| id).collect()
        };
        for id in ids {
            if let Err(e) = self.inner.log.release_session(&id).await {
                tracing::warn!(chat = %id, "giving the chat back: {e}");
            }
        }
    }

    /// Opens (and so recovers) the sessions of nodes that stopped without giving them back,
    /// up to `limit`; they are given back again once idle. Returns how many were taken over.
    /// The router runs this periodically on a shared log.
    pub async fn take_over_abandoned(&self, limit: usize) -> Result<usize, ApiError> {
        if self.inner.log.unavailable().is_some() {
            // Nothing can be recovered before the log is back.
            return Ok(0);
        }
        let abandoned = self
            .inner
            .log
            .abandoned(limit)
            .await
            .map_err(|e| ApiError::Internal(format!("looking for abandoned chats: {e}")))?;
        let mut taken = 0;
        for chat_id in abandoned {
            match self.open(&chat_id, Duration::ZERO).await {
                Ok(session) => {
                    tracing::info!(chat = %chat_id, "took over a chat its node left behind");
                    drop(session);
                    taken += 1;
                }
                // Another node was quicker.
                Err(ApiError::Busy { .. }) => {}
                Err(e) => tracing::warn!(chat = %chat_id, "taking over an abandoned chat: {e}"),
            }
        }
        Ok(taken)
    }
}

/// Why a session could not be opened.
enum Opened {
    /// Another node holds it.
    Held(String),
    Failed(ApiError),
}

/// Where an existing chat is worked on.
pub(crate) enum Local {
    Here(ChatSession),
    /// Another node holds it (by name).
    Elsewhere(String),
}
