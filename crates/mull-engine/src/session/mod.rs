//! A session: one conversation of one agent over the log, with its turn lock and queue, its
//! entry paths (`chat`, `save_messages`, `submit_messages`, `continue_last_turn`, client tool
//! results with auto-continuation), cancellation and recovery on reopen.
//!
//! # The turn lock
//! One turn runs at a time per session; later ones wait in FIFO order (a fair async mutex).
//! The lock is released before `on_chat_response` runs (the seed's rule), so the next queued
//! turn may start while the hook runs, and whatever the hook starts (`save_messages`, `chat`,
//! `submit_messages`, awaited or spawned) queues behind the lock like any other caller. A
//! blocking turn started from inside a running turn's other hooks would wait for its own turn
//! and is refused with [`EngineError::TurnLockHeld`]; `submit_messages` from there is accepted
//! and queued.
//!
//! # Subscribers
//! [`Session::subscribe`] hands out a receiver of every envelope appended from then on. The bus
//! never waits for a slow subscriber: when one lags, its oldest events are dropped and `recv`
//! reports `Overflowed(n)`; it then catches up by reading the missed `seq` range from the log
//! (`LogReader::range`), which holds everything. Failed turns are also sent on
//! [`Session::failures`] (Think's `chat:request:failed`).

mod approval;
mod command;
mod entry;
mod inbox;
mod options;
mod outcome;
mod submission;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_broadcast::Receiver;
use mull_core::{Envelope, Event, Input};
use mull_store::{EventLog, Log, SessionState};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::broadcast::Broadcast;
use crate::error::EngineError;
use crate::recorder::Recorder;
use crate::session_config::SessionConfig;

pub use command::{CommandOptions, Reply};
pub use options::{SessionOptions, SubmitOptions, TurnOptions};
pub use outcome::{
    ChatStream, ClientToolOutcome, OutcomeStatus, SubmissionResult, SubmitReceipt, TurnFailure,
    TurnOutcome,
};

tokio::task_local! {
    /// The turn the current task is inside of, if any.
    pub(crate) static TURN_SCOPE: TurnScope;
}

/// Where the current task stands with respect to a session's turn lock.
#[derive(Debug, Clone)]
pub(crate) struct TurnScope {
    pub session_id: String,
    pub request_id: String,
}

pub(crate) struct Inner {
    pub session_id: String,
    pub agent: Arc<dyn Agent>,
    pub config: SessionConfig,
    pub options: SessionOptions,
    pub recorder: Recorder,
    pub queue: tokio::sync::Mutex<()>,
    /// Cancellation tokens of requests that have not ended yet (queued or running).
    pub active: Mutex<HashMap<String, CancellationToken>>,
    pub waiters: Mutex<HashMap<String, watch::Sender<Option<SubmissionResult>>>>,
    /// The full-text index of the conversation, built on first search.
    pub search: crate::memory::search::SearchIndex,
    /// Turn tasks running in the background (streamed chats, submissions) that may not have
    /// ended yet: what [`Session::abort_background_turns`] stops.
    background: Mutex<Vec<tokio::task::AbortHandle>>,
    failures: Broadcast<TurnFailure>,
}

impl Inner {
    /// Forgets a request's cancellation token once its turn ended (cancelling it is a no-op).
    pub(crate) fn forget_request(&self, request_id: &str) {
        lock(&self.active).remove(request_id);
    }

    /// Spawns a background turn task, keeping a handle to abort it (tasks that ended are
    /// forgotten here, so the list stays as long as the work in flight).
    fn spawn_turn<T: Send + 'static>(
        &self,
        task: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        // Boxed: a turn's future is large (kilobytes), and tokio moves an unboxed future
        // through several copies while spawning and finishing the task.
        let handle = tokio::spawn(Box::pin(task));
        let mut background = lock(&self.background);
        background.retain(|h| !h.is_finished());
        background.push(handle.abort_handle());
        handle
    }
}

