//! `mull serve` through the real binary: one chat turn over HTTP, answered with the UI message
//! stream and written to the log; a non-loopback address without a token, or a blank token, is
//! refused. An approval's answer posted to the log's inbox (as the dashboard posts it) is taken
//! by the server, the one writer of the log, and recorded as the session's input event.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use mull_store::LogReader;

#[test]
fn a_chat_turn_streams_back_and_lands_in_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("serve.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--model",
            "scripted-demo",
            "--db",
        ])
        .arg(&db)
        .env_remove("MULL_TOKEN")
        .stdout(Stdio::piped())
        .spawn()
        .expect("starts mull serve");
    let mut first_line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first_line)
        .expect("reads the address line");
    let addr = first_line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first_line:?}"))
        .to_owned();

    let body = r#"{"id":"chat-1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"Hi"}]}],"trigger":"submit-message"}"#;
    let mut stream = TcpStream::connect(&addr).expect("connects");
    write!(
        stream,
        "POST /api/chat HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("sends the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("reads the stream");

    // Stop the server the way a user does (Ctrl-C), so it commits and closes the log.
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let status = child.wait().expect("server exits");

    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains("x-vercel-ai-ui-message-stream: v1"),
        "{response}"
    );
    for part in [
        r#""type":"start""#,
        r#""type":"text-delta""#,
        r#""type":"finish""#,
    ] {
        assert!(response.contains(part), "missing {part} in {response}");
    }
    assert!(response.contains("data: [DONE]"), "{response}");
    assert!(status.success(), "mull serve exited with {status}");

    let reader = LogReader::open(&db).expect("opens the log");
    let turns = reader.turns("chat-1").expect("reads turns");
    assert_eq!(turns.len(), 1, "{turns:?}");
    let state = reader.load_session("chat-1").expect("loads");
    assert_eq!(state.messages.len(), 2, "user and assistant messages");
    assert!(state.messages[1]
        .plain_text()
        .contains("Lisbon is a hilly, sunny city"));
}

#[test]
fn a_network_address_without_a_token_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args([
            "serve",
            "--addr",
            "0.0.0.0:0",
            "--model",
            "scripted-demo",
            "--db",
        ])
        .arg(dir.path().join("serve.db"))
        .env_remove("MULL_TOKEN")
        .output()
        .expect("runs mull serve");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("MULL_TOKEN"), "{stderr}");
}

#[test]
fn a_blank_token_is_refused_before_the_log_is_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("serve.db");
    for blank in ["", "   "] {
        let output = Command::new(env!("CARGO_BIN_EXE_mull"))
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--model",
                "scripted-demo",
                "--db",
            ])
            .arg(&db)
            .env("MULL_TOKEN", blank)
            .output()
            .expect("runs mull serve");
        assert!(!output.status.success(), "{blank:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("MULL_TOKEN is empty"), "{stderr}");
        assert!(!db.exists(), "nothing is left behind");
    }
}

