//! `mull … --otlp URL` against a real OTLP/HTTP receiver: the demo's spans sent live as its
//! turns run, and the same log re-exported by `mull export --otlp` with the times in the log.

#[path = "../../crates/mull-otel/tests/support/receiver.rs"]
mod receiver;

use std::process::{Command, Output};

use receiver::{attr_str, nanos, Receiver};
use serde_json::Value;

fn mull(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .output()
        .expect("runs mull");
    assert!(
        output.status.success(),
        "mull {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn names(spans: &[Value], prefix: &str) -> usize {
    spans
        .iter()
        .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .count()
}

#[test]
fn the_demo_sends_its_spans_live_and_export_resends_them_from_the_log_with_its_times() {
    let Some(live) = Receiver::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    let db = db.to_str().expect("utf-8 path");
    mull(&[
        "demo",
        "--headless",
        "--fast",
        "--db",
        db,
        "--otlp",
        &live.url,
    ]);
    let sent_live = live.spans();
    // A span for every turn the log holds: the desk's and its research sub-agent's.
    let jsonl = String::from_utf8(mull(&["export", db]).stdout).expect("utf-8");
    let events: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSONL"))
        .collect();
    let logged_turns = events
        .iter()
        .filter(|e| e["event"]["type"] == "turn_started")
        .count();
    assert!(logged_turns > 1, "{logged_turns} turns");
    assert_eq!(
        names(&sent_live, "invoke_agent "),
        logged_turns,
        "{sent_live:#?}"
    );
    assert!(names(&sent_live, "chat ") >= 5);
    assert!(names(&sent_live, "execute_tool ") >= 1);

    let again = Receiver::start().expect("a second receiver");
    let out = mull(&["export", db, "--otlp", &again.url]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let exported = again.spans();
    assert!(
        stderr.contains(&format!(
            "sent {} spans of 2 sessions to {}/v1/traces",
            exported.len(),
            again.url
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no JSONL when sending spans");
    // The same spans as live, by name.
    let mut live_names: Vec<&str> = sent_live
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    let mut log_names: Vec<&str> = exported.iter().filter_map(|s| s["name"].as_str()).collect();
    live_names.sort();
    log_names.sort();
    assert_eq!(live_names, log_names);
    // The booking waited for approval: live and from the log alike, the span of the turn that
    // ran it says who answered, and the asking turn's span says it waited.
    for spans in [&sent_live, &exported] {
        let booking: Vec<&Value> = spans
            .iter()
            .filter(|s| s["name"] == "execute_tool book_hotel")
            .collect();
        assert!(
            booking
                .iter()
                .any(|s| attr_str(s, "mull.tool.decision") == Some("approval_requested")),
            "{booking:#?}"
        );
        assert!(
            booking.iter().any(
                |s| attr_str(s, "mull.approval.answered_by") == Some("person")
                    && attr_str(s, "mull.tool.decision") == Some("allow")
            ),
            "{booking:#?}"
        );
    }

    // Each turn's span starts and ends when the log says its turn did.
    let time = |turn: &str, kind: &str| {
        let at = events
            .iter()
            .find(|e| e["turn_id"] == turn && e["event"]["type"] == kind)
            .and_then(|e| e["at"].as_str())
            .unwrap_or_else(|| panic!("{kind} of {turn}"));
        chrono::DateTime::parse_from_rfc3339(at)
            .expect("RFC 3339")
            .timestamp_nanos_opt()
            .expect("in range")
    };
    let turns: Vec<&Value> = exported
        .iter()
        .filter(|s| attr_str(s, "gen_ai.operation.name") == Some("invoke_agent"))
        .collect();
    assert_eq!(turns.len(), logged_turns);
    for span in turns {
        let turn = attr_str(span, "mull.turn_id").expect("the turn id");
        assert_eq!(
            nanos(span, "start_time_unix_nano"),
            time(turn, "turn_started")
        );
        assert_eq!(
            nanos(span, "end_time_unix_nano"),
            time(turn, "turn_finished")
        );
    }
}

#[test]
fn export_to_a_collector_that_is_not_there_says_where_it_tried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    let db = db.to_str().expect("utf-8 path");
    mull(&["demo", "--headless", "--fast", "--db", db]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let out = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["export", db, "--otlp", &url])
        .output()
        .expect("runs mull");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("sending spans to {url}/v1/traces")),
        "{stderr}"
    );
}

#[test]
fn the_standard_variables_choose_the_endpoint_and_the_protocol() {
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    let db = db.to_str().expect("utf-8 path");
    // No --otlp: the endpoint variable turns live export on, the protocol variable picks JSON.
    let out = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["demo", "--headless", "--fast", "--db", db])
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .output()
        .expect("runs mull");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = receiver.spans();
    let logged_turns = String::from_utf8(mull(&["export", db]).stdout)
        .expect("utf-8")
        .lines()
        .filter(|l| l.contains(r#""type":"turn_started""#))
        .count();
    assert!(logged_turns > 1, "{logged_turns} turns");
    assert_eq!(names(&spans, "invoke_agent "), logged_turns, "{spans:#?}");
    assert!(spans.iter().all(|s| s["encoding"] == "json"));

    // A protocol mull does not speak is named before anything is sent.
    let out = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["export", db, "--otlp", &receiver.url])
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .expect("runs mull");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("OTLP protocol \"grpc\" is not supported"),
        "{stderr}"
    );
    assert_eq!(receiver.spans().len(), spans.len());
}

#[test]
fn a_deterministic_logs_spans_keep_its_2025_clock_and_export_says_so() {
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("fixed.db");
    let db = db.to_str().expect("utf-8 path");
    mull(&["demo", "--headless", "--deterministic", "--db", db]);
    let out = mull(&["export", db, "--otlp", &receiver.url]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "the spans keep the log's times: 2025-01-01 00:00:00 to 2025-01-01 00:00:00 UTC \
             (a --deterministic log"
        ),
        "{stderr}"
    );
    let epoch = chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .expect("RFC 3339")
        .timestamp_nanos_opt()
        .expect("in range");
    let spans = receiver.spans();
    assert!(!spans.is_empty());
    for span in &spans {
        assert!(nanos(span, "start_time_unix_nano") >= epoch, "{span:#}");
    }
}
