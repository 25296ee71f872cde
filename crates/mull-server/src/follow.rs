//! Following one request's turns for a client stream: each event of its attempts once, in
//! `seq` order, until the request has its verdict.
//!
//! Two pieces below the server do the work. The session's events come from a
//! [`mull_engine::Follow`] (the log through its read contract, [`mull_store::ReadLog`], then
//! live, gap-free and exactly once: on this node the session's bus, for a chat another node
//! runs the log polled); what the request is doing
//! — which events are its attempts', whether an attempt that ended in error is retried or was
//! its final failure — comes from a [`RequestFold`]. What is left here is how long a client
//! waits: when an attempt ended in error and neither the retry nor the final failure appears,
//! the follower asks whether the request is still active ([`RequestActive`]) before it ends the
//! stream; when the failure was recorded before its attempt's end, it waits a grace period for
//! that end.
//!
//! Should the node lose the session to another node mid-turn, the follow starts over from the
//! log (the events this node streamed may never have been committed): the request is folded
//! again from there, and of what the client already got, only the turn's end is passed on.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use mull_core::{Envelope, Event};
use mull_engine::Follow;
use mull_store::{RequestFold, RequestPhase};

pub use mull_engine::FollowError;

/// How long a follower waits for `turn_finished` after a `turn_failed` before ending anyway.
const FAILED_GRACE: Duration = Duration::from_secs(2);

/// How often a follower waiting for a failed attempt's verdict asks whether the request is
/// still active.
const VERDICT_POLL: Duration = Duration::from_millis(250);

/// Answers whether a request is still queued or running in its session (see
/// `Session::is_request_active`; for a session another node holds, whether it still holds
/// it); a follower asks it when a failed attempt's verdict is late.
pub type RequestActive = Arc<dyn Fn(&str) -> BoxFuture<'static, bool> + Send + Sync>;

/// Yields the events of one request's turns, in `seq` order, exactly once, until the request's
/// last attempt ends.
pub struct TurnFollower {
    events: Follow,
    request: RequestFold,
    /// Asked when a failed attempt's verdict is late; `None`: the request counts as ended.
    active: Option<RequestActive>,
    /// The highest seq of the session looked at.
    last_seq: u64,
    /// Events up to this seq were passed on before the follow started over; read again, only
    /// a turn's end among them is passed on.
    replayed_through: Option<u64>,
    done: bool,
}

impl TurnFollower {
    /// A follower of request `request_id` among `events` (a follow that starts before the
    /// request's first event).
    pub fn new(events: Follow, request_id: impl Into<String>) -> TurnFollower {
        TurnFollower {
            last_seq: events.last_seq(),
            events,
            request: RequestFold::new(request_id),
            active: None,
            replayed_through: None,
            done: false,
        }
    }

    /// Asks `active` whether the request still runs when a failed attempt's verdict is late
    /// (without it, a late verdict ends the stream after what the log holds).
    pub fn with_request_active(mut self, active: RequestActive) -> TurnFollower {
        self.active = Some(active);
        self
    }

    /// The request followed.
    pub fn request_id(&self) -> &str {
        self.request.request_id()
    }

    /// The attempt being followed, once its start was seen.
    pub fn turn_id(&self) -> Option<&str> {
        self.request.current().and_then(|a| a.turn_id.as_deref())
    }

