//! End to end: the real `mull dash` runs in a tmux pane while this test process appends events
//! to the same database; the new tool call must show on screen.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use mull_core::{DecisionAction, EntryPath, Event, StreamPart, UIMessage};
use mull_store::Log;
use serde_json::json;
use support::tmux::Tmux;

fn append(log: &Log, turn: Option<&str>, ms: i64, event: Event) {
    append_to(log, "sess_e2e", turn, ms, event);
}

fn append_to(log: &Log, session: &str, turn: Option<&str>, ms: i64, event: Event) {
    let at = Utc
        .with_ymd_and_hms(2025, 1, 1, 12, 0, 0)
        .single()
        .expect("valid time")
        + chrono::Duration::milliseconds(ms);
    log.append(session, turn, at, event).expect("append");
}

/// The process writing the log: it has begun a turn and goes on writing it (a writer that
/// closed would leave the turn interrupted, for the next writer to resolve).
fn start_turn(db: &Path) -> Log {
    let log = Log::open(db).expect("open log");
    open_session(&log, "sess_e2e", "e2e", "What is the weather?");
    log.flush_blocking().expect("commit");
    log
}

/// A session of `agent` whose first turn has begun its first step.
fn open_session(log: &Log, session: &str, agent: &str, question: &str) {
    let append = |turn: Option<&str>, ms: i64, event: Event| {
        append_to(log, session, turn, ms, event);
    };
    append(
        None,
        0,
        Event::SessionOpened {
            agent: agent.into(),
            metadata: json!({}),
        },
    );
    append(
        None,
        1,
        Event::UserMessagesSaved {
            request_id: Some("req_1".into()),
            messages: vec![UIMessage::user("msg_u1", question)],
        },
    );
    append(
        Some("turn_1"),
        2,
        Event::TurnStarted {
            request_id: "req_1".into(),
            message_id: "msg_a1".into(),
            entry: EntryPath::SaveMessages,
            continuation: false,
            attempt: 0,
            body: json!({}),
        },
    );
    append(Some("turn_1"), 3, Event::StepStarted { step: 0 });
}

/// Starts `mull dash ARGS` in a detached 160×40 tmux pane of its own server.
fn start_dash(args: &str) -> Tmux {
    Tmux::start_mull(&args.len().to_string(), &format!("dash {args}"))
}

#[test]
fn follow_jumps_to_a_session_that_starts_after_the_dashboard_opened() {
    if !support::tmux::available() {
        eprintln!("SKIPPED: tmux is not installed; the live dashboard test needs it");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("follow.db");
    let log = start_turn(&db);
    let tmux = start_dash(&format!("--follow {}", db.display()));
    let screen = tmux.wait_for("[FOLLOW]", Duration::from_secs(20));
    tmux.wait_for("What is the weather?", Duration::from_secs(10));
    assert!(!screen.contains("late-agent"), "{screen}");

    // The writing process starts a new session while the dashboard follows the first.
    open_session(&log, "sess_late", "late-agent", "A question asked later");
    log.flush_blocking().expect("commit");
    let screen = tmux.wait_for("late-agent", Duration::from_secs(10));
    let screen = if screen.contains("A question asked later") {
        screen
    } else {
        tmux.wait_for("A question asked later", Duration::from_secs(5))
    };
    assert!(screen.contains("[FOLLOW]"), "{screen}");
    assert!(
        screen.contains("turn started"),
        "the new session's running turn is open: {screen}"
    );

    // Moving by hand pauses following: a third session does not pull the view away.
    tmux.run(&["send-keys", "-t", "dash", "Up"]);
    let start = Instant::now();
    while tmux.screen().contains("[FOLLOW]") {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "moving by hand did not pause following:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    open_session(&log, "sess_third", "third-agent", "Yet another question");
    log.flush_blocking().expect("commit");
    std::thread::sleep(Duration::from_millis(500));
    let screen = tmux.screen();
    assert!(!screen.contains("[FOLLOW]"), "{screen}");
    assert!(
        screen.contains("late-agent"),
        "still on the session it was on: {screen}"
    );
    tmux.run(&["send-keys", "-t", "dash", "q"]);
    log.close().expect("close");
}

#[test]
fn a_tool_call_committed_by_another_process_shows_up_live() {
    if !support::tmux::available() {
        eprintln!("SKIPPED: tmux is not installed; the live dashboard test needs it");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("live.db");
    let log = start_turn(&db);

    let tmux = start_dash(&db.display().to_string());
    tmux.wait_for("e2e", Duration::from_secs(20));
    tmux.run(&["send-keys", "-t", "dash", "Enter"]);
    tmux.wait_for("running", Duration::from_secs(10));
    tmux.run(&["send-keys", "-t", "dash", "Enter"]);
    let screen = tmux.wait_for("[FOLLOW]", Duration::from_secs(10));
    assert!(screen.contains("turn started"), "{screen}");
    assert!(
        !screen.contains("weather_lookup"),
        "nothing was called yet: {screen}"
    );

    // The writer: this process, appending to the database the dashboard has open read-only.
    let turn = Some("turn_1");
    let input = json!({"city": "Lisbon"});
    append(
        &log,
        turn,
        10,
        Event::Chunk {
            step: 0,
            part: StreamPart::ToolCall {
                call_id: "call_1".into(),
                tool_name: "weather_lookup".into(),
                input: input.to_string(),
            },
            original: None,
        },
    );
    append(
        &log,
        turn,
        11,
        Event::ToolCallStarted {
            step: 0,
            call_id: "call_1".into(),
            tool: "weather_lookup".into(),
            input: input.clone(),
            client: false,
            dynamic: false,
        },
    );
    append(
        &log,
        turn,
        12,
        Event::ToolDecided {
            step: 0,
            call_id: "call_1".into(),
            tool: "weather_lookup".into(),
            action: DecisionAction::Allow,
            model_input: input.clone(),
            effective_input: input,
            reason: None,
            output: None,
        },
    );
    append(
        &log,
        turn,
        320,
        Event::ToolCallFinished {
            step: 0,
            call_id: "call_1".into(),
            tool: "weather_lookup".into(),
            success: true,
            output: Some(json!({"sky": "clear"})),
            error: None,
            duration_ms: 308,
        },
    );
    log.flush_blocking().expect("commit");

    let screen = tmux.wait_for("weather_lookup", Duration::from_secs(10));
    let screen = if screen.contains("308ms") {
        screen
    } else {
        tmux.wait_for("308ms", Duration::from_secs(5))
    };
    assert!(screen.contains("[allow]"), "{screen}");

    tmux.run(&["send-keys", "-t", "dash", "q"]);
    log.close().expect("close");
}

#[test]
fn quitting_the_demo_stops_it_and_leaves_only_the_database() {
    if !support::tmux::available() {
        eprintln!("SKIPPED: tmux is not installed; the live dashboard test needs it");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    let done = dir.path().join("exited");
    let tmux = Tmux::start_mull(
        "demo-quit",
        &format!("demo --db {} ; touch {}", db.display(), done.display()),
    );
    // The paced demo is on its first turns (its seven take about 40 s, then a minute's wait
    // for the booking): quit now.
    tmux.wait_for("[FOLLOW]", Duration::from_secs(30));
    tmux.run(&["send-keys", "-t", "dash", "q"]);
    let start = Instant::now();
    while !done.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the demo did not stop after q:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("lists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("demo.db"))
        .collect();
    assert_eq!(
        left,
        vec!["demo.db".to_owned()],
        "a clean close leaves only the database"
    );
}
