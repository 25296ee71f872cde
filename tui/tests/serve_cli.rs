//! `mull serve` through the real binary: one chat turn over HTTP, answered with the UI message
//! stream and written to the log; a non-loopback address without a token, or a blank token, is
//! refused.

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
