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
use mull_engine::{Agent, Session, SessionOptions};
use mull_store::Log;

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

/// The default most sessions kept open at once (idle ones beyond it are evicted, oldest first).
pub const DEFAULT_MAX_OPEN_SESSIONS: usize = 10_000;

/// Shared state of the router. Cheap to clone; clones share the open sessions.
#[derive(Clone)]
pub struct ServerState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub log: Log,
    pub agents: AgentSource,
    pub options: OptionsSource,
    pub sessions: Arc<Sessions>,
    pub token: Option<String>,
    pub max_body_bytes: usize,
    pub hide_reasoning: bool,
    pub idle_ttl: Duration,
    pub max_open_sessions: usize,
    pub body_timeout: Duration,
    pub socket_idle_timeout: Duration,
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
                max_open_sessions: DEFAULT_MAX_OPEN_SESSIONS,
                body_timeout: DEFAULT_BODY_TIMEOUT,
                socket_idle_timeout: DEFAULT_SOCKET_IDLE_TIMEOUT,
            }),
        }
    }

    fn map(self, f: impl FnOnce(&mut Inner)) -> ServerState {
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => Inner {
                log: shared.log.clone(),
                agents: Arc::clone(&shared.agents),
                options: Arc::clone(&shared.options),
                sessions: Arc::clone(&shared.sessions),
                token: shared.token.clone(),
                max_body_bytes: shared.max_body_bytes,
                hide_reasoning: shared.hide_reasoning,
                idle_ttl: shared.idle_ttl,
                max_open_sessions: shared.max_open_sessions,
                body_timeout: shared.body_timeout,
                socket_idle_timeout: shared.socket_idle_timeout,
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

    /// How long an unused session stays open.
    pub fn idle_ttl(&self) -> Duration {
        self.inner.idle_ttl
    }

    /// The log the server writes to.
    pub fn log(&self) -> &Log {
        &self.inner.log
    }

    /// How many chats have a session open.
    pub fn open_sessions(&self) -> usize {
        lock(&self.inner.sessions.map).len()
    }

    /// Whether the session of `chat_id` is open.
    pub fn is_open(&self, chat_id: &str) -> bool {
        lock(&self.inner.sessions.map).contains_key(chat_id)
    }

    /// Evicts every session that nobody uses and that has been idle for the idle TTL, then, while
    /// more sessions are open than the cap, the longest-idle unused ones. Returns how many
    /// were evicted. The router runs this periodically; a service may call it too.
    pub fn evict_idle(&self) -> usize {
        let now = Instant::now();
        let ttl = self.inner.idle_ttl;
        let mut map = lock(&self.inner.sessions.map);
        let before = map.len();
        // Only the map holds the slot: no lease, no stream, no turn task.
        let unused = |slot: &Arc<Slot>| Arc::strong_count(slot) == 1 && slot.is_quiet();
        map.retain(|_, slot| {
            let expired = slot
                .idle_since()
                .is_none_or(|since| now.duration_since(since) >= ttl);
            !(expired && unused(slot))
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
            }
        }
        before - map.len()
    }

    /// A lease on the session of `chat_id`, opened (and created in the log) when not open.
    pub async fn session(&self, chat_id: &str) -> Result<ChatSession, ApiError> {
        let (slot, over_cap) = {
            let mut map = lock(&self.inner.sessions.map);
            let slot = Arc::clone(map.entry(chat_id.to_owned()).or_default());
            (slot, map.len() > self.inner.max_open_sessions)
        };
        slot.touch();
        if over_cap {
            self.evict_idle();
        }
        let session = slot
            .session
            .get_or_try_init(|| async {
                let agent = (self.inner.agents)(chat_id);
                let options = (self.inner.options)(chat_id);
                Session::open(&self.inner.log, agent, options)
                    .await
                    .map_err(|e| ApiError::Internal(format!("opening chat {chat_id:?}: {e}")))
            })
            .await?
            .clone();
        Ok(ChatSession { slot, session })
    }

    fn open_session(&self, chat_id: &str) -> Option<ChatSession> {
        let slot = Arc::clone(lock(&self.inner.sessions.map).get(chat_id)?);
        let session = slot.session.get()?.clone();
        slot.touch();
        Some(ChatSession { slot, session })
    }

    /// A lease on the session of an existing chat: open already, or present in the log.
    /// Unknown ids are refused without writing anything.
    pub async fn existing_session(&self, chat_id: &str) -> Result<ChatSession, ApiError> {
        if let Some(session) = self.open_session(chat_id) {
            return Ok(session);
        }
        let log = self.inner.log.clone();
        let id = chat_id.to_owned();
        let known = tokio::task::spawn_blocking(move || {
            log.reader()
                .and_then(|r| r.session_page(&id, 0, 1))
                .map(|page| !page.is_empty())
        })
        .await
        .map_err(|e| ApiError::Internal(format!("looking up chat {chat_id:?}: {e}")))?
        .map_err(|e| ApiError::Internal(format!("looking up chat {chat_id:?}: {e}")))?;
        if !known {
            return Err(ApiError::UnknownChat(chat_id.to_owned()));
        }
        self.session(chat_id).await
    }
}
