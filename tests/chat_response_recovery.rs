//! `on_chat_response` again after a crash (`SessionConfig::redeliver_chat_response`): a child
//! process whose hook is still running when it is killed with SIGKILL leaves the delivery owed
//! in the log, and the next open calls the hook for that request with `recovered: true`, once.
//! A delivery that finished is never made again.
//!
//! The test binary re-invokes itself as the child: `crashing_child` does nothing unless
//! `MULL_REDELIVER_DB` is set.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mull::core::{Event, TurnStatus};
use mull::engine::{ChatResponseResult, SessionConfig};
use mull::prelude::*;
use mull::providers::scripted::ScriptedModel;
use mull::store::LogReader;

const DB: &str = "MULL_REDELIVER_DB";
const MARK: &str = "MULL_REDELIVER_MARK";

/// Answers once; its `on_chat_response` records each call, and in the child, marks a file and
/// never returns, so the process dies inside it.
struct Answerer {
    calls: Arc<Mutex<Vec<ChatResponseResult>>>,
    hang_after_marking: Option<std::path::PathBuf>,
}

#[async_trait]
impl Agent for Answerer {
    fn name(&self) -> &str {
        "answerer"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(
            ScriptedModel::builder("scripted")
                .step(|s| s.text("Forty-two."))
                .build(),
        )
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        session.redeliver_chat_response(true)
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

fn agent(hang: Option<&Path>) -> (Arc<Answerer>, Arc<Mutex<Vec<ChatResponseResult>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let agent = Answerer {
        calls: Arc::clone(&calls),
        hang_after_marking: hang.map(Path::to_path_buf),
    };
    (Arc::new(agent), calls)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Opens session `s` on the log at `db` with a hook that returns, and hands back its calls.
fn reopen(db: &Path) -> Vec<ChatResponseResult> {
    let (agent, calls) = agent(None);
    runtime().block_on(async {
        let log = Log::open(db).expect("log");
        let session = Session::open(&log, agent, SessionOptions::new("s"))
            .await
            .expect("reopens");
        drop(session);
        log.close().expect("closes");
    });
    let calls = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    calls
}

fn kinds(db: &Path) -> Vec<String> {
    LogReader::open(db)
        .expect("reader")
        .session_events("s", 0)
        .expect("events")
        .iter()
        .map(|e| e.kind().to_owned())
        .filter(|k| k.starts_with("chat_response") || k == "turn_finished")
        .collect()
}

#[test]
fn crashing_child() {
    let (Ok(db), Ok(mark)) = (std::env::var(DB), std::env::var(MARK)) else {
        return;
    };
    let (agent, _) = agent(Some(Path::new(&mark)));
    runtime().block_on(async {
        let log = Log::open(&db).expect("log");
        let session = Session::open(&log, agent, SessionOptions::new("s"))
            .await
            .expect("opens");
        // Never returns: the hook hangs until the parent kills this process.
        let _ = session
            .save_messages(
                vec![UIMessage::user("u1", "The answer?")],
                TurnOptions::default(),
            )
            .await;
    });
}

#[test]
fn a_hook_cut_by_a_crash_runs_again_recovered_once_on_the_next_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    let mark = dir.path().join("in-the-hook");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "crashing_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DB, &db)
        .env(MARK, &mark)
        .spawn()
        .expect("starts the child");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !mark.exists() {
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child never reached on_chat_response");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL inside the hook: nothing after it is written.
    child.kill().expect("kills the child");
    child.wait().expect("reaps the child");
    let request_id = std::fs::read_to_string(&mark).expect("the hook's mark");
    assert_eq!(kinds(&db), ["chat_response_due", "turn_finished"]);

    let calls = reopen(&db);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert!(call.recovered);
    assert_eq!(call.request_id, request_id);
    assert_eq!(call.status, TurnStatus::Completed);
    assert_eq!(call.message.plain_text(), "Forty-two.");
    assert_eq!(
        kinds(&db),
        [
            "chat_response_due",
            "turn_finished",
            "chat_response_delivered"
        ]
    );
    let reader = LogReader::open(&db).expect("reader");
    let delivered = reader
        .session_events("s", 0)
        .expect("events")
        .into_iter()
        .find_map(|e| match e.event {
            Event::ChatResponseDelivered {
                request_id,
                recovered,
            } => Some((request_id, recovered)),
            _ => None,
        });
    assert_eq!(delivered, Some((request_id, true)));

    // Delivered now: opening again calls nothing.
    assert!(reopen(&db).is_empty());
}

#[test]
fn a_delivered_hook_is_not_run_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    let (agent, calls) = agent(None);
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
        kinds(&db),
        [
            "chat_response_due",
            "turn_finished",
            "chat_response_delivered"
        ]
    );
    assert!(reopen(&db).is_empty());
}
