//! Following one turn's events: first from the log, then live, each event exactly once.
//!
//! A client stream (live or resumed) needs every event of one turn in `seq` order, with no gap
//! and no repeat, whether the events were written before the client arrived or after. The
//! [`TurnFollower`] gets them from two places:
//! 1. the session's broadcast bus, subscribed *before* anything is read, and
//! 2. the log, read after a flush barrier, so every event appended before the barrier is
//!    readable.
//!
//! An event appended before the subscription is in the log by the time it is read (the barrier
//! waited for it); an event appended after it is on the bus. Events from the bus at or below the
//! last `seq` taken are dropped, so the overlap is seen once. When the bus overflows (a slow
//! client), the follower flushes and reads the missed stretch back from the log.

use std::collections::VecDeque;
use std::time::Duration;

use async_broadcast::{Receiver, RecvError};
use mull_core::{Envelope, Event};
use mull_store::{Log, LogReader, StoreError};

/// Events read from the log per query.
const PAGE: usize = 512;

/// How long a follower waits for `turn_finished` after a `turn_failed` before ending anyway.
const FAILED_GRACE: Duration = Duration::from_secs(2);

/// Which turn a follower serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnSelector {
    /// The turn with this id.
    Turn(String),
    /// The first turn that starts for this request id.
    Request(String),
    /// The first turn that starts in the session after the follower's start position.
    Next,
}

/// Why a follower could not go on.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The log could not be flushed or read.
    #[error("reading session {session_id} from the log after seq {after_seq}: {source}")]
    Store {
        session_id: String,
        after_seq: u64,
        #[source]
        source: StoreError,
    },
    /// The blocking read task died.
    #[error("reading session {session_id} from the log: the read task failed: {reason}")]
    ReadTask { session_id: String, reason: String },
}

/// Yields the events of one turn, in `seq` order, exactly once, until the turn ends.
pub struct TurnFollower {
    log: Log,
    reader: Option<LogReader>,
    session_id: String,
    bus: Receiver<Envelope>,
    selector: TurnSelector,
    /// The turn adopted from the selector.
    turn_id: Option<String>,
    /// The highest seq of this session looked at (taken or skipped).
    last_seq: u64,
    backlog: VecDeque<Envelope>,
    caught_up: bool,
    bus_closed: bool,
    failed: bool,
    done: bool,
}

impl TurnFollower {
    /// A follower of `session_id` that considers events after `after_seq`. `bus` must have been
    /// subscribed before the caller read anything it relies on (the follower reads the log
    /// itself, after a flush, on its first call).
    pub fn new(
        log: Log,
        session_id: impl Into<String>,
        bus: Receiver<Envelope>,
        after_seq: u64,
        selector: TurnSelector,
    ) -> TurnFollower {
        let turn_id = match &selector {
            TurnSelector::Turn(id) => Some(id.clone()),
            _ => None,
        };
        TurnFollower {
            log,
            reader: None,
            session_id: session_id.into(),
            bus,
            selector,
            turn_id,
            last_seq: after_seq,
            backlog: VecDeque::new(),
            caught_up: false,
            bus_closed: false,
            failed: false,
            done: false,
        }
    }

    /// The turn being followed, once known.
    pub fn turn_id(&self) -> Option<&str> {
        self.turn_id.as_deref()
    }

    /// The next event of the turn; `None` once the turn has ended.
    pub async fn next(&mut self) -> Result<Option<Envelope>, FollowError> {
        loop {
            if self.done {
                return Ok(None);
            }
            if !self.caught_up {
                self.catch_up().await?;
                self.caught_up = true;
            }
            if let Some(env) = self.backlog.pop_front() {
                if let Some(env) = self.take(env) {
                    return Ok(Some(env));
                }
                continue;
            }
            if self.bus_closed {
                // The session is gone and the log holds nothing more for this turn.
                self.done = true;
                return Ok(None);
            }
            let received = if self.failed {
                match tokio::time::timeout(FAILED_GRACE, self.bus.recv()).await {
                    Ok(received) => received,
                    Err(_) => {
                        self.done = true;
                        return Ok(None);
                    }
                }
            } else {
                self.bus.recv().await
            };
            match received {
                Ok(env) => {
                    if env.session_id == self.session_id && env.seq > self.last_seq {
                        self.backlog.push_back(env);
                    }
                }
                Err(RecvError::Overflowed(_)) => self.catch_up().await?,
                Err(RecvError::Closed) => {
                    self.bus_closed = true;
                    self.catch_up().await?;
                }
            }
        }
    }

