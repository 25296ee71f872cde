//! `on_chat_response` again after a crash, as in Think 0.24 (on unless the session opts out
//! with `SessionConfig::redeliver_chat_response(false)`): a child process killed with SIGKILL
//! inside the hook, or in the middle of its turn, leaves the delivery owed in the log, and the
//! next open calls the hook for that request with `recovered: true`, once. A delivery that
//! finished is never made again; a log written before deliveries were recorded owes nothing.
//!
//! The test binary re-invokes itself as the child: `crashing_child` does nothing unless
//! `MULL_REDELIVER_DB` is set.

use std::io::BufReader;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mull::core::{Event, StreamPart, TurnStatus};
use mull::engine::{ChatResponseResult, SessionConfig};
use mull::prelude::*;
use mull::providers::scripted::ScriptedModel;
use mull::store::recovery::INTERRUPTED_TURN;
use mull::store::{import_jsonl, LogReader};

const DB: &str = "MULL_REDELIVER_DB";
const MARK: &str = "MULL_REDELIVER_MARK";
const MODE: &str = "MULL_REDELIVER_MODE";

/// Where the child is when the parent kills it.
#[derive(Clone, Copy, PartialEq)]
enum Crash {
    /// Inside `on_chat_response`, after the turn ended.
    InHook,
    /// Inside `on_chat_response`, in a session that opted out of redelivery.
    InHookOptedOut,
    /// In the middle of the turn: the model has streamed half an answer and stalls.
    MidTurn,
}

impl Crash {
    fn name(self) -> &'static str {
        match self {
            Crash::InHook => "in-hook",
            Crash::InHookOptedOut => "in-hook-opted-out",
            Crash::MidTurn => "mid-turn",
        }
    }

    fn parse(name: &str) -> Option<Crash> {
        [Crash::InHook, Crash::InHookOptedOut, Crash::MidTurn]
            .into_iter()
            .find(|c| c.name() == name)
    }
}

/// Answers once; its `on_chat_response` records each call, and in a child crashing in the
/// hook, marks a file and never returns, so the process dies inside it.
struct Answerer {
    calls: Arc<Mutex<Vec<ChatResponseResult>>>,
    hang_after_marking: Option<std::path::PathBuf>,
    opted_out: bool,
    stall_mid_turn: bool,
}

