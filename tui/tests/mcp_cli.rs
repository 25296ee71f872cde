//! MCP servers from the command line: `mull chat --mcp-config FILE` and `--mcp NAME=URL` give
//! the model a real MCP server's tools (the official Python SDK's server of mull-mcp's tests,
//! over stdio and over streamable HTTP), the call reaches the server, and its result goes back
//! to the model; `mull demo --mcp` lists the server's tools in every turn.

#[path = "../../crates/mull-providers/tests/common/mod.rs"]
mod common;
#[path = "../../tests/support/python_env.rs"]
mod python_env;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{serve, Reply};
use mull_core::Event;
use mull_store::LogReader;
use serde_json::{json, Value};

fn support() -> PathBuf {
    python_env::workspace().join("crates/mull-mcp/tests/support")
}

/// The Python with the MCP SDK installed (the MCP tests' environment); `None` where the tests
/// skip (no python3 outside CI).
fn python() -> Option<PathBuf> {
    python_env::python_env(
        "mcp-python",
        &support().join("requirements.txt"),
        "the MCP test server",
    )
}

/// A Chat Completions stream of `deltas`, then usage and `[DONE]`.
fn answer(deltas: &[Value]) -> Reply {
    let mut body = String::new();
    for delta in deltas {
        let data = json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
                          "model": "local-model", "choices": [delta]});
        body.push_str(&format!("data: {data}\n\n"));
    }
    let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
                       "model": "local-model", "choices": [],
                       "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}});
    body.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    Reply::Sse {
        pieces: common::pieces(&body, 64),
        cut: false,
    }
}

/// The model calls `tool` with `arguments`, then answers with the text it is given.
fn calls_then_answers(tool: &str, arguments: &str, text: &str) -> Reply {
    Reply::Sequence(vec![
        answer(&[
            json!({"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0,
                "id": "call_mcp", "type": "function",
                "function": {"name": tool, "arguments": arguments}}]}, "finish_reason": null}),
            json!({"index": 0, "delta": {}, "finish_reason": "tool_calls"}),
        ]),
        answer(&[
            json!({"index": 0, "delta": {"content": text}, "finish_reason": null}),
            json!({"index": 0, "delta": {}, "finish_reason": "stop"}),
        ]),
    ])
}

/// `mull chat ARGS --db DB` with `input` piped in.
fn chat(db: &Path, base_url: &str, args: &[&str], env: &[(&str, &Path)], input: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mull"));
    command
        .arg("chat")
        .args(args)
        .arg("--db")
        .arg(db)
        .args([
            "--model",
            &format!("openai-compatible:{base_url}#local-model"),
        ])
        .env_remove("MULL_MODEL")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("runs mull chat");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("writes input");
    child.wait_with_output().expect("waits")
}

