//! The session handle: opening a session on the log, what it is and holds, and whether
//! anything runs in it. The entry paths are `entry.rs` and `command.rs`.

use std::sync::Arc;

use async_broadcast::Receiver;
use mull_core::{Envelope, Event};
use mull_store::{EventLog, Log, SessionState};

use crate::agent::Agent;
use crate::error::EngineError;
use crate::guard::{TurnScope, TURN_SCOPE};
use crate::recorder::Recorder;
use crate::runtime::{Runtime, SessionOptions, TurnFailure};
use crate::session_config::SessionConfig;
use crate::turn::parts::TurnParts;

/// A handle to an open session. Cheap to clone; every clone drives the same session.
#[derive(Clone)]
pub struct Session {
    pub(crate) inner: Arc<Runtime>,
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
        )
        .capturing_content(options.capture_content);
        let config = agent.configure_session(SessionConfig::new()).await;
        let context = agent.configure_context(config.context()).await;
        let config = config.with_context_config(context);
        let config = match &options.budget {
            Some(cap) => config.budget_capped_by(cap),
            None => config,
        };
        let config = match options.marks_deliveries {
            Some(on) => config.redeliver_chat_response(on),
            None => config,
        };
        crate::budget::load(&recorder, &config).await?;
        let session = Session {
            inner: Arc::new(Runtime::new(
                Arc::clone(&agent),
                config,
                options.clone(),
                recorder,
            )),
        };
        let opened = session.inner.recorder().append(
            None,
            Event::SessionOpened {
                agent: agent.name().to_owned(),
                metadata: options.metadata.clone(),
            },
        )?;
        // No barrier of its own: `session_opened` is committed with the session's first
        // durable event (or within the writer's batch delay).
        session.recover().await?;
        // A turn that started in an earlier process and ended without its `on_chat_response`
        // returning (the process died in the hook, or mid-turn and the recovery just ended it)
        // gets it now, `recovered` (unless the session opted out). A submission the recovery
        // re-ran is this process's turn and delivers its own.
        crate::turn::redeliver::redeliver_owed(&TurnParts::of(&session.inner), opened.seq).await?;
        Ok(session)
    }

    /// Stops this session's background turns (streamed chats, submissions) where they wait,
    /// writing nothing more, as if the process had died there: a replay re-enacting a process
    /// that stopped with work in flight uses it so that work does not outlive the replay.
    /// Whatever they left unfinished is what reopening the session recovers.
    pub(crate) fn abort_background_turns(&self) {
        self.inner.abort_background();
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        self.inner.session_id()
    }

    /// A snapshot of the session's state (messages, draft, turns, pending calls, submissions).
    pub fn state(&self) -> SessionState {
        self.inner.recorder().read(SessionState::clone)
    }

    /// Reads the session's state without copying it.
    pub fn read_state<R>(&self, f: impl FnOnce(&SessionState) -> R) -> R {
        self.inner.recorder().read(f)
    }

    /// Every envelope appended from now on. A lagging receiver sees `Overflowed(n)` and
    /// catches up from the log; [`Session::follow`] does that for you.
    pub fn subscribe(&self) -> Receiver<Envelope> {
        self.inner.recorder().subscribe()
    }

    /// Every event of the session after `after_seq`: from the log, then live, gap-free and
    /// once each, a lagging reader made good from the log (see [`super::follow::Follow`]).
    pub fn follow(&self, after_seq: u64) -> super::follow::Follow {
        super::follow::Follow::with_bus(
            self.inner.recorder().shared_log(),
            self.id(),
            self.subscribe(),
            after_seq,
        )
    }

    /// Every failed turn from now on (Think's `chat:request:failed`).
    pub fn failures(&self) -> Receiver<TurnFailure> {
        self.inner.failures().subscribe()
    }

    /// Refuses a blocking entry started from inside one of this session's running turns (its
    /// hooks, except `on_chat_response`, which runs after the lock is released): it would wait
    /// for the turn that is waiting for it.
    pub(crate) fn check_not_in_turn(&self, entry: &'static str) -> Result<(), EngineError> {
        match TURN_SCOPE.try_with(TurnScope::clone) {
            Ok(s) if s.session_id == self.inner.session_id() => Err(EngineError::TurnLockHeld {
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
        self.inner.is_active(Some(request_id))
    }

    /// The turn running now, as the log tells it so far: its summary (request id, entry path,
    /// continuation, attempt, steps and usage up to now) and the assistant message it is
    /// writing. `None` between turns. Safe to call from anywhere, a hook of that turn included.
    pub fn active_turn(&self) -> Option<ActiveTurn> {
        self.read_state(|s| {
            let turn = s
                .turns
                .iter()
                .rev()
                .find(|t| t.status == mull_core::TurnStatus::Running)?;
            Some(ActiveTurn {
                draft: s.draft.clone().filter(|d| d.id == turn.message_id),
                turn: turn.clone(),
            })
        })
    }

    /// Whether anything runs or waits in the session: a queued or running request.
    pub fn is_busy(&self) -> bool {
        self.inner.is_active(None)
    }
}

/// A turn in progress ([`Session::active_turn`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ActiveTurn {
    /// The turn's summary as projected so far (status `running`).
    pub turn: mull_store::TurnSummary,
    /// The assistant message the turn is writing, once it has a part.
    pub draft: Option<mull_core::UIMessage>,
}
