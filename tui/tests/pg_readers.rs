//! The log's readers on a PostgreSQL log give what they give on a SQLite file: a recorded log
//! imported into both, then replayed, re-executed, compared, counted, checked, backtested and
//! forked on the database; the demo writes one; and the dashboard shows a PostgreSQL log live.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;
use mull_core::{EntryPath, Event, UIMessage};
use mull_store::EventLog;
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgLog, PgOptions, Reads};
use serde_json::json;
use support::{run_mull, texts};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(name)
}

/// Runs `mull ARGS`; returns (exit code, stdout, stderr).
fn mull(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = run_mull(dir, args, &[], "");
    let (out, err) = texts(&output);
    (output.status.code().unwrap_or(-1), out, err)
}

/// Runs `mull ARGS` expecting success; returns stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let (code, out, err) = mull(dir, args);
    assert_eq!(code, 0, "mull {args:?} failed:\n{out}\n{err}");
    out
}

#[test]
fn a_log_on_postgres_reads_as_its_sqlite_copy() {
    let Some(pg) = TestPg::start("a_log_on_postgres_reads_as_its_sqlite_copy") else {
        return;
    };
    let url = pg.database();
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("copy.db");
    let copy = copy.to_str().expect("utf-8 path");
    let demo = fixture("demo.jsonl");
    let demo = demo.to_str().expect("utf-8 path");

    let (code, _, err) = mull(dir.path(), &["import", demo, &url]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(demo).expect("the fixture");
    let events = text.lines().count() as u64;
    let main_events = text
        .lines()
        .filter(|l| l.contains(r#""session_id":"sess_1","#))
        .count() as u64;
    assert!(err.contains(&format!("imported {events} events")), "{err}");
    ok(dir.path(), &["import", demo, copy]);

    // Importing the same sessions again is refused, and nothing is written.
    let (code, _, err) = mull(dir.path(), &["import", demo, &url]);
    assert_ne!(code, 0);
    assert!(err.contains("already holds session(s) sess_1"), "{err}");
    let runtime = support::nodes::runtime();
    let reads = runtime.block_on(Reads::open(&url)).expect("opens");
    assert_eq!(runtime.block_on(reads.count()).expect("counts"), events);
    // Seqs count per session on PostgreSQL (the demo's sub-agent has a session of its own).
    assert_eq!(
        runtime.block_on(reads.last_seq("sess_1")).expect("reads"),
        main_events
    );

    // The same conversation, the same counts, the same re-execution.
    assert_eq!(
        ok(dir.path(), &["replay", &url]),
        ok(dir.path(), &["replay", demo])
    );
    assert_eq!(
        ok(dir.path(), &["stats", &url]),
        ok(dir.path(), &["stats", copy])
    );
    let checked = ok(dir.path(), &["replay", "--check", &url]);
    assert!(checked.contains("identical: "), "{checked}");
    assert_eq!(checked, ok(dir.path(), &["replay", "--check", demo]));
    let sound = ok(dir.path(), &["check", &url]);
    assert!(
        sound.ends_with(&format!("sound: {events} events read back\n")),
        "{sound}"
    );
    assert!(
        !sound.contains("postgres://mull"),
        "no credentials: {sound}"
    );

    // No difference between the database and the file, turn by turn.
    let a = format!("{url}@sess_1");
    let b = format!("{copy}@sess_1");
    let (code, out, err) = mull(dir.path(), &["diff", &a, &b, "--no-timing"]);
    assert_eq!(code, 0, "the runs diverge:\n{out}\n{err}");

    // A backtest reads the database as it reads the file.
    let (code_pg, pg_report, err) =
        mull(dir.path(), &["backtest", &url, "--policy", "guides-only"]);
    assert!(code_pg == 0 || code_pg == 1, "{err}");
    let (code_file, file_report, _) =
        mull(dir.path(), &["backtest", copy, "--policy", "guides-only"]);
    assert_eq!((code_pg, &pg_report), (code_file, &file_report));
    let (code, _, err) = mull(
        dir.path(),
        &[
            "backtest",
            &url,
            "--policy",
            "guides-only",
            "--continue-with",
            "scripted-demo",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("mull fork"), "{err}");

    // `mull recover` has nothing to copy out of a database, and says so.
    let (code, _, err) = mull(dir.path(), &["recover", &url, "out.db"]);
    assert_ne!(code, 0);
    assert!(err.contains("restored from its own backups"), "{err}");
}

#[test]
fn a_fork_on_postgres_goes_on_from_its_origins_history() {
    let Some(pg) = TestPg::start("a_fork_on_postgres_goes_on_from_its_origins_history") else {
        return;
    };
    let url = pg.database();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = fixture("demo.jsonl");
    let demo = demo.to_str().expect("utf-8 path");
    ok(dir.path(), &["import", demo, &url]);

    let out = ok(
        dir.path(),
        &[
            "fork",
            &url,
            "--session",
            "sess_1",
            "--turn",
            "2",
            "--into",
            "sess_fork",
            "--message",
            "And Porto?",
        ],
    );
    assert!(out.contains("forked sess_1 at seq "), "{out}");
    assert!(out.contains("Completed"), "the fork's turn ran: {out}");

    let runtime = support::nodes::runtime();
    let reads = runtime.block_on(Reads::open(&url)).expect("opens");
    let fork = runtime
        .block_on(reads.session_page("sess_fork", 0, 10_000))
        .expect("reads the fork");
    // The fork point is a seq of the origin session on the database, just before turn 2.
    let Event::SessionForked {
        origin, origin_seq, ..
    } = &fork[0].event
    else {
        panic!("the fork starts with {:?}", fork[0].event);
    };
    assert_eq!(origin, "sess_1");
    let origin_events = runtime
        .block_on(reads.session_page("sess_1", 0, 10_000))
        .expect("reads the origin");
    let second_turn = origin_events
        .iter()
        .filter(|e| matches!(e.event, Event::TurnStarted { .. }))
        .nth(1)
        .expect("the origin has a second turn");
    assert!(
        origin_events
            .iter()
            .any(|e| e.seq == *origin_seq && e.seq < second_turn.seq),
        "fork point {origin_seq} is before turn 2 at {}",
        second_turn.seq
    );
    // The fork's state holds the origin's first turn and its own new one.
    let (state, last) = runtime
        .block_on(reads.load_session("sess_fork"))
        .expect("folds the fork");
    assert_eq!(last, fork.last().expect("events").seq);
    let texts: Vec<String> = state.messages.iter().map(|m| m.plain_text()).collect();
    assert!(texts.iter().any(|t| t.contains("Lisbon")), "{texts:?}");
    assert!(texts.iter().any(|t| t == "And Porto?"), "{texts:?}");
    assert_eq!(state.turns.len(), 2, "{:?}", state.turns);

    // The fork compares with its origin from turn 1 on, as forks on a file do.
    let (code, out, err) = mull(
        dir.path(),
        &[
            "diff",
            &format!("{url}@sess_1"),
            &format!("{url}@sess_fork"),
        ],
    );
    assert_eq!(code, 1, "the fork diverges at turn 2:\n{out}\n{err}");
    assert!(out.contains("turn 2"), "{out}");

    // A fork point that does not exist is named, and nothing is written.
    let (code, _, err) = mull(
        dir.path(),
        &[
            "fork",
            &url,
            "--session",
            "sess_1",
            "--turn",
            "40",
            "--into",
            "sess_none",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("40"), "{err}");
    assert_eq!(
        runtime
            .block_on(reads.last_seq("sess_none"))
            .expect("reads"),
        0
    );
}

#[test]
fn the_dashboard_follows_a_postgres_log_live() {
    if !support::tmux::available() {
        eprintln!("SKIPPED: tmux is not installed; the live dashboard test needs it");
        return;
    }
    let Some(pg) = TestPg::start("the_dashboard_follows_a_postgres_log_live") else {
        return;
    };
    let url = pg.database();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = fixture("demo.jsonl");
    ok(dir.path(), &["import", demo.to_str().expect("utf-8"), &url]);

    let tmux = support::tmux::Tmux::start_mull("pg", &format!("dash --follow {url}"));
    let screen = tmux.wait_for("travel-desk", Duration::from_secs(20));
    assert!(
        screen.contains("/mull_test_"),
        "names the database: {screen}"
    );

    // A node writes a new session; the dashboard shows it without being restarted.
    let runtime = support::nodes::runtime();
    runtime.block_on(async {
        let log = PgLog::connect(&url, PgOptions::new("writer"))
            .await
            .expect("connects");
        log.open_session("sess_live").await.expect("opens");
        let events = [
            (
                None,
                Event::SessionOpened {
                    agent: "live-agent".into(),
                    metadata: json!({}),
                },
            ),
            (
                None,
                Event::UserMessagesSaved {
                    request_id: Some("req_1".into()),
                    messages: vec![UIMessage::user("u1", "Asked on another node")],
                },
            ),
            (
                Some("turn_1"),
                Event::TurnStarted {
                    request_id: "req_1".into(),
                    message_id: "m1".into(),
                    entry: EntryPath::SaveMessages,
                    continuation: false,
                    attempt: 0,
                    body: json!({}),
                },
            ),
        ];
        for (turn, event) in events {
            log.append_event("sess_live", turn, Utc::now(), event)
                .expect("appends");
        }
        EventLog::flush(&log, "sess_live").await.expect("commits");
        log.release_session("sess_live").await.expect("releases");
    });
    let screen = tmux.wait_for("live-agent", Duration::from_secs(10));
    let screen = if screen.contains("Asked on another node") {
        screen
    } else {
        tmux.wait_for("Asked on another node", Duration::from_secs(5))
    };
    assert!(screen.contains("[FOLLOW]"), "{screen}");
    tmux.run(&["send-keys", "-t", "dash", "q"]);
}

#[test]
fn the_demo_writes_a_postgres_log_as_it_writes_a_sqlite_file() {
    let Some(pg) = TestPg::start("the_demo_writes_a_postgres_log") else {
        return;
    };
    let url = pg.database();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("demo.db");
    let file = file.to_str().expect("utf-8 path");
    let on_postgres = ok(
        dir.path(),
        &["demo", "--headless", "--deterministic", "--db", &url],
    );
    assert!(
        on_postgres.starts_with("demo session demo · "),
        "{on_postgres}"
    );
    assert!(
        on_postgres.contains(&url),
        "names the database: {on_postgres}"
    );
    ok(
        dir.path(),
        &["demo", "--headless", "--deterministic", "--db", file],
    );
    // The same clock and ids: the same sessions, turns, events and costs either way.
    assert_eq!(
        ok(dir.path(), &["stats", &url]),
        ok(dir.path(), &["stats", file])
    );
}