    /// The next event of the request; `None` once it has ended.
    pub async fn next(&mut self) -> Result<Option<Envelope>, FollowError> {
        loop {
            let wait = match self.request.phase() {
                _ if self.done => return Ok(None),
                RequestPhase::Over => return Ok(None),
                RequestPhase::AwaitingVerdict => Some(VERDICT_POLL),
                RequestPhase::AwaitingEnd => Some(FAILED_GRACE),
                _ => None,
            };
            let next = match wait {
                None => self.events.next().await,
                Some(wait) => match tokio::time::timeout(wait, self.events.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        self.late_verdict().await;
                        continue;
                    }
                },
            };
            let Some(env) = next.transpose()? else {
                // The session is gone and the log holds nothing more of it.
                self.done = true;
                return Ok(None);
            };
            if env.seq <= self.last_seq {
                // The follow started over from the log (see the module docs).
                self.replayed_through = Some(self.last_seq);
                self.request = RequestFold::new(self.request.request_id());
            }
            self.last_seq = env.seq;
            if !self.request.apply(&env) {
                continue;
            }
            let replayed = self.replayed_through.is_some_and(|seq| env.seq <= seq);
            let ends = matches!(
                env.event,
                Event::TurnFinished { .. } | Event::TurnFailed { .. }
            );
            if !replayed || ends {
                return Ok(Some(env));
            }
        }
    }

    /// Nothing came while the request's verdict was due.
    async fn late_verdict(&mut self) {
        if self.request.phase() == RequestPhase::AwaitingEnd {
            // The failure is the verdict; its attempt's end never came.
            self.done = true;
            return;
        }
        let running = match &self.active {
            Some(active) => active(self.request.request_id()).await,
            None => false,
        };
        if !running {
            // Whatever the request wrote before it ended is in the log: take that, then end.
            self.events.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use mull_core::{EntryPath, StreamPart, TurnStatus, Usage};
    use mull_engine::Follow;
    use mull_store::EventLog;
    use mull_store::Log;
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

    /// A follower of `request` in session `s` after `after_seq`, live from `bus`.
    fn follower(
        f: &Fixture,
        bus: async_broadcast::Receiver<Envelope>,
        after_seq: u64,
        request: &str,
    ) -> TurnFollower {
        TurnFollower::new(
            Follow::with_bus(Arc::new(f.log.clone()), "s", bus, after_seq),
            request,
        )
    }

    /// Appends and broadcasts, as the engine does.
    async fn emit(f: &Fixture, session: &str, turn: Option<&str>, event: Event) -> Envelope {
        let at = DateTime::from_timestamp(0, 0).unwrap_or_default();
        let env = f.log.append(session, turn, at, event).expect("append");
        let _ = f.tx.broadcast_direct(env.clone()).await;
        env
    }

    /// The start of `request`'s first attempt.
    fn started(request: &str) -> Event {
        attempt_started(request, 0)
    }

    /// The start of attempt `attempt` of `request`, each with a message of its own.
    fn attempt_started(request: &str, attempt: u32) -> Event {
        Event::TurnStarted {
            request_id: request.into(),
            message_id: format!("msg_{request}_{attempt}"),
            entry: EntryPath::Http,
            continuation: false,
            attempt,
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
            response_owed: false,
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
        let mut follower = follower(&f, bus, 0, "r1");
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
    async fn the_requests_turn_is_adopted_when_it_starts_and_no_other() {
        let f = fixture(64);
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), finished("r1")).await;
        let bus = f.rx.activate_cloned();
        let mut follower = follower(&f, bus, 2, "r3");
        let writer = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            // An unrelated request's turn starts first.
            emit(&f, "s", Some("t2"), started("r2")).await;
            emit(&f, "s", Some("t2"), delta("other")).await;
            emit(&f, "s", Some("t2"), finished("r2")).await;
            emit(&f, "s", Some("t3"), started("r3")).await;
            emit(&f, "s", Some("t3"), delta("x")).await;
            emit(&f, "s", Some("t3"), finished("r3")).await;
        };
        let (seqs, ()) = tokio::join!(drain(&mut follower), writer);
        assert_eq!(seqs, vec![6, 7, 8]);
        assert_eq!(follower.turn_id(), Some("t3"));
    }

    fn failed_attempt(request: &str) -> Event {
        Event::TurnFinished {
            request_id: request.into(),
            status: TurnStatus::Error,
            error: Some("prompt is too long".into()),
            steps: 0,
            usage: Usage::default(),
            response_owed: false,
        }
    }

    fn final_failure(request: &str) -> Event {
        Event::TurnFailed {
            request_id: Some(request.into()),
            stage: mull_core::ErrorStage::Stream,
            messages_persisted: true,
            classification: Some(mull_core::ChatErrorClassification::ContextOverflow),
            error: "prompt is too long".into(),
            model_error: None,
        }
    }

    #[tokio::test]
    async fn a_retried_request_is_followed_to_its_last_attempt() {
        let f = fixture(64);
        let bus = f.rx.activate_cloned();
        let mut follower = follower(&f, bus, 0, "r1");
        let writer = async {
            emit(&f, "s", Some("t1"), started("r1")).await;
            emit(&f, "s", Some("t1"), failed_attempt("r1")).await;
            // Compaction takes a while before the retry starts.
            tokio::time::sleep(Duration::from_millis(50)).await;
            emit(&f, "s", Some("t2"), attempt_started("r1", 1)).await;
            emit(&f, "s", Some("t2"), delta("answer")).await;
            emit(&f, "s", Some("t2"), finished("r1")).await;
        };
        let (seqs, ()) = tokio::join!(drain(&mut follower), writer);
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        assert_eq!(follower.turn_id(), Some("t2"));
    }

    #[tokio::test]
    async fn a_failed_attempt_ends_the_stream_at_its_final_failure() {
        let f = fixture(64);
        let bus = f.rx.activate_cloned();
        let mut follower = follower(&f, bus, 0, "r1")
            .with_request_active(Arc::new(|_: &str| Box::pin(async { true })));
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), failed_attempt("r1")).await;
        emit(&f, "s", Some("t1"), final_failure("r1")).await;
        emit(&f, "s", Some("t2"), started("r2")).await;
        assert_eq!(drain(&mut follower).await, vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn a_late_verdict_ends_the_stream_once_the_request_is_over() {
        let f = fixture(64);
        let bus = f.rx.activate_cloned();
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let probe = std::sync::Arc::clone(&running);
        let mut follower =
            follower(&f, bus, 0, "r1").with_request_active(Arc::new(move |request: &str| {
                let active = request == "r1" && probe.load(std::sync::atomic::Ordering::SeqCst);
                Box::pin(async move { active })
            }));
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), failed_attempt("r1")).await;
        let ender = async {
            // Longer than a poll: the request still runs, so the follower keeps waiting.
            tokio::time::sleep(VERDICT_POLL * 3).await;
            running.store(false, std::sync::atomic::Ordering::SeqCst);
        };
        let (seqs, ()) = tokio::join!(drain(&mut follower), ender);
        assert_eq!(seqs, vec![1, 2]);
        assert!(!running.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn an_overflowing_bus_is_made_good_from_the_log() {
        let f = fixture(2);
        let bus = f.rx.activate_cloned();
        let mut follower = follower(&f, bus, 0, "r1");
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
        let mut follower = follower(&f, bus, 0, "r9");
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
                model_error: None,
            },
        )
        .await;
        assert_eq!(drain(&mut follower).await, vec![1]);
    }

    #[tokio::test]
    async fn a_closed_bus_ends_after_what_the_log_holds() {
        let f = fixture(8);
        let bus = f.rx.activate_cloned();
        let mut follower = follower(&f, bus, 0, "r1");
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), delta("a")).await;
        let Fixture { tx, rx, .. } = f;
        drop(rx);
        drop(tx);
        assert_eq!(drain(&mut follower).await, vec![1, 2]);
    }

    /// A log whose write contract refuses to read: what a follower reads must come through
    /// the read contract ([`EventLog::read_log`]).
    #[derive(Debug)]
    struct ReadsOnlyThroughReadLog(Log);

    impl EventLog for ReadsOnlyThroughReadLog {
        fn open_session<'a>(
            &'a self,
            session_id: &'a str,
        ) -> mull_store::LogFuture<'a, mull_store::SessionState> {
            EventLog::open_session(&self.0, session_id)
        }
        fn append_event(
            &self,
            session_id: &str,
            turn_id: Option<&str>,
            at: chrono::DateTime<chrono::Utc>,
            event: Event,
        ) -> Result<mull_store::Appended, mull_store::StoreError> {
            EventLog::append_event(&self.0, session_id, turn_id, at, event)
        }
        fn flush<'a>(&'a self, session_id: &'a str) -> mull_store::LogFuture<'a, ()> {
            EventLog::flush(&self.0, session_id)
        }
        fn turn_events<'a>(
            &'a self,
            _session_id: &'a str,
            _turn_id: &'a str,
        ) -> mull_store::LogFuture<'a, Vec<Envelope>> {
            Box::pin(async { Err(mull_store::StoreError::WriterGone) })
        }
        fn session_page<'a>(
            &'a self,
            _session_id: &'a str,
            _after_seq: u64,
            _limit: usize,
        ) -> mull_store::LogFuture<'a, Vec<Envelope>> {
            Box::pin(async { Err(mull_store::StoreError::WriterGone) })
        }
        fn read_log(
            &self,
        ) -> Result<Arc<dyn mull_store::ReadLog + Send + Sync>, mull_store::StoreError> {
            EventLog::read_log(&self.0)
        }
    }

    #[tokio::test]
    async fn the_log_is_read_through_the_read_contract() {
        let f = fixture(2);
        let log = Arc::new(ReadsOnlyThroughReadLog(f.log.clone()));
        // Half the turn is written before the follower starts, the rest overflows its bus: both
        // come from reads of the log.
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), delta("before")).await;
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(
            Follow::with_bus(log as Arc<dyn EventLog>, "s", bus, 0),
            "r1",
        );
        for i in 0..20 {
            emit(&f, "s", Some("t1"), delta(&i.to_string())).await;
        }
        emit(&f, "s", Some("t1"), finished("r1")).await;
        assert_eq!(drain(&mut follower).await, (1..=23).collect::<Vec<u64>>());
    }

    /// A log shared with other nodes, as far as a follower can tell: this node holds the
    /// session until `lost` is set (another node took it over).
    #[derive(Debug)]
    struct Shared {
        log: Log,
        lost: std::sync::atomic::AtomicBool,
    }

    impl EventLog for Shared {
        fn open_session<'a>(
            &'a self,
            session_id: &'a str,
        ) -> mull_store::LogFuture<'a, mull_store::SessionState> {
            EventLog::open_session(&self.log, session_id)
        }
        fn append_event(
            &self,
            session_id: &str,
            turn_id: Option<&str>,
            at: chrono::DateTime<chrono::Utc>,
            event: Event,
        ) -> Result<mull_store::Appended, mull_store::StoreError> {
            EventLog::append_event(&self.log, session_id, turn_id, at, event)
        }
        fn flush<'a>(&'a self, session_id: &'a str) -> mull_store::LogFuture<'a, ()> {
            EventLog::flush(&self.log, session_id)
        }
        fn turn_events<'a>(
            &'a self,
            session_id: &'a str,
            turn_id: &'a str,
        ) -> mull_store::LogFuture<'a, Vec<Envelope>> {
            EventLog::turn_events(&self.log, session_id, turn_id)
        }
        fn session_page<'a>(
            &'a self,
            session_id: &'a str,
            after_seq: u64,
            limit: usize,
        ) -> mull_store::LogFuture<'a, Vec<Envelope>> {
            EventLog::session_page(&self.log, session_id, after_seq, limit)
        }
        fn read_log(
            &self,
        ) -> Result<Arc<dyn mull_store::ReadLog + Send + Sync>, mull_store::StoreError> {
            EventLog::read_log(&self.log)
        }
        fn is_shared(&self) -> bool {
            true
        }
        fn holds(&self, _session_id: &str) -> bool {
            !self.lost.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn a_node_that_loses_the_session_passes_on_the_new_owners_end_of_the_turn() {
        let f = fixture(64);
        let shared = Arc::new(Shared {
            log: f.log.clone(),
            lost: std::sync::atomic::AtomicBool::new(false),
        });
        let bus = f.rx.activate_cloned();
        let mut follower = TurnFollower::new(
            Follow::with_bus(Arc::clone(&shared) as Arc<dyn EventLog>, "s", bus, 0),
            "r1",
        );
        emit(&f, "s", Some("t1"), started("r1")).await;
        emit(&f, "s", Some("t1"), delta("a")).await;
        // This node published seq 3 but never committed it: it was cut off past its lease.
        let phantom = Envelope {
            seq: 3,
            session_id: "s".into(),
            turn_id: Some("t1".into()),
            at: DateTime::from_timestamp(0, 0).unwrap_or_default(),
            v: mull_core::EVENT_VERSION,
            event: delta("never committed"),
        };
        let _ = f.tx.broadcast_direct(phantom).await;
        let mut seen = Vec::new();
        for _ in 0..3 {
            let env = follower.next().await.expect("follows").expect("an event");
            seen.push((env.seq, env.kind().to_owned()));
        }
        // The node that took the session over ends the turn at seq 3, in the log only.
        shared.lost.store(true, std::sync::atomic::Ordering::SeqCst);
        let at = DateTime::from_timestamp(0, 0).unwrap_or_default();
        f.log
            .append("s", Some("t1"), at, finished("r1"))
            .expect("append");
        while let Some(env) = follower.next().await.expect("follows") {
            seen.push((env.seq, env.kind().to_owned()));
        }
        // What the client had is not sent again; the new owner's end is.
        let kinds = |pairs: &[(u64, &str)]| -> Vec<(u64, String)> {
            pairs.iter().map(|(s, k)| (*s, (*k).to_owned())).collect()
        };
        assert_eq!(
            seen,
            kinds(&[
                (1, "turn_started"),
                (2, "chunk"),
                (3, "chunk"),
                (3, "turn_finished")
            ])
        );
    }
}