    /// Decides whether `env` belongs to the turn, adopting the turn when it starts.
    fn take(&mut self, env: Envelope) -> Option<Envelope> {
        if env.seq <= self.last_seq {
            return None;
        }
        self.last_seq = env.seq;
        if self.turn_id.is_none() {
            match (&env.event, &self.selector) {
                (Event::TurnStarted { .. }, TurnSelector::Next) => {
                    self.turn_id = env.turn_id.clone();
                }
                (Event::TurnStarted { request_id, .. }, TurnSelector::Request(wanted))
                    if request_id == wanted =>
                {
                    self.turn_id = env.turn_id.clone();
                }
                // A request that failed before its turn could start ends the stream.
                (
                    Event::TurnFailed {
                        request_id: Some(request_id),
                        ..
                    },
                    TurnSelector::Request(wanted),
                ) if request_id == wanted => {
                    self.done = true;
                    return Some(env);
                }
                _ => return None,
            }
        }
        if env.turn_id.is_none() || env.turn_id != self.turn_id {
            return None;
        }
        match env.event {
            Event::TurnFinished { .. } => self.done = true,
            Event::TurnFailed { .. } => self.failed = true,
            _ => {}
        }
        Some(env)
    }

    /// Flushes the log and reads every event of the session after `last_seq` into the backlog.
    async fn catch_up(&mut self) -> Result<(), FollowError> {
        let store_error = |session_id: &str, after_seq: u64| {
            let session_id = session_id.to_owned();
            move |source| FollowError::Store {
                session_id,
                after_seq,
                source,
            }
        };
        self.log
            .flush()
            .await
            .map_err(store_error(&self.session_id, self.last_seq))?;
        let reader = match self.reader.take() {
            Some(reader) => reader,
            None => self
                .log
                .reader()
                .map_err(store_error(&self.session_id, self.last_seq))?,
        };
        let session_id = self.session_id.clone();
        let after = self.last_seq;
        let (reader, pages) = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let mut after = after;
            loop {
                match reader.session_page(&session_id, after, PAGE) {
                    Ok(page) => {
                        let full = page.len() == PAGE;
                        if let Some(last) = page.last() {
                            after = last.seq;
                        }
                        out.extend(page);
                        if !full {
                            return (reader, Ok(out));
                        }
                    }
                    Err(err) => return (reader, Err((after, err))),
                }
            }
        })
        .await
        .map_err(|e| FollowError::ReadTask {
            session_id: self.session_id.clone(),
            reason: e.to_string(),
        })?;
        self.reader = Some(reader);
        let pages = pages.map_err(|(after, source)| FollowError::Store {
            session_id: self.session_id.clone(),
            after_seq: after,
            source,
        })?;
        // Events already on the bus that the log also returned are dropped by `take` (seq order).
        let mut merged: Vec<Envelope> = self.backlog.drain(..).collect();
        merged.extend(pages);
        merged.sort_by_key(|e| e.seq);
        merged.dedup_by_key(|e| e.seq);
        self.backlog = merged.into();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use mull_core::{EntryPath, StreamPart, TurnStatus, Usage};
    use serde_json::json;

    struct Fixture {
        _dir: tempfile::TempDir,
        log: Log,
        tx: async_broadcast::Sender<Envelope>,
        rx: async_broadcast::InactiveReceiver<Envelope>,
    }

    fn fixture(capacity: usize) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("open log");
        let (mut tx, rx) = async_broadcast::broadcast(capacity);
        tx.set_overflow(true);
        // As the engine's bus: a broadcast with no active receiver must not wait for one.
        tx.set_await_active(false);
        Fixture {
            _dir: dir,
            log,
            tx,
            rx: rx.deactivate(),
        }
    }

    /// Appends and broadcasts, as the engine does.
    async fn emit(f: &Fixture, session: &str, turn: Option<&str>, event: Event) -> Envelope {
        let at = DateTime::from_timestamp(0, 0).unwrap_or_default();
        let env = f.log.append(session, turn, at, event).expect("append");
        let _ = f.tx.broadcast_direct(env.clone()).await;
        env
    }

    fn started(request: &str) -> Event {
        Event::TurnStarted {
            request_id: request.into(),
            message_id: format!("msg_{request}"),
            entry: EntryPath::Http,
            continuation: false,
            attempt: 0,
            body: json!({}),
        }
    }

    fn delta(text: &str) -> Event {
        Event::Chunk {
            step: 0,
            part: StreamPart::TextDelta {
                id: "t".into(),
                text: text.into(),
            },
            original: None,
        }
    }

    fn finished(request: &str) -> Event {
        Event::TurnFinished {
            request_id: request.into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage::default(),
        }
    }

    async fn drain(follower: &mut TurnFollower) -> Vec<u64> {
        let mut seqs = Vec::new();
        while let Some(env) = follower.next().await.expect("follows") {
            seqs.push(env.seq);
        }
        seqs
    }

    #[tokio::test]
    async fn a_turn_half_written_before_the_follower_is_seen_once_in_order() {
        let f = fixture(64);
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "other", Some("tx"), started("rx")).await;
        emit(&f, "s", Some("t1"), delta("a")).await;
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(
            f.log.clone(),
            "s",
            bus,
            0,
            TurnSelector::Request("r1".into()),
        );
        let first = follower.next().await.expect("follows").expect("an event");
        assert_eq!(first.seq, 1);
        emit(&f, "s", Some("t1"), delta("b")).await;
        emit(&f, "other", Some("tx"), delta("x")).await;
        emit(&f, "s", Some("t1"), finished("r1")).await;
        emit(&f, "s", Some("t2"), started("r2")).await;
        let rest = drain(&mut follower).await;
        assert_eq!(rest, vec![3, 4, 6]);
        assert_eq!(follower.turn_id(), Some("t1"));
    }

    #[tokio::test]
    async fn the_next_turn_is_adopted_when_it_starts() {
        let f = fixture(64);
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), finished("r1")).await;
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 2, TurnSelector::Next);
        let writer = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            emit(&f, "s", Some("t2"), started("r2")).await;
            emit(&f, "s", Some("t2"), delta("x")).await;
            emit(&f, "s", Some("t2"), finished("r2")).await;
        };
        let (seqs, ()) = tokio::join!(drain(&mut follower), writer);
        assert_eq!(seqs, vec![3, 4, 5]);
    }

    #[tokio::test]
    async fn an_overflowing_bus_is_made_good_from_the_log() {
        let f = fixture(2);
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, TurnSelector::Next);
        emit(&f, "s", Some("t1"), started("r1")).await;
        for i in 0..50 {
            emit(&f, "s", Some("t1"), delta(&i.to_string())).await;
        }
        emit(&f, "s", Some("t1"), finished("r1")).await;
        let seqs = drain(&mut follower).await;
        assert_eq!(seqs, (1..=52).collect::<Vec<u64>>());
    }

    #[tokio::test]
    async fn a_request_that_failed_before_its_turn_ends_the_stream() {
        let f = fixture(8);
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(
            f.log.clone(),
            "s",
            bus,
            0,
            TurnSelector::Request("r9".into()),
        );
        emit(
            &f,
            "s",
            None,
            Event::TurnFailed {
                request_id: Some("r9".into()),
                stage: mull_core::ErrorStage::Persist,
                messages_persisted: false,
                classification: None,
                error: "disk full".into(),
            },
        )
        .await;
        assert_eq!(drain(&mut follower).await, vec![1]);
    }

    #[tokio::test]
    async fn a_closed_bus_ends_after_what_the_log_holds() {
        let f = fixture(8);
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(f.log.clone(), "s", bus, 0, TurnSelector::Next);
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), delta("a")).await;
        let Fixture { tx, rx, .. } = f;
        drop(rx);
        drop(tx);
        assert_eq!(drain(&mut follower).await, vec![1, 2]);
    }
}
