//! `mull chat` against a real streaming provider: a Chat Completions server on 127.0.0.1,
//! started by the test, sends the OpenAI wire format. Piped, each input line is a turn and the
//! answers go to standard output; in a real terminal (tmux), the first Ctrl-C cancels the running
//! turn — aborted in the log, its partial answer kept — and the next one exits.

#[path = "../../crates/mull-providers/tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{serve, Reply};
use mull_core::{Event, TurnStatus, UIPart};
use mull_store::LogReader;
use serde_json::{json, Value};

/// One Chat Completions stream chunk per delta, then usage and `[DONE]`.
fn sse_body(deltas: &[Value], done: bool) -> String {
    let mut out = String::new();
    for delta in deltas {
        let data = json!({
            "id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1,
            "model": "local-model", "choices": [delta]
        });
        out.push_str(&format!("data: {data}\n\n"));
    }
    if done {
        let usage = json!({
            "id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1,
            "model": "local-model", "choices": [],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
        });
        out.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    }
    out
}

fn text_delta(text: &str) -> Value {
    json!({"index": 0, "delta": {"content": text}, "finish_reason": null})
}

fn finish(reason: &str) -> Value {
    json!({"index": 0, "delta": {}, "finish_reason": reason})
}

/// A whole answer, split into pieces of a few bytes so the client sees many reads.
fn answer(deltas: &[Value]) -> Reply {
    Reply::Sse {
        pieces: common::pieces(&sse_body(deltas, true), 7),
        cut: false,
    }
}

fn model_spec(base_url: &str) -> String {
    format!("openai-compatible:{base_url}#local-model")
}

fn run_piped(db: &Path, base_url: &str, input: &str) -> Output {
    run_piped_with(db, base_url, input, &[])
}

