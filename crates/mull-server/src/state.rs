//! What the router serves from: the log, the agent each chat runs, and the open sessions (one
//! per chat id, opened on first use and kept for the life of the server).

use std::collections::HashMap;
use std::sync::Arc;

use mull_engine::{Agent, Session, SessionOptions};
use mull_store::Log;

use crate::error::ApiError;

/// Chooses the agent of a chat (by chat id).
pub type AgentSource = Arc<dyn Fn(&str) -> Arc<dyn Agent> + Send + Sync>;

/// Chooses the session options of a chat (clock, ids, auto-continue …).
pub type OptionsSource = Arc<dyn Fn(&str) -> SessionOptions + Send + Sync>;

/// The default largest request body: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Shared state of the router. Cheap to clone.
#[derive(Clone)]
pub struct ServerState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub log: Log,
    pub agents: AgentSource,
    pub options: OptionsSource,
    /// One cell per chat id: the map lock is held only to find the cell, so chats open in
    /// parallel while two requests for one chat still open it once.
    pub sessions: std::sync::Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Session>>>>,
    pub token: Option<String>,
    pub max_body_bytes: usize,
    pub hide_reasoning: bool,
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
                sessions: std::sync::Mutex::new(HashMap::new()),
                token: None,
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                hide_reasoning: false,
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
                sessions: std::sync::Mutex::new(HashMap::new()),
                token: shared.token.clone(),
                max_body_bytes: shared.max_body_bytes,
                hide_reasoning: shared.hide_reasoning,
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

    /// The log the server writes to.
    pub fn log(&self) -> &Log {
        &self.inner.log
    }

    /// The session of `chat_id`, opened (and created in the log) when not open yet.
    pub async fn session(&self, chat_id: &str) -> Result<Session, ApiError> {
        let cell = Arc::clone(
            self.inner
                .sessions
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .entry(chat_id.to_owned())
                .or_default(),
        );
        let session = cell
            .get_or_try_init(|| async {
                let agent = (self.inner.agents)(chat_id);
                let options = (self.inner.options)(chat_id);
                Session::open(&self.inner.log, agent, options)
                    .await
                    .map_err(|e| ApiError::Internal(format!("opening chat {chat_id:?}: {e}")))
            })
            .await?;
        Ok(session.clone())
    }

    fn open_session(&self, chat_id: &str) -> Option<Session> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(chat_id)
            .and_then(|cell| cell.get().cloned())
    }

    /// The session of an existing chat: open already, or present in the log. Unknown ids are
    /// refused without writing anything.
    pub async fn existing_session(&self, chat_id: &str) -> Result<Session, ApiError> {
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