/// A handle to an open session. Cheap to clone; every clone drives the same session.
#[derive(Clone)]
pub struct Session {
    pub(crate) inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Session {
    /// Opens (or creates) a session on `log`: rebuilds its state from the log, records
    /// `session_opened`, runs `configure_session`, and recovers submissions and turns an earlier
    /// process left unfinished (re-running submissions never applied; finishing applied ones as
    /// errors at stage `recovery`, keeping their partial message).
    pub async fn open(
        log: &Log,
        agent: Arc<dyn Agent>,
        options: SessionOptions,
    ) -> Result<Session, EngineError> {
        Session::open_on(Arc::new(log.clone()), agent, options).await
    }

    /// [`Session::open`] on any backend of the log (SQLite's [`Log`], or another
    /// [`EventLog`] such as the PostgreSQL log): the backend takes the session for writing
    /// (PostgreSQL: its lease) and rebuilds its state, then the session opens as on SQLite.
    pub async fn open_on(
        log: Arc<dyn EventLog>,
        agent: Arc<dyn Agent>,
        options: SessionOptions,
    ) -> Result<Session, EngineError> {
        let store_err = |source| EngineError::Store {
            session_id: options.session_id.clone(),
            source,
        };
        let state = log
            .open_session(&options.session_id)
            .await
            .map_err(store_err)?;
        let recorder = Recorder::new(
            log,
            options.session_id.clone(),
            Arc::clone(&options.clock),
            state,
            options.bus_capacity,
        );
        let config = agent.configure_session(SessionConfig::new()).await;
        let session = Session {
            inner: Arc::new(Inner {
                session_id: options.session_id.clone(),
                agent: Arc::clone(&agent),
                config,
                options: options.clone(),
                recorder,
                queue: tokio::sync::Mutex::new(()),
                active: Mutex::new(HashMap::new()),
                waiters: Mutex::new(HashMap::new()),
                search: crate::memory::search::SearchIndex::default(),
                background: Mutex::new(Vec::new()),
                failures: Broadcast::new(64),
            }),
        };
        session.inner.recorder.append(
            None,
            Event::SessionOpened {
                agent: agent.name().to_owned(),
                metadata: options.metadata.clone(),
            },
        )?;
        // No barrier of its own: `session_opened` is committed with the session's first
        // durable event (or within the writer's batch delay).
        session.recover().await?;
        Ok(session)
    }

    /// Stops this session's background turns (streamed chats, submissions) where they wait,
    /// writing nothing more, as if the process had died there: a replay re-enacting a process
    /// that stopped with work in flight uses it so that work does not outlive the replay.
    /// Whatever they left unfinished is what reopening the session recovers.
    pub(crate) fn abort_background_turns(&self) {
        for handle in lock(&self.inner.background).drain(..) {
            handle.abort();
        }
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.inner.session_id
    }

    /// A snapshot of the session's state (messages, draft, turns, pending calls, submissions).
    pub fn state(&self) -> SessionState {
        self.inner.recorder.read(SessionState::clone)
    }

    /// Reads the session's state without copying it.
    pub fn read_state<R>(&self, f: impl FnOnce(&SessionState) -> R) -> R {
        self.inner.recorder.read(f)
    }

    /// Every envelope appended from now on. A lagging receiver sees `Overflowed(n)` and
    /// catches up from the log.
    pub fn subscribe(&self) -> Receiver<Envelope> {
        self.inner.recorder.subscribe()
    }

    /// Every failed turn from now on (Think's `chat:request:failed`).
    pub fn failures(&self) -> Receiver<TurnFailure> {
        self.inner.failures.subscribe()
    }

    pub(crate) fn publish_failure(inner: &Inner, envelope: Envelope) {
        inner.failures.publish(|| TurnFailure { envelope });
    }

    /// Refuses a blocking entry started from inside one of this session's running turns (its
    /// hooks, except `on_chat_response`, which runs after the lock is released): it would wait
    /// for the turn that is waiting for it.
    pub(crate) fn check_not_in_turn(&self, entry: &'static str) -> Result<(), EngineError> {
        match TURN_SCOPE.try_with(TurnScope::clone) {
            Ok(s) if s.session_id == self.inner.session_id => Err(EngineError::TurnLockHeld {
                session_id: s.session_id,
                request_id: s.request_id,
                entry,
            }),
            _ => Ok(()),
        }
    }

    /// Whether a request is queued or running: its turn, with any overflow retries, has not
    /// ended yet. A client following a request by its events asks this when an attempt ended
    /// in error and neither its final failure nor a retry has appeared.
    pub fn is_request_active(&self, request_id: &str) -> bool {
        lock(&self.inner.active).contains_key(request_id)
    }

    /// Whether anything runs or waits in the session: a queued or running request.
    pub fn is_busy(&self) -> bool {
        !lock(&self.inner.active).is_empty()
    }

    /// Cancels a queued or running turn. Returns false (and records nothing) when the request
    /// is not active, e.g. already finished.
    pub fn cancel_chat(&self, request_id: &str) -> Result<bool, EngineError> {
        let input = Input::Cancel {
            request_id: Some(request_id.to_owned()),
            reason: "cancel_chat".to_owned(),
        };
        Ok(self.cancel_now(input)? > 0)
    }

    /// Cancels every queued and running turn of the session. Returns how many were cancelled.
    pub fn abort_all(&self, reason: &str) -> Result<usize, EngineError> {
        self.cancel_now(Input::Cancel {
            request_id: None,
            reason: reason.to_owned(),
        })
    }

    /// A cancellation through [`Session::command`], which acts on it without waiting.
    fn cancel_now(&self, input: Input) -> Result<usize, EngineError> {
        use futures::FutureExt;
        match self
            .command(input, CommandOptions::default())
            .now_or_never()
        {
            Some(Ok(Reply::Cancelled(n))) => Ok(n),
            Some(Err(e)) => Err(e),
            _ => Ok(0),
        }
    }
}
