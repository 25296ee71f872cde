//! The subcommands, run as the real binary: export → import → export round-trips, `replay`
//! prints the conversation and turn table, `stats` counts.

mod support;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use mull_core::{
    DecisionAction, EntryPath, Event, FinishReason, Role, StepReport, StreamPart, TurnStatus,
    UIMessage, Usage,
};
use mull_store::Log;
use serde_json::json;

fn mull(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(args)
        .output()
        .expect("run mull");
    assert!(
        output.status.success(),
        "mull {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The demo's report ("demo session S · N turns · …") names as many turns as the log holds
/// for S.
fn check_demo_report(out: &str, db: &str) {
    let line = out
        .lines()
        .find(|l| l.starts_with("demo session "))
        .unwrap_or_else(|| panic!("no report line: {out}"));
    let mut words = line.split(' ');
    let session = words.nth(2).expect("session id");
    let turns: usize = line
        .split(" · ")
        .nth(1)
        .and_then(|t| t.strip_suffix(" turns"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no turn count: {line}"));
    let logged = mull_store::LogReader::open(db)
        .expect("reader")
        .turns(session)
        .expect("turns")
        .len();
    assert_eq!(turns, logged, "{out}");
}

fn write_sample(db: &Path) {
    let log = Log::open(db).expect("open");
    let t0 = Utc
        .with_ymd_and_hms(2025, 1, 1, 0, 0, 0)
        .single()
        .expect("time");
    let at = |ms: i64| t0 + chrono::Duration::milliseconds(ms);
    let s = "sess_cli";
    let t = Some("turn_1");
    let usage = Usage {
        input_tokens: Some(100),
        output_tokens: Some(7),
        cached_input_tokens: Some(40),
        ..Usage::default()
    };
    let events = vec![
        (
            None,
            Event::SessionOpened {
                agent: "cli".into(),
                metadata: json!({}),
            },
        ),
        (
            None,
            Event::UserMessagesSaved {
                request_id: Some("req_1".into()),
                messages: vec![UIMessage::user("msg_u1", "Ping?")],
            },
        ),
        (
            t,
            Event::TurnStarted {
                request_id: "req_1".into(),
                message_id: "msg_a1".into(),
                entry: EntryPath::SaveMessages,
                continuation: false,
                attempt: 0,
                body: json!({}),
            },
        ),
        (t, Event::StepStarted { step: 0 }),
        (
            t,
            Event::ToolDecided {
                step: 0,
                call_id: "call_1".into(),
                tool: "ping".into(),
                action: DecisionAction::Allow,
                model_input: json!({}),
                effective_input: json!({}),
                reason: None,
                output: None,
            },
        ),
        (
            t,
            Event::ToolCallFinished {
                step: 0,
                call_id: "call_1".into(),
                tool: "ping".into(),
                success: true,
                output: Some(json!("pong")),
                error: None,
                duration_ms: 12,
            },
        ),
        (
            t,
            Event::Chunk {
                step: 0,
                part: StreamPart::TextStart { id: "a".into() },
                original: None,
            },
        ),
        (
            t,
            Event::Chunk {
                step: 0,
                part: StreamPart::TextDelta {
                    id: "a".into(),
                    text: "Pong!".into(),
                },
                original: None,
            },
        ),
        (
            t,
            Event::StepFinished {
                record: Box::new(StepReport {
                    step: 0,
                    model_id: "gpt-4o-mini".into(),
                    finish_reason: FinishReason::Stop,
                    usage: usage.clone(),
                    ..StepReport::default()
                }),
            },
        ),
        (
            t,
            Event::AssistantMessageSaved {
                request_id: "req_1".into(),
                message: UIMessage::text("msg_a1", Role::Assistant, "Pong!"),
            },
        ),
        (
            t,
            Event::TurnFinished {
                request_id: "req_1".into(),
                status: TurnStatus::Completed,
                error: None,
                steps: 1,
                usage,
                response_owed: false,
            },
        ),
    ];
    for (i, (turn, event)) in events.into_iter().enumerate() {
        log.append(s, turn, at(i as i64 * 10), event)
            .expect("append");
    }
    log.close().expect("commit");
}

#[test]
fn export_import_export_is_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("a.db");
    write_sample(&db);
    let exported = mull(&["export", db.to_str().expect("utf-8 path")]);
    let first = exported.stdout;
    assert_eq!(String::from_utf8_lossy(&first).lines().count(), 11);
    // Progress is drawn only on a terminal: through a pipe, standard error stays clean.
    assert_eq!(String::from_utf8_lossy(&exported.stderr), "");
    let jsonl = dir.path().join("a.jsonl");
    std::fs::write(&jsonl, &first).expect("write jsonl");
    let copy = dir.path().join("b.db");
    let imported = mull(&[
        "import",
        jsonl.to_str().expect("utf-8 path"),
        copy.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&imported.stderr),
        format!(
            "imported 11 events from {} into {}\n",
            jsonl.display(),
            copy.display()
        )
    );
    let second = mull(&["export", copy.to_str().expect("utf-8 path")]).stdout;
    assert_eq!(first, second);
    let unknown = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args([
            "export",
            db.to_str().expect("utf-8 path"),
            "--session",
            "nobody",
        ])
        .output()
        .expect("run mull");
    assert!(!unknown.status.success(), "an unknown session is an error");
    assert!(
        unknown.stdout.is_empty(),
        "an unknown session exports nothing"
    );
}

/// At a terminal a long export draws its progress on standard error, while the JSONL goes
/// whole to standard output; the bar is gone when the export ends.
#[test]
fn at_a_terminal_export_shows_progress_and_clears_it() {
    if !support::tmux::available() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("big.db");
    let db = db.to_str().expect("utf-8 path");
    let made = mull(&["gen-bench-log", db, "--events", "3000"]);
    let written: usize = String::from_utf8_lossy(&made.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("gen-bench-log says how many events it wrote");
    // Standard output is a pipe this test reads only once it has seen the bar: the export,
    // far larger than a pipe holds, waits with its progress on the screen.
    let fifo = dir.path().join("out.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn({
        let fifo = fifo.clone();
        move || {
            let mut file = std::fs::File::open(&fifo).expect("open the fifo");
            let _ = wait.recv();
            let mut text = String::new();
            file.read_to_string(&mut text).expect("read the export");
            text
        }
    });
    let tmux = support::tmux::Tmux::start_mull(
        "export",
        &format!(
            "export '{db}' > '{}'; echo \"export exited $?\"; read keep",
            fifo.display()
        ),
    );
    let screen = tmux.wait_for("events", Duration::from_secs(30));
    assert!(screen.contains(&format!("exporting {db}")), "{screen}");
    // indicatif writes counts with thousands separators.
    let total = format!("{},{:03}", written / 1000, written % 1000);
    assert!(screen.contains(&format!("/{total} events")), "{screen}");
    go.send(()).expect("the reader waits");
    let exported = reader.join().expect("the reader");
    assert_eq!(exported.lines().count(), written);
    let screen = tmux.wait_for("export exited 0", Duration::from_secs(30));
    assert!(
        !screen.contains("exporting"),
        "the bar is cleared: {screen}"
    );
}

#[test]
fn replay_prints_the_conversation_and_a_turn_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("a.db");
    write_sample(&db);
    let jsonl = dir.path().join("a.jsonl");
    std::fs::write(
        &jsonl,
        mull(&["export", db.to_str().expect("utf-8 path")]).stdout,
    )
    .expect("write jsonl");
    let out = String::from_utf8(mull(&["replay", jsonl.to_str().expect("utf-8 path")]).stdout)
        .expect("utf-8");
    assert!(out.contains("session sess_cli"), "{out}");
    assert!(
        out.contains("  user:\n    Ping?\n  assistant:\n    Pong!\n"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("turn_1"))
        .expect("a row for turn_1");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        vec!["turn_1", "completed", "1", "100", "7", "40", "1", "0"],
        "{out}"
    );
    // The whole report: the columns under their headings, numbers right-aligned.
    insta::assert_snapshot!("replay_sample", out);
}

#[test]
fn replay_names_a_failed_turn_s_error_after_the_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("failed.db");
    let log = Log::open(&db).expect("open");
    let at = Utc
        .with_ymd_and_hms(2025, 1, 1, 0, 0, 0)
        .single()
        .expect("time");
    let (s, t) = ("sess_failed", Some("turn_failed"));
    let events = vec![
        (
            None,
            Event::SessionOpened {
                agent: "cli".into(),
                metadata: json!({}),
            },
        ),
        (
            t,
            Event::TurnStarted {
                request_id: "req_f".into(),
                message_id: "msg_f".into(),
                entry: EntryPath::SaveMessages,
                continuation: false,
                attempt: 0,
                body: json!({}),
            },
        ),
        (
            t,
            Event::TurnFinished {
                request_id: "req_f".into(),
                status: TurnStatus::Error,
                error: Some("the model server answered 503".into()),
                steps: 0,
                usage: Usage::default(),
                response_owed: false,
            },
        ),
    ];
    for (turn, event) in events {
        log.append(s, turn, at, event).expect("append");
    }
    log.close().expect("commit");
    let jsonl = dir.path().join("failed.jsonl");
    std::fs::write(
        &jsonl,
        mull(&["export", db.to_str().expect("utf-8 path")]).stdout,
    )
    .expect("write jsonl");
    let out = String::from_utf8(mull(&["replay", jsonl.to_str().expect("utf-8 path")]).stdout)
        .expect("utf-8");
    // The row counts the error; the line after the table says what it was, naming the turn.
    insta::assert_snapshot!("replay_failed_turn", out);
}

#[test]
fn stats_counts_sessions_turns_kinds_and_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("a.db");
    write_sample(&db);
    let out = String::from_utf8(mull(&["stats", db.to_str().expect("utf-8 path")]).stdout)
        .expect("utf-8");
    assert!(out.contains("sessions  1\n"), "{out}");
    assert!(out.contains("turns     1 (1 completed)\n"), "{out}");
    assert!(out.contains("events    11\n"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["chunk", "2"]),
        "{out}"
    );
    assert!(
        out.contains("tokens    in 100 · out 7 · cached 40"),
        "{out}"
    );
    // gpt-4o-mini at list price: 60 uncached in × 0.15 + 40 cached × 0.075 + 7 out × 0.60.
    assert!(out.contains("cost      $0.000016\n"), "{out}");
    assert!(
        out.contains("  cache        read 40 tokens $0.000003 · write 0 tokens $0.000000\n"),
        "{out}"
    );
    // The whole report: the kinds in a column, their counts right-aligned in another.
    insta::assert_snapshot!("stats_sample", out);
}

