//! The one way an event enters a session: appended to the log, folded into the session's
//! [`SessionState`], handed to `tracing` for a live telemetry export, then published on the
//! session's bus. Holding the state lock across the append keeps the fold (and the export's)
//! in `seq` order even when two tasks append at once. A session with a budget also keeps its
//! budget fold here, folded under the same lock.

use std::sync::{Arc, Mutex, MutexGuard};

use async_broadcast::Receiver;
use mull_core::appended::{hand_over, TRACE_TARGET};
use mull_core::{Clock, Envelope, Event, EventRef};
use mull_store::{Appended, BudgetFold, EventLog, SessionState};

use crate::broadcast::Broadcast;
use crate::error::EngineError;

/// Appends events for one session and keeps its projection current.
pub(crate) struct Recorder {
    log: Arc<dyn EventLog>,
    session_id: String,
    clock: Arc<dyn Clock>,
    state: Mutex<SessionState>,
    /// The budget fold, when the session keeps one (see `crate::budget`).
    budget: Mutex<Option<BudgetFold>>,
    bus: Broadcast<Envelope>,
    /// Whether the session's telemetry may carry message content (tool arguments and results,
    /// answers), told to the live export with each event.
    content: bool,
}

impl Recorder {
    pub fn new(
        log: Arc<dyn EventLog>,
        session_id: String,
        clock: Arc<dyn Clock>,
        state: SessionState,
        bus_capacity: usize,
    ) -> Recorder {
        Recorder {
            log,
            session_id,
            clock,
            state: Mutex::new(state),
            budget: Mutex::new(None),
            bus: Broadcast::new(bus_capacity),
            content: false,
        }
    }

    /// Tells the live telemetry export that this session's spans may carry message content.
    pub fn capturing_content(mut self, content: bool) -> Recorder {
        self.content = content;
        self
    }

    /// The session it records.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_budget(&self) -> MutexGuard<'_, Option<BudgetFold>> {
        self.budget
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps `fold` (built from the log so far) current from now on.
    pub fn keep_budget_fold(&self, fold: BudgetFold) {
        *self.lock_budget() = Some(fold);
    }

    /// Reads the budget fold (`None` when the session keeps none).
    pub fn budget_fold<R>(&self, f: impl FnOnce(Option<&BudgetFold>) -> R) -> R {
        f(self.lock_budget().as_ref())
    }

    /// Up to `limit` of the session's logged events after `after_seq`.
    pub async fn page(&self, after_seq: u64, limit: usize) -> Result<Vec<Envelope>, EngineError> {
        self.log
            .session_page(&self.session_id, after_seq, limit)
            .await
            .map_err(|e| self.store_error(e))
    }

    fn store_error(&self, source: mull_store::StoreError) -> EngineError {
        EngineError::Store {
            session_id: self.session_id.clone(),
            source,
        }
    }

    /// Appends `event`, folds it into the state and publishes it. Hands the event back with
    /// its seq and time; [`Recorder::envelope`] makes the full envelope where one is wanted.
    pub fn append(&self, turn_id: Option<&str>, event: Event) -> Result<Appended, EngineError> {
        let mut state = self.lock();
        let appended = self
            .log
            .append_event(&self.session_id, turn_id, self.clock.now(), event)
            .map_err(|e| self.store_error(e))?;
        let folded = EventRef {
            seq: appended.seq,
            at: appended.at,
            turn_id,
            event: &appended.event,
        };
        state.apply_own(folded);
        {
            let mut budget = self.lock_budget();
            match budget.as_mut() {
                Some(fold) => fold.apply(folded),
                // A sub-agent's session learns its inherited limits as it is linked.
                None if matches!(
                    folded.event,
                    Event::SubagentLinked {
                        budget: Some(_),
                        ..
                    }
                ) =>
                {
                    let mut fold = BudgetFold::new();
                    fold.apply(folded);
                    *budget = Some(fold);
                }
                None => {}
            }
        }
        // Under the state lock, so an export sees the session's events in seq order.
        if tracing::enabled!(target: TRACE_TARGET, tracing::Level::TRACE) {
            let env = self.envelope(turn_id, appended.clone());
            let (seq, kind) = (env.seq, env.kind().to_owned());
            hand_over(env, || {
                tracing::trace!(target: TRACE_TARGET, seq, kind, content = self.content);
            });
        }
        drop(state);
        // With no subscriber listening there is nobody to copy the event for.
        self.bus
            .publish(|| self.envelope(turn_id, appended.clone()));
        Ok(appended)
    }

    /// The envelope of an event this recorder appended.
    pub fn envelope(&self, turn_id: Option<&str>, appended: Appended) -> Envelope {
        appended.into_envelope(&self.session_id, turn_id)
    }

    /// The output gate: waits until the event appended at `seq` (and every event before it) is
    /// durable. Awaited only before something that depends on it leaves the process.
    pub async fn durable(&self, seq: u64) -> Result<(), EngineError> {
        self.log
            .durable(&self.session_id, seq)
            .await
            .map_err(|e| self.store_error(e))
    }

    /// Waits until every event appended so far is committed.
    pub async fn flush(&self) -> Result<(), EngineError> {
        self.log
            .flush(&self.session_id)
            .await
            .map_err(|e| self.store_error(e))
    }

    /// Reads the session state.
    pub fn read<R>(&self, f: impl FnOnce(&SessionState) -> R) -> R {
        f(&self.lock())
    }

    /// A new subscriber to every event appended from now on.
    pub fn subscribe(&self) -> Receiver<Envelope> {
        self.bus.subscribe()
    }

    /// The log.
    pub fn log(&self) -> &dyn EventLog {
        &*self.log
    }

    /// The log, shared: what a session opened beside this one (a sub-agent's) writes to.
    pub fn shared_log(&self) -> Arc<dyn EventLog> {
        Arc::clone(&self.log)
    }

    /// The clock events are stamped with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}