fn run_piped_with(db: &Path, base_url: &str, input: &str, extra: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["chat", "--tools"])
        .args(extra)
        .arg("--db")
        .arg(db)
        .env("MULL_MODEL", model_spec(base_url))
        .env_remove("OPENAI_COMPATIBLE_API_KEY")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mull chat");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write input");
    child.wait_with_output().expect("wait")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_lines_are_turns_against_a_streaming_chat_completions_server() {
    let server = serve(Reply::Sequence(vec![
        answer(&[
            json!({"index": 0, "delta": {"role": "assistant", "content": "Hello "}, "finish_reason": null}),
            text_delta("there."),
            finish("stop"),
        ]),
        answer(&[
            json!({"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_calc", "type": "function", "function": {"name": "calculate", "arguments": "{\"expression\":"}}]}, "finish_reason": null}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " \"2 + 3\"}"}}]}, "finish_reason": null}),
            finish("tool_calls"),
        ]),
        answer(&[text_delta("2 + 3 "), text_delta("= 5."), finish("stop")]),
    ]))
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");

    // The binary blocks on its own; the server keeps answering on the runtime's workers.
    let output = run_piped(&db, &server.base_url, "Hi!\n\nWhat is 2 + 3?\n");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["Hello there.", "2 + 3 = 5."],
        "{stderr}"
    );
    assert!(stderr.contains("[tool calculate"), "{stderr}");

    // What went over the wire: three streamed calls; the history and the tool result travel.
    let received = server.received();
    assert_eq!(
        received.len(),
        3,
        "one call for turn 1, two steps for turn 2"
    );
    for request in &received {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(request.body["stream"], true);
        assert_eq!(request.body["model"], "local-model");
    }
    let second = received[1].body["messages"].to_string();
    assert!(second.contains("Hello there."), "{second}");
    let third = &received[2].body["messages"];
    let tool_message = third
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the tool result goes back to the model");
    assert_eq!(tool_message["tool_call_id"], "call_calc");
    assert!(
        tool_message["content"].to_string().contains("5"),
        "{tool_message}"
    );

    // And every event is in the log.
    let reader = LogReader::open(&db).expect("open log");
    let sessions = reader.sessions().expect("sessions");
    assert_eq!(sessions.len(), 1);
    let session_id = &sessions[0].session_id;
    let turns = reader.turns(session_id).expect("turns");
    assert_eq!(turns.len(), 2, "the blank line is not a turn");
    assert!(turns.iter().all(|t| t.status == TurnStatus::Completed));
    let events = reader.session_events(session_id, 0).expect("events");
    assert!(events.iter().any(|e| matches!(
        &e.event,
        Event::ToolCallFinished { tool, success: true, output: Some(output), .. }
            if tool == "calculate" && output["value"] == 5
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_answer_is_said_to_be_empty() {
    let server = serve(answer(&[finish("stop")])).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let output = run_piped(&dir.path().join("chat.db"), &server.base_url, "Hi!\n");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // Standard output keeps one line per turn; standard error says why it is blank.
    assert_eq!(stdout, "\n");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        ["[the model's answer was empty: it finished without any text]"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piped_chat_reads_plain_lines_and_keeps_no_prompt_history() {
    let server = serve(answer(&[text_delta("Hello."), finish("stop")])).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("chat-history.txt");
    let history_arg = history.to_str().expect("utf-8 path");
    let output = run_piped_with(
        &dir.path().join("chat.db"),
        &server.base_url,
        "Hi!\n",
        &["--history", history_arg],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // No line editor on a pipe: no prompt, no escape codes, only the answer.
    assert_eq!(stdout, "Hello.\n");
    assert_eq!(stderr, "");
    // The history is the person's at a terminal; a script's lines are not added to it.
    assert!(!history.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_off_asks_for_whole_answers() {
    let completion = json!({
        "id": "chatcmpl-w", "object": "chat.completion", "created": 1, "model": "local-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Whole answer."}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    });
    let server = serve(Reply::Status {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        body: completion.to_string(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let output = run_piped_with(&db, &server.base_url, "Hi!\n", &["--stream", "off"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout, "Whole answer.\n");
    let received = server.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].body["stream"], false,
        "the flag reached the request"
    );
    // The log says how the answer came, with the usage from the body.
    let reader = LogReader::open(&db).expect("open log");
    let session = reader.sessions().expect("sessions")[0].session_id.clone();
    let record = reader
        .session_events(&session, 0)
        .expect("events")
        .into_iter()
        .find_map(|e| match e.event {
            Event::StepFinished { record } => Some(record),
            _ => None,
        })
        .expect("a step");
    assert_eq!(record.response["streamed"], false, "{}", record.response);
    assert_eq!(record.usage.input_tokens, Some(9));

    let bad = run_piped_with(&db, &server.base_url, "Hi!\n", &["--stream", "sometimes"]);
    assert!(!bad.status.success());
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(said.contains("sometimes"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_flag_takes_a_spec_and_an_overflow_is_compacted_and_retried() {
    let overflow = r#"{"error":{"message":"This model's maximum context length is 4096 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
    let mut replies: Vec<Reply> = (1..=5)
        .map(|n| answer(&[text_delta(&format!("Answer {n}.")), finish("stop")]))
        .collect();
    replies.push(Reply::Status {
        status: 400,
        headers: Vec::new(),
        body: overflow.into(),
    });
    // The compaction's summary, written by the same model, then the retried turn.
    replies.push(answer(&[
        text_delta("They asked five questions."),
        finish("stop"),
    ]));
    replies.push(answer(&[text_delta("Answer 6."), finish("stop")]));
    let server = serve(Reply::Sequence(replies)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["chat", "--db"])
        .arg(&db)
        .args(["--model", &model_spec(&server.base_url)])
        .env_remove("MULL_MODEL")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mull chat");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"q1\nq2\nq3\nq4\nq5\nq6\n")
        .expect("write input");
    let output = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().last(),
        Some("Answer 6."),
        "{stdout}\n{stderr}"
    );
    let received = server.received();
    assert_eq!(received.len(), 8);
    // No tools unless asked for.
    assert!(received[0].body.get("tools").is_none());
    let summarizer = received[6].body["messages"].to_string();
    assert!(
        summarizer.contains("Summarize the conversation"),
        "{summarizer}"
    );
    let retried = received[7].body["messages"].to_string();
    assert!(retried.contains("They asked five questions."), "{retried}");

    let reader = LogReader::open(&db).expect("open log");
    let session_id = reader.sessions().expect("sessions")[0].session_id.clone();
    let events = reader.session_events(&session_id, 0).expect("events");
    // The overflow was classified (the default classifier), compacted, and the turn re-run.
    assert!(events.iter().any(|e| matches!(
        &e.event,
        Event::CompactionApplied {
            reason: mull_core::CompactionReason::Reactive,
            shortened: true,
            ..
        }
    )));
    assert!(events
        .iter()
        .any(|e| matches!(&e.event, Event::TurnStarted { attempt: 1, .. })));
    let turns = reader.turns(&session_id).expect("turns");
    assert_eq!(turns.last().map(|t| t.status), Some(TurnStatus::Completed));
}

/// A tmux server of our own (its own socket), killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("running tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "chat"]).stdout)
            .into_owned()
    }

    fn wait_until(&self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < timeout,
                "{what} did not happen within {timeout:?}; the screen was:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        self.wait_until(&format!("{needle:?} on screen"), timeout, |s| {
            s.contains(needle)
        })
    }

    fn pane_dead(&self) -> bool {
        let out = self.run(&["display-message", "-p", "-t", "chat", "#{pane_dead}"]);
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_terminal_the_first_ctrl_c_cancels_the_turn_and_the_second_exits() {
    if !tmux_available() {
        eprintln!("SKIPPED: tmux is not installed; the terminal Ctrl-C test needs it");
        return;
    }
    let partial = "Counting: one, two, ";
    let server = serve(Reply::Sequence(vec![
        // The model starts answering, then hangs: only Ctrl-C ends this turn.
        Reply::SseThenHang {
            pieces: vec![sse_body(
                &[json!({"index": 0, "delta": {"role": "assistant", "content": partial}, "finish_reason": null})],
                false,
            )
            .into_bytes()],
        },
        answer(&[text_delta("Done."), finish("stop")]),
    ]))
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let tmux = Tmux {
        socket: format!("mull-chat-e2e-{}", std::process::id()),
    };
    let history = dir.path().join("history").join("chat-history.txt");
    let command = format!(
        "env MULL_MODEL='{}' RUST_BACKTRACE=0 '{}' chat --db '{}' --history '{}'",
        model_spec(&server.base_url),
        env!("CARGO_BIN_EXE_mull"),
        db.display(),
        history.display()
    );
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "chat",
        "-x",
        "120",
        "-y",
        "30",
        &command,
    ]);
    assert!(
        started.status.success(),
        "tmux new-session failed: {}",
        String::from_utf8_lossy(&started.stderr)
    );
    // Keep the pane after the chat exits, to read its last words.
    tmux.run(&["set-option", "-t", "chat", "remain-on-exit", "on"]);
    tmux.wait_for("Ctrl-C cancels a turn", Duration::from_secs(20));

    tmux.run(&["send-keys", "-t", "chat", "Count to ten, slowly", "Enter"]);
    tmux.wait_for(partial.trim_end(), Duration::from_secs(10));
    tmux.run(&["send-keys", "-t", "chat", "C-c"]);
    tmux.wait_for(
        "[cancelled: the partial answer is kept]",
        Duration::from_secs(10),
    );
    assert!(!tmux.pane_dead(), "the first Ctrl-C cancels the turn only");

    // The log already says so (the turn's end is flushed before the prompt returns).
    let reader = LogReader::open(&db).expect("open log");
    let sessions = reader.sessions().expect("sessions");
    assert_eq!(sessions.len(), 1);
    let session_id = sessions[0].session_id.clone();
    let turns = reader.turns(&session_id).expect("turns");
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].status, TurnStatus::Aborted);
    let events = reader.session_events(&session_id, 0).expect("events");
    let kept = events
        .iter()
        .find_map(|e| match &e.event {
            Event::AssistantMessageSaved { message, .. } => Some(message.clone()),
            _ => None,
        })
        .expect("the partial answer is saved");
    assert!(
        kept.parts
            .iter()
            .any(|p| matches!(p, UIPart::Text { text, .. } if text == partial)),
        "{kept:?}"
    );
    assert!(events.iter().any(|e| e.kind() == "cancellation_requested"));

    // The chat goes on after a cancelled turn …
    tmux.run(&["send-keys", "-t", "chat", "Just say done", "Enter"]);
    // The turn is over when the prompt is back below the answer.
    tmux.wait_for("Done.\n>", Duration::from_secs(10));
    // The prompt is a line editor: the up arrow brings back the last line typed, and the line
    // can be edited before it is sent (here: cleared again with Ctrl-U).
    tmux.run(&["send-keys", "-t", "chat", "Up"]);
    tmux.wait_for("Done.\n> Just say done", Duration::from_secs(10));
    tmux.run(&["send-keys", "-t", "chat", "C-u"]);
    tmux.wait_until(
        "the recalled line cleared",
        Duration::from_secs(10),
        |screen| screen.lines().rev().find(|l| !l.trim().is_empty()) == Some(">"),
    );
    // … and Ctrl-C with no turn running exits.
    tmux.run(&["send-keys", "-t", "chat", "C-c"]);
    tmux.wait_until("the chat exiting", Duration::from_secs(10), |_| {
        tmux.pane_dead()
    });
    let screen = tmux.screen();
    assert!(
        screen.contains(&format!("session {session_id} is in")),
        "{screen}"
    );
    let turns = reader.turns(&session_id).expect("turns");
    assert_eq!(
        turns.iter().map(|t| t.status).collect::<Vec<_>>(),
        [TurnStatus::Aborted, TurnStatus::Completed]
    );
    // The lines typed are kept for the next chat, in the history file asked for.
    let kept = std::fs::read_to_string(&history).expect("the history file");
    assert_eq!(
        kept.lines().collect::<Vec<_>>(),
        ["Count to ten, slowly", "Just say done"]
    );
}