#[test]
fn stats_prices_from_a_file_over_the_defaults_and_names_a_bad_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("a.db");
    write_sample(&db);
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"models": {"gpt-4o-mini": {"input": 1, "output": 2, "cache_read": 0.5}}}"#,
    )
    .expect("write prices");
    let db = db.to_str().expect("utf-8 path");
    let prices_arg = prices.to_str().expect("utf-8 path");
    let out =
        String::from_utf8(mull(&["stats", db, "--prices", prices_arg]).stdout).expect("utf-8");
    // 60 × 1 + 40 × 0.5 + 7 × 2 = 94 millionths.
    assert!(out.contains("cost      $0.000094\n"), "{out}");

    std::fs::write(
        &prices,
        r#"{"models": {"gpt-4o-mini": {"input": "cheap"}}}"#,
    )
    .expect("write prices");
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["stats", db, "--prices", prices_arg])
        .output()
        .expect("run mull");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("reading the price file"), "{stderr}");
    assert!(stderr.contains("price file is not valid"), "{stderr}");
    // The dashboard reads the same file the same way, before it takes the terminal.
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["dash", db, "--prices", prices_arg])
        .output()
        .expect("run mull");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("price file is not valid"), "{stderr}");
}

#[test]
fn stats_shows_usage_no_provider_reported_as_unknown_not_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("aborted.db");
    let db = db.to_str().expect("utf-8 path");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/aborted.jsonl");
    mull(&["import", fixture, db]);
    let out = String::from_utf8(mull(&["stats", db]).stdout).expect("utf-8");
    assert!(
        out.contains(
            "tokens    in unknown · out unknown · cached unknown · reasoning unknown · total unknown\n"
        ),
        "{out}"
    );
    assert!(out.contains("1 of 1 turns reported no usage"), "{out}");
    // The cancelled call streamed tokens nobody reported: its cost is unknown, not zero.
    assert!(out.contains("cost      unknown (1 call)\n"), "{out}");
    assert!(out.contains("aborted unknown (1 call)"), "{out}");
    assert!(out.contains("1 unfinished"), "{out}");
}

#[test]
fn the_deterministic_headless_demo_writes_the_same_log_every_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut exports = Vec::new();
    for name in ["one.db", "two.db"] {
        let db = dir.path().join(name);
        let db = db.to_str().expect("utf-8 path");
        let out =
            String::from_utf8(mull(&["demo", "--headless", "--deterministic", "--db", db]).stdout)
                .expect("utf-8");
        check_demo_report(&out, db);
        exports.push(mull(&["export", db]).stdout);
    }
    assert!(!exports[0].is_empty());
    assert_eq!(exports[0], exports[1]);
    // Unpaced with the real clock: the same turns, under fresh ids.
    let db = dir.path().join("fast.db");
    let db = db.to_str().expect("utf-8 path");
    let out = String::from_utf8(mull(&["demo", "--headless", "--fast", "--db", db]).stdout)
        .expect("utf-8");
    check_demo_report(&out, db);
    assert!(
        !out.contains("demo session demo "),
        "a fresh session id: {out}"
    );
}