#[test]
fn an_answer_in_the_inbox_is_taken_by_the_server_and_the_tool_runs_once() {
    use std::time::{Duration, Instant};

    use mull_store::{Inbox, InboxMessage};

    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("inbox.db");
    support::parked::parked(&db);
    let path = db.to_str().expect("utf-8 path");
    let mut node =
        support::nodes::Node::start(path, "inbox", dir.path(), &["--model", "scripted-demo"]);
    // The dashboard's part: a row in the inbox, posted while the server holds the log.
    let inbox = Inbox::open(&db).expect("inbox");
    let answer = InboxMessage::ApprovalAnswer {
        approval_id: "approval_1".into(),
        approved: true,
        reason: None,
        by: Some("mull dash".into()),
    };
    let id = inbox.post("s", &answer, chrono::Utc::now()).expect("posts");
    // The server looks every half second; a loaded machine gets a generous bound.
    let deadline = Instant::now() + Duration::from_secs(30);
    let ran = |events: &[mull_core::Envelope]| {
        events
            .iter()
            .filter(|e| {
                matches!(&e.event, mull_core::Event::ToolCallFinished { call_id, .. } if call_id == "call_1")
            })
            .count()
    };
    let events = loop {
        let events = LogReader::open(&db)
            .expect("reader")
            .session_events("s", 0)
            .expect("events");
        let row = inbox.get(id).expect("reads").expect("row");
        if row.outcome.is_some() && ran(&events) > 0 {
            assert_eq!(row.outcome.as_deref(), Some("answered"));
            break events;
        }
        assert!(
            Instant::now() < deadline,
            "the server never acted on the answer\n{}",
            node.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let status = node.interrupt_or_exit(Duration::ZERO);
    assert!(status.success(), "{}", node.stderr_text());
    let answered = events
        .iter()
        .filter(|e| e.kind() == "tool_approval_answered")
        .count();
    let ran = ran(&events);
    assert_eq!(
        (answered, ran),
        (1, 1),
        "{:?}",
        events.iter().map(|e| e.kind()).collect::<Vec<_>>()
    );
}

/// Starts `mull serve` with `args` and `env`, its standard error in a file (not a terminal);
/// stops it with SIGTERM once it listens and returns what it wrote there.
fn serve_stderr(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let err_path = dir.path().join("stderr");
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_mull"));
    command
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--model",
            "scripted-demo",
            "--db",
        ])
        .arg(dir.path().join("serve.db"))
        .args(args)
        .env_remove("MULL_TOKEN")
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(err);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("starts mull serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("reads the address line");
    assert!(line.starts_with("listening on http://"), "{line:?}");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().expect("exits");
    assert!(status.success(), "{status}");
    std::fs::read_to_string(&err_path).expect("reads stderr")
}

#[test]
fn the_stream_flag_reaches_the_model_spec() {
    // Anthropic's Messages API always streams: `--stream off` for it is refused by the
    // provider's spec, before anything binds, which only happens when the flag reaches it.
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["serve", "--addr", "127.0.0.1:0", "--stream", "off"])
        .args(["--model", "anthropic:claude-sonnet-4-5", "--db"])
        .arg(dir.path().join("serve.db"))
        .env("ANTHROPIC_API_KEY", "not-used")
        .env_remove("MULL_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("runs mull serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("streaming `off` is not available for anthropic"),
        "{stderr}"
    );
}

#[test]
fn the_startup_line_says_what_the_server_is() {
    let stderr = serve_stderr(&[], &[]);
    let first = stderr.lines().next().unwrap_or("");
    for part in [
        "listening on http://127.0.0.1:",
        "serve.db (SQLite)",
        "model scripted-demo",
        "OTLP export off",
        "token not required",
    ] {
        assert!(first.contains(part), "missing {part:?} in {first:?}");
    }
    let with_token = serve_stderr(&[], &[("MULL_TOKEN", "s3cret")]);
    assert!(with_token.contains("token required"), "{with_token}");
}

#[test]
fn logs_have_no_colour_off_a_terminal_and_a_json_switch() {
    let text = serve_stderr(&[], &[("RUST_LOG", "info")]);
    assert!(text.contains("mull serve started"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "no escape codes in a file: {text:?}"
    );

    let json = serve_stderr(&["--log-format", "json"], &[("RUST_LOG", "info")]);
    let events: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let started = events
        .iter()
        .find(|e| e["fields"]["message"] == "mull serve started")
        .unwrap_or_else(|| panic!("no startup event in {json}"));
    assert_eq!(started["fields"]["model"], "scripted-demo", "{started}");
    assert_eq!(started["fields"]["otlp"], "off", "{started}");
    assert_eq!(started["fields"]["token"], "not required", "{started}");
    assert!(
        events.iter().any(|e| e["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("SIGTERM"))),
        "the stop is logged: {json}"
    );
}