/// The tool calls the server noted.
fn server_calls(call_log: &Path) -> Vec<Value> {
    std::fs::read_to_string(call_log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a call line is JSON"))
        .collect()
}

/// Every event of the log's only session.
fn events(db: &Path) -> Vec<Event> {
    let reader = LogReader::open(db).expect("opens the log");
    let sessions = reader.sessions().expect("sessions");
    assert_eq!(sessions.len(), 1);
    reader
        .session_events(&sessions[0].session_id, 0)
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_calls_a_stdio_server_from_a_config_file() {
    let Some(python) = python() else { return };
    let model = serve(calls_then_answers(
        "tool_test_add",
        r#"{"a": 2, "b": 3}"#,
        "2 + 3 = 5.",
    ))
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let call_log = dir.path().join("calls.jsonl");
    let config = dir.path().join("mcp.json");
    let server = json!({"mcpServers": {"test": {
        "command": python,
        "args": [support().join("mcp_server.py"), "stdio"],
        "env": {"MCP_CALL_LOG": "${MULL_TEST_CALL_LOG}"},
    }}});
    std::fs::write(&config, server.to_string()).expect("writes the config");
    let config = config.to_string_lossy().into_owned();

    let output = chat(
        &db,
        &model.base_url,
        &["--mcp-config", &config],
        &[("MULL_TEST_CALL_LOG", &call_log)],
        "What is 2 + 3?\n",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "2 + 3 = 5.", "{stderr}");

    // The server ran the call, with the model's arguments.
    assert_eq!(
        server_calls(&call_log),
        [json!({"tool": "add", "arguments": {"a": 2, "b": 3}})]
    );
    // The model was offered the server's tools, and got the result back.
    let received = model.received();
    assert_eq!(received.len(), 2);
    let offered: Vec<&str> = received[0].body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(offered.contains(&"tool_test_add"), "{offered:?}");
    let result = received[1].body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .expect("the tool result goes back to the model");
    assert!(result["content"].to_string().contains('5'), "{result}");
    // And the log has the call like any other.
    assert!(events(&db).iter().any(|e| matches!(
        e,
        Event::ToolCallFinished { tool, success: true, .. } if tool == "tool_test_add"
    )));
}

/// The test server over streamable HTTP on a free loopback port, killed when dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start(python: &Path, call_log: &Path) -> HttpServer {
        let mut child = Command::new(python)
            .arg(support().join("mcp_server.py"))
            .arg("http")
            .env("MCP_CALL_LOG", call_log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starts the HTTP test server");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
        let Some(url) = line.trim().strip_prefix("listening on ").map(str::to_owned) else {
            let _ = child.kill();
            panic!("the HTTP test server did not say where it listens: {line:?}");
        };
        HttpServer { child, url }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_and_demo_reach_a_streamable_http_server_from_the_flag() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let call_log = dir.path().join("calls.jsonl");
    let server = HttpServer::start(&python, &call_log);
    let flag = format!("web={}", server.url);

    let model = serve(calls_then_answers(
        "tool_web_echo",
        r#"{"text": "over HTTP"}"#,
        "It said: over HTTP.",
    ))
    .await;
    let db = dir.path().join("chat.db");
    let output = chat(&db, &model.base_url, &["--mcp", &flag], &[], "Echo it.\n");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        server_calls(&call_log),
        [json!({"tool": "echo", "arguments": {"text": "over HTTP"}})]
    );
    assert!(events(&db).iter().any(|e| matches!(
        e,
        Event::ToolCallFinished { tool, success: true, output: Some(out), .. }
            if tool == "tool_web_echo" && out.to_string().contains("over HTTP")
    )));

    // The demo's turns list the server's tools beside the travel desk's own.
    let demo_db = dir.path().join("demo.db");
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["demo", "--headless", "--fast", "--mcp", &flag, "--db"])
        .arg(&demo_db)
        .output()
        .expect("runs mull demo");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reader = LogReader::open(&demo_db).expect("opens the demo's log");
    let session = &reader.sessions().expect("sessions")[0].session_id;
    let configured: Vec<Vec<String>> = reader
        .session_events(session, 0)
        .expect("events")
        .into_iter()
        .filter_map(|e| match e.event {
            Event::TurnConfigured { config } => Some(config.tool_names.clone()),
            _ => None,
        })
        .collect();
    assert!(!configured.is_empty());
    for tools in &configured {
        assert!(tools.iter().any(|t| t == "tool_web_echo"), "{tools:?}");
        assert!(tools.iter().any(|t| t == "weather"), "{tools:?}");
    }
}

#[test]
fn a_bad_mcp_flag_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let output = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args([
            "chat",
            "--model",
            "scripted-demo",
            "--mcp",
            "no-equals-sign",
            "--db",
        ])
        .arg(&db)
        .stdin(Stdio::null())
        .output()
        .expect("runs mull chat");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("NAME=COMMAND"), "{stderr}");
    assert!(!db.exists(), "no log is created for a bad flag");
}