#[async_trait]
impl Agent for Answerer {
    fn name(&self) -> &str {
        "answerer"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        let model = ScriptedModel::builder("scripted");
        let model = if self.stall_mid_turn {
            // Far longer than the test waits: the parent kills the child during the pause.
            model.step(|s| {
                s.text_deltas(["Half ", "an answer"])
                    .pause(Duration::from_secs(3_600))
                    .text(" never seen.")
            })
        } else {
            model.step(|s| s.text("Forty-two."))
        };
        Arc::new(model.build())
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        if self.opted_out {
            session.redeliver_chat_response(false)
        } else {
            session
        }
    }
    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(result.clone());
        if let Some(mark) = &self.hang_after_marking {
            // Written whole, then renamed: the parent never reads half a mark.
            let part = mark.with_extension("part");
            std::fs::write(&part, &result.request_id).map_err(|e| e.to_string())?;
            std::fs::rename(&part, mark).map_err(|e| e.to_string())?;
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

type Calls = Arc<Mutex<Vec<ChatResponseResult>>>;

fn agent(crash: Option<(Crash, &Path)>, opted_out: bool) -> (Arc<Answerer>, Calls) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let agent = Answerer {
        calls: Arc::clone(&calls),
        hang_after_marking: crash
            .filter(|(c, _)| *c != Crash::MidTurn)
            .map(|(_, mark)| mark.to_path_buf()),
        opted_out,
        stall_mid_turn: crash.is_some_and(|(c, _)| c == Crash::MidTurn),
    };
    (Arc::new(agent), calls)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Opens session `session` on the log at `db` with a hook that returns, and hands back its
/// calls.
fn reopen_session(db: &Path, session: &str, opted_out: bool) -> Vec<ChatResponseResult> {
    let (agent, calls) = agent(None, opted_out);
    runtime().block_on(async {
        let log = Log::open(db).expect("log");
        let session = Session::open(&log, agent, SessionOptions::new(session))
            .await
            .expect("reopens");
        drop(session);
        log.close().expect("closes");
    });
    let calls = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    calls
}

fn reopen(db: &Path) -> Vec<ChatResponseResult> {
    reopen_session(db, "s", false)
}

fn events(db: &Path, session: &str) -> Vec<Event> {
    LogReader::open(db)
        .expect("reader")
        .session_events(session, 0)
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect()
}

/// The session's `turn_finished` (with whether it owes the hook) and delivery events.
fn ends(db: &Path) -> Vec<String> {
    events(db, "s")
        .iter()
        .filter_map(|e| match e {
            Event::TurnFinished {
                status,
                response_owed,
                ..
            } => Some(format!("turn_finished {status:?} owed={response_owed}")),
            Event::ChatResponseDelivered { recovered, .. } => {
                Some(format!("chat_response_delivered recovered={recovered}"))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn crashing_child() {
    let (Ok(db), Ok(mark), Some(crash)) = (
        std::env::var(DB),
        std::env::var(MARK),
        std::env::var(MODE).ok().as_deref().and_then(Crash::parse),
    ) else {
        return;
    };
    let (agent, _) = agent(
        Some((crash, Path::new(&mark))),
        crash == Crash::InHookOptedOut,
    );
    runtime().block_on(async {
        let log = Log::open(&db).expect("log");
        let session = Session::open(&log, agent, SessionOptions::new("s"))
            .await
            .expect("opens");
        // Never returns: the hook or the model hangs until the parent kills this process.
        let _ = session
            .save_messages(
                vec![UIMessage::user("u1", "The answer?")],
                TurnOptions::default(),
            )
            .await;
    });
}

/// Kills `child` (and reaps it) when dropped: nothing outlives a failed test.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the child crashing at `crash` on `db`, waits until `ready` holds (polling, with a
/// generous bound), then kills it with SIGKILL.
fn crash_child(crash: Crash, db: &Path, mark: &Path, ready: impl Fn() -> bool) {
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "crashing_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DB, db)
        .env(MARK, mark)
        .env(MODE, crash.name())
        .spawn()
        .expect("starts the child");
    let mut child = Reaped(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready() {
        if Instant::now() > deadline || child.0.try_wait().ok().flatten().is_some() {
            panic!("the child never reached the point it should crash at");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.0.kill().expect("kills the child");
    child.0.wait().expect("reaps the child");
}

#[test]
fn a_hook_cut_by_a_crash_runs_again_recovered_once_on_the_next_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    let mark = dir.path().join("in-the-hook");
    // SIGKILL inside the hook: nothing after it is written.
    crash_child(Crash::InHook, &db, &mark, || mark.exists());
    let request_id = std::fs::read_to_string(&mark).expect("the hook's mark");
    assert_eq!(ends(&db), ["turn_finished Completed owed=true"]);

    let calls = reopen(&db);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert!(call.recovered);
    assert_eq!(call.request_id, request_id);
    assert_eq!(call.status, TurnStatus::Completed);
    assert_eq!(call.message.plain_text(), "Forty-two.");
    assert_eq!(
        ends(&db),
        [
            "turn_finished Completed owed=true",
            "chat_response_delivered recovered=true"
        ]
    );
    let delivered = events(&db, "s").into_iter().find_map(|e| match e {
        Event::ChatResponseDelivered { request_id, .. } => Some(request_id),
        _ => None,
    });
    assert_eq!(delivered, Some(request_id));

    // Delivered now: opening again calls nothing, and writes no delivery.
    assert!(reopen(&db).is_empty());
    assert_eq!(ends(&db).len(), 2);
}

#[test]
fn a_turn_cut_mid_stream_gets_its_hook_once_with_the_partial_message_and_the_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    let mark = dir.path().join("unused");
    // Killed once both deltas are committed: the model is paused for an hour after them.
    let streamed = || {
        db.exists()
            && LogReader::open(&db)
                .and_then(|r| r.session_events("s", 0))
                .is_ok_and(|events| {
                    events.iter().any(|e| {
                        matches!(
                            &e.event,
                            Event::Chunk { part: StreamPart::TextDelta { text, .. }, .. }
                                if text == "an answer"
                        )
                    })
                })
    };
    crash_child(Crash::MidTurn, &db, &mark, streamed);
    assert!(
        ends(&db).is_empty(),
        "the turn never ended: {:?}",
        ends(&db)
    );

    // The reopen ends the turn as interrupted, then calls its hook, recovered.
    let calls = reopen(&db);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert!(call.recovered);
    assert!(!call.continuation);
    assert_eq!(call.status, TurnStatus::Error);
    assert_eq!(call.error.as_deref(), Some(INTERRUPTED_TURN));
    assert_eq!(call.message.plain_text(), "Half an answer");
    let events = events(&db, "s");
    let started = events.iter().find_map(|e| match e {
        Event::TurnStarted {
            request_id,
            message_id,
            ..
        } => Some((request_id.clone(), message_id.clone())),
        _ => None,
    });
    assert_eq!(
        started,
        Some((call.request_id.clone(), call.message.id.clone()))
    );
    assert_eq!(
        ends(&db),
        [
            "turn_finished Error owed=true",
            "chat_response_delivered recovered=true"
        ]
    );

    // Exactly once: later opens call nothing and write nothing more.
    for _ in 0..2 {
        assert!(reopen(&db).is_empty());
    }
    assert_eq!(ends(&db).len(), 2);
}

#[test]
fn a_delivered_hook_is_not_run_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    let (agent, calls) = agent(None, false);
    runtime().block_on(async {
        let log = Log::open(&db).expect("log");
        let session = Session::open(&log, agent, SessionOptions::new("s"))
            .await
            .expect("opens");
        session
            .save_messages(
                vec![UIMessage::user("u1", "The answer?")],
                TurnOptions::default(),
            )
            .await
            .expect("turn");
        drop(session);
        log.close().expect("closes");
    });
    let first = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(first.len(), 1);
    assert!(!first[0].recovered);
    assert_eq!(
        ends(&db),
        [
            "turn_finished Completed owed=true",
            "chat_response_delivered recovered=false"
        ]
    );
    assert!(reopen(&db).is_empty());
}

#[test]
fn a_session_that_opts_out_runs_the_hook_at_most_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    let mark = dir.path().join("in-the-hook");
    crash_child(Crash::InHookOptedOut, &db, &mark, || mark.exists());
    // Nothing owed, nothing delivered: the end reads as a log from before deliveries.
    assert_eq!(ends(&db), ["turn_finished Completed owed=false"]);
    assert!(reopen_session(&db, "s", true).is_empty());
    // Opting in later does not reach back: that end owes nothing.
    assert!(reopen(&db).is_empty());
    assert_eq!(ends(&db), ["turn_finished Completed owed=false"]);
}

#[test]
fn a_log_written_before_deliveries_were_recorded_redelivers_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("old.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/legacy/two-tools-before-input-events.jsonl");
    let log = Log::open(&db).expect("log");
    let file = BufReader::new(std::fs::File::open(&fixture).expect("the old log"));
    import_jsonl(file, &fixture.display().to_string(), &log).expect("imports");
    log.close().expect("closes");
    let finished = |db: &Path| {
        events(db, "sess_1")
            .iter()
            .filter(|e| matches!(e, Event::TurnFinished { .. }))
            .count()
    };
    assert_eq!(finished(&db), 1);

    // Its turn ended and its hook ran in a process long gone; no marker says so, and none is
    // needed: an end without `response_owed` owes nothing.
    assert!(reopen_session(&db, "sess_1", false).is_empty());
    let delivered = events(&db, "sess_1")
        .iter()
        .filter(|e| matches!(e, Event::ChatResponseDelivered { .. }))
        .count();
    assert_eq!(delivered, 0);
}
