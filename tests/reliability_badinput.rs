//! The bad-input corpus (`tests/badinput/`): every file is a way the world hands mull broken
//! input. Each case asserts a clear error that names the cause, that the process goes on where
//! it should, and that no event flushed before the fault is lost.
//!
//! The damaged databases are regenerated with `cargo run -p mull-reliability -- gen-badinput`.

#[path = "../crates/mull-reliability/src/sse_server.rs"]
mod sse_server;
mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use mull::core::{
    Clock, DecisionAction, ErrorStage, Event, FixedClock, LanguageModel, StreamPart, ToolPartState,
    UIMessage, UIPart,
};
use mull::engine::{Agent, OutcomeStatus, ToolSet, TurnOptions};
use mull::providers::anthropic::{AnthropicConfig, AnthropicModel};
use mull::providers::openai::{OpenAiConfig, OpenAiModel};
use mull::providers::Secret;
use mull::store::{import_jsonl, Log, LogReader, StoreError};
use serde::Deserialize;
use sse_server::SseServer;
use support::events::{first_decision, first_failed_stage, first_tool_finish, streamed_text};
use support::test_log::TestLog;
use support::tools::counting_lookup;

fn corpus(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/badinput")
        .join(rel)
}

/// A copy of a corpus database in a scratch directory (opening may create sidecar files).
fn scratch_copy(rel: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir
        .path()
        .join(Path::new(rel).file_name().expect("file name"));
    std::fs::copy(corpus(rel), &path).expect("copies the corpus file");
    (dir, path)
}

// ---------------------------------------------------------------------------------------------
// Databases

#[test]
fn a_file_that_is_not_sqlite_is_refused_by_writer_and_reader_naming_the_file() {
    let (_dir, path) = scratch_copy("db/not_sqlite.db");
    let before = std::fs::read(&path).expect("reads");
    let err = Log::open(&path).expect_err("not a database");
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("not_sqlite.db") && text.contains("not a SQLite database"),
        "{text}"
    );
    let err = LogReader::open(&path).expect_err("not a database");
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    assert_eq!(
        std::fs::read(&path).expect("reads"),
        before,
        "the file was changed"
    );
}

#[test]
fn a_sqlite_file_of_another_program_is_refused_and_left_alone() {
    let (_dir, path) = scratch_copy("db/foreign.db");
    let before = std::fs::read(&path).expect("reads");
    let err = Log::open(&path).expect_err("foreign database");
    assert!(matches!(err, StoreError::NotAMullLog { .. }), "{err}");
    assert!(err.to_string().contains("foreign.db"), "{err}");
    let err = LogReader::open(&path).expect_err("foreign database");
    assert!(matches!(err, StoreError::NotAMullLog { .. }), "{err}");
    assert_eq!(
        std::fs::read(&path).expect("reads"),
        before,
        "the file was changed"
    );
}

#[test]
fn a_log_with_a_newer_schema_is_refused_with_both_versions_and_left_alone() {
    let (_dir, path) = scratch_copy("db/newer_schema.db");
    let before = std::fs::read(&path).expect("reads");
    let supported = mull::store::schema::SCHEMA_VERSION;
    for err in [
        Log::open(&path).expect_err("newer schema"),
        LogReader::open(&path).expect_err("newer schema"),
    ] {
        match &err {
            StoreError::NewerSchema {
                found,
                supported: s,
                ..
            } => {
                assert_eq!((*found, *s), (supported + 1, supported));
            }
            other => panic!("expected NewerSchema, got {other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("newer_schema.db") && text.contains("upgrade"),
            "{text}"
        );
    }
    assert_eq!(
        std::fs::read(&path).expect("reads"),
        before,
        "the file was changed"
    );
}

/// Reads every event of a damaged log page by page; returns how many decoded and the error.
fn read_all(reader: &LogReader) -> (u64, Option<StoreError>) {
    let mut after = 0;
    let mut read = 0;
    loop {
        match reader.page(after, 256) {
            Ok(page) if page.is_empty() => return (read, None),
            Ok(page) => {
                read += page.len() as u64;
                after = page.last().map_or(after, |e| e.seq);
            }
            Err(err) => return (read, Some(err)),
        }
    }
}

/// What a damaged log must do: refuse to open, or open and fail reads with an error naming
/// the file, never panic and never invent events.
fn assert_damage_is_reported(rel: &str) {
    let (_dir, path) = scratch_copy(rel);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name")
        .to_owned();
    let reader = match LogReader::open(&path) {
        Ok(reader) => reader,
        Err(err) => {
            assert!(err.to_string().contains(&name), "{err}");
            assert_writer_refuses(&path, &name);
            return;
        }
    };
    let (read, error) = read_all(&reader);
    let error = error.unwrap_or_else(|| panic!("{rel}: read {read} events and no damage reported"));
    let text = error.to_string();
    assert!(
        text.contains(&name) || text.contains("seq"),
        "the error must say where: {text}"
    );
    assert!(
        text.contains("malformed") || text.contains("corrupt") || text.contains("seq"),
        "the error must say what: {text}"
    );
    assert!(read <= 1006, "{read} events from a log that held 1006");
    assert_writer_refuses(&path, &name);
}

/// A writer must refuse a damaged log before appending anything, naming the file and what is
/// wrong, and leave the file as it was.
fn assert_writer_refuses(path: &Path, name: &str) {
    let before = std::fs::read(path).expect("reads");
    let err = Log::open(path).expect_err("a writer must not open a damaged log");
    assert!(matches!(err, StoreError::Damaged { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(name) && text.contains("the log is damaged"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(path).expect("reads"),
        before,
        "the damaged file was changed"
    );
}

#[test]
fn reads_that_meet_damaged_pages_name_the_seqs_they_cannot_get_past() {
    let (_dir, path) = scratch_copy("db/corrupt.db");
    let reader = LogReader::open(&path).expect("the header is intact");
    let (_, error) = read_all(&reader);
    let error = error.expect("damage is met");
    assert!(matches!(error, StoreError::Damaged { .. }), "{error}");
    let text = error.to_string();
    let first = &mull::store::check(&path).expect("checks").damaged[0];
    let last = first.last.expect("the stretch ends");
    assert!(
        text.contains(&format!("read up to seq {}", first.first - 1))
            && text.contains(&format!("seqs {}..={last}", first.first))
            && text.contains("sess_corpus"),
        "the error must name the unreadable stretch and its session: {text}"
    );
}

#[test]
fn check_names_every_damaged_stretch_and_what_it_costs() {
    let (_dir, path) = scratch_copy("db/corrupt.db");
    let report = mull::store::check(&path).expect("checks");
    assert!(!report.is_sound());
    assert!(!report.problems.is_empty(), "SQLite's complaints are kept");
    assert!(!report.damaged.is_empty(), "{report:?}");
    let lost: u64 = report
        .damaged
        .iter()
        .map(|range| range.lost().expect("each stretch ends before the log does"))
        .sum();
    // The sample log: session_opened, user_messages_saved, turn_started, step_started, 1000
    // chunks, turn_finished.
    assert_eq!(report.readable + lost, 1005, "{report:?}");
    assert_eq!(report.last_readable, 1005, "the end of the log still reads");
    for range in &report.damaged {
        assert!(range.sessions.contains("sess_corpus"), "{range}");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let fresh = dir.path().join("fresh.db");
    let log = Log::open(&fresh).expect("opens");
    log.append(
        "s",
        None,
        FixedClock::at_fixture_epoch().now(),
        Event::StepStarted { step: 0 },
    )
    .expect("appends");
    log.close().expect("closes");
    let report = mull::store::check(&fresh).expect("checks");
    assert!(report.is_sound(), "{report:?}");
    assert_eq!(report.readable, 1);
}

#[test]
fn recover_copies_every_readable_event_into_a_log_a_writer_opens() {
    let (dir, path) = scratch_copy("db/corrupt.db");
    let before = std::fs::read(&path).expect("reads");
    let checked = mull::store::check(&path).expect("checks");
    let out = dir.path().join("recovered.db");
    let report = mull::store::recover(&path, &out).expect("recovers");
    assert_eq!(report.copied, checked.readable);
    assert_eq!(report.lost, checked.damaged);
    assert_eq!(
        std::fs::read(&path).expect("reads"),
        before,
        "source untouched"
    );

    let again = mull::store::check(&out).expect("checks the copy");
    assert!(again.is_sound(), "{again:?}");
    assert_eq!(again.readable, checked.readable);
    // The seqs are kept: the copy holds exactly the readable seqs of the original.
    let reader = LogReader::open(&out).expect("reads the copy");
    let (read, error) = read_all(&reader);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(read, checked.readable);
    assert_eq!(reader.max_seq().expect("max"), 1005);
    let log = Log::open(&out).expect("a writer opens the copy");
    let appended = log
        .append(
            "sess_corpus",
            None,
            FixedClock::at_fixture_epoch().now(),
            Event::StepStarted { step: 9 },
        )
        .expect("appends");
    assert_eq!(appended.seq, 1006);
    log.close().expect("closes");

    let err = mull::store::recover(&path, &out).expect_err("never over an existing file");
    assert!(err.to_string().contains("recovered.db"), "{err}");
}

#[test]
fn a_truncated_log_is_reported_naming_the_file() {
    assert_damage_is_reported("db/truncated.db");
}

#[test]
fn a_log_with_corrupt_pages_is_reported_naming_the_file() {
    assert_damage_is_reported("db/corrupt.db");
}

#[test]
fn a_second_writer_is_refused_naming_the_lock_and_the_first_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("opens");
    let clock = FixedClock::at_fixture_epoch();
    for i in 0..10 {
        log.append("s", None, clock.now(), Event::StepStarted { step: i })
            .expect("appends");
    }
    log.flush_blocking().expect("flushes");
    let err = Log::open(&path).expect_err("second writer");
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("log.db.lock"), "{err}");
    log.append("s", None, clock.now(), Event::StepStarted { step: 10 })
        .expect("the first writer goes on");
    log.flush_blocking().expect("flushes");
    assert_eq!(
        LogReader::open(&path)
            .expect("reader")
            .max_seq()
            .expect("max"),
        11
    );
}

// ---------------------------------------------------------------------------------------------
// Events and JSONL

#[test]
fn unknown_kinds_and_old_versions_import_are_kept_and_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = std::fs::read(corpus("jsonl/unknown_kind_and_old_version.jsonl")).expect("reads");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let count =
        import_jsonl(&source[..], "unknown_kind_and_old_version.jsonl", &log).expect("imports");
    assert_eq!(count, 4);
    log.flush_blocking().expect("flushes");
    let reader = log.reader().expect("reader");
    let state = reader.load_session("sess_future").expect("folds");
    assert_eq!(
        state.unknown_events, 2,
        "unknown kinds are counted, not dropped"
    );
    assert_eq!(
        state.messages.len(),
        1,
        "known events around them still apply"
    );
    let mut out = Vec::new();
    mull::store::export_jsonl(&reader, None, &mut out).expect("exports");
    assert_eq!(out, source, "export gives back the imported bytes");
}

#[test]
fn malformed_jsonl_is_refused_naming_source_line_and_cause_and_writes_nothing() {
    let cases = [
        ("truncated_line.jsonl", 2, "truncated"),
        ("not_json.jsonl", 2, "malformed"),
        ("seq_goes_back.jsonl", 2, "seq"),
        ("bad_timestamp.jsonl", 1, "RFC 3339"),
        ("known_kind_bad_shape.jsonl", 1, "turn_started"),
        ("input_bad_shape.jsonl", 2, "turn_requested"),
        ("empty_line.jsonl", 2, "empty line"),
    ];
    for (file, line, cause) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        let source = std::fs::read(corpus(&format!("jsonl/{file}"))).expect("reads");
        let err = import_jsonl(&source[..], file, &log).expect_err(file);
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{file}:{line}:")) && text.contains(cause),
            "{file}: {text}"
        );
        log.flush_blocking().expect("the log still works");
        assert_eq!(
            log.reader().expect("reader").max_seq().expect("max"),
            0,
            "{file}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Model streams: the real clients, fed the corpus by a local server, inside real turns.

#[derive(Deserialize, schemars::JsonSchema)]
struct LookupInput {
    query: String,
    #[allow(dead_code)]
    limit: Option<u32>,
}

/// An agent over one wire model, with a `lookup` tool that counts its executions.
struct WireAgent {
    model: Arc<dyn LanguageModel>,
    executions: Arc<AtomicUsize>,
}

#[async_trait]
impl Agent for WireAgent {
    fn name(&self) -> &str {
        "wire"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new().with(
            counting_lookup(&self.executions, |input: LookupInput| {
                serde_json::json!(input.query)
            })
            .shared(),
        )
    }
    /// One step: a tool call ends the turn after its result, so one body serves the turn.
    fn max_steps(&self) -> u32 {
        1
    }
    fn max_retries(&self) -> u32 {
        0
    }
}

fn wire_model(wire: &str, server: &SseServer) -> Arc<dyn LanguageModel> {
    match wire {
        "openai" => {
            let mut config = OpenAiConfig::openai("gpt-x", Secret::new("sk-test"));
            config.base_url = server.base_url.clone();
            Arc::new(OpenAiModel::new(config).expect("client"))
        }
        _ => {
            let mut config = AnthropicConfig::new("claude-x", Secret::new("sk-test"));
            config.base_url = server.base_url.clone();
            Arc::new(AnthropicModel::new(config).expect("client"))
        }
    }
}

/// What one turn over a corpus stream left behind.
struct WireRun {
    status: OutcomeStatus,
    error: Option<String>,
    events: Vec<Event>,
    executions: usize,
    second_turn: OutcomeStatus,
    user_message_kept: bool,
}

async fn run_wire_case(wire: &str, file: &str) -> WireRun {
    let server = SseServer::start().expect("server");
    server.set_body(&std::fs::read(corpus(&format!("sse/{wire}/{file}"))).expect("corpus"));
    let log = TestLog::for_session("sess_wire");
    let executions = Arc::new(AtomicUsize::new(0));
    let agent = Arc::new(WireAgent {
        model: wire_model(wire, &server),
        executions: Arc::clone(&executions),
    });
    let session = log.open(&agent).await;
    let outcome = session
        .save_messages(
            vec![UIMessage::user("msg_u1", "look up rust")],
            TurnOptions::default(),
        )
        .await
        .expect("the engine survives the stream");
    // The process goes on: the next turn works (here: over a well-formed stream).
    server.set_body(
        &std::fs::read(corpus(&format!("sse/{wire}/noise_but_valid.sse"))).expect("corpus"),
    );
    let second = session
        .save_messages(
            vec![UIMessage::user("msg_u2", "again")],
            TurnOptions::default(),
        )
        .await
        .expect("second turn");
    let events = log.bare_events().await;
    let state = log.replayed().await;
    WireRun {
        status: outcome.status,
        error: outcome.error.map(|e| e.message),
        events,
        executions: executions.load(Ordering::SeqCst),
        second_turn: second.status,
        user_message_kept: state.messages.iter().any(|m| m.id == "msg_u1"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_streams_fail_the_turn_at_stage_stream_naming_the_cause() {
    let cases = [
        ("openai", "invalid_json.sse", "invalid JSON"),
        ("openai", "truncated_mid_event.sse", "openai"),
        ("openai", "ended_without_finish.sse", "openai"),
        ("openai", "not_utf8.sse", "UTF-8"),
        ("openai", "error_event.sse", "error while processing"),
        ("anthropic", "invalid_json.sse", "invalid JSON"),
        ("anthropic", "truncated_mid_event.sse", "anthropic"),
        ("anthropic", "ended_without_message_stop.sse", "anthropic"),
        ("anthropic", "not_utf8.sse", "UTF-8"),
        ("anthropic", "error_event.sse", "Overloaded"),
    ];
    for (wire, file, cause) in cases {
        let run = run_wire_case(wire, file).await;
        let error = run.error.unwrap_or_default();
        assert_eq!(run.status, OutcomeStatus::Error, "{wire}/{file}: {error}");
        assert!(
            error.contains(cause),
            "{wire}/{file}: {error:?} should name {cause:?}"
        );
        assert_eq!(
            first_failed_stage(&run.events),
            Some(ErrorStage::Stream),
            "{wire}/{file}"
        );
        assert!(
            run.user_message_kept,
            "{wire}/{file}: the user's message was lost"
        );
        assert_eq!(
            run.second_turn,
            OutcomeStatus::Completed,
            "{wire}/{file}: next turn"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_with_noise_the_decoder_should_skip_complete_normally() {
    for wire in ["openai", "anthropic"] {
        let run = run_wire_case(wire, "noise_but_valid.sse").await;
        assert_eq!(
            run.status,
            OutcomeStatus::Completed,
            "{wire}: {:?}",
            run.error
        );
        let text = streamed_text(&run.events);
        assert!(!text.is_empty(), "{wire}: no text reached the log");
    }
}

/// A chunk of the wrong shape (`choices` not a list; a delta that is not an object) is valid JSON
/// but not what the provider documents: the turn fails at stage `stream` with a `Protocol` error
/// naming the provider and the field, nothing is invented from the chunk, the user's message is
/// kept, and the next turn runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_of_the_wrong_shape_fails_the_turn_naming_the_field() {
    for (wire, field) in [("openai", "`choices`"), ("anthropic", "`delta`")] {
        let run = run_wire_case(wire, "wrong_shape.sse").await;
        let error = run.error.clone().unwrap_or_default();
        assert_eq!(run.status, OutcomeStatus::Error, "{wire}: {error}");
        assert!(
            error.contains(wire) && error.contains("malformed") && error.contains(field),
            "{wire}: {error:?} should name the provider and {field}"
        );
        assert_eq!(
            first_failed_stage(&run.events),
            Some(ErrorStage::Stream),
            "{wire}"
        );
        let mut first_turn = run
            .events
            .iter()
            .take_while(|e| !matches!(e, Event::TurnFailed { .. } | Event::TurnFinished { .. }));
        let invented = first_turn.any(|e| {
            matches!(
                e,
                Event::Chunk {
                    part: StreamPart::TextDelta { .. } | StreamPart::ToolCall { .. },
                    ..
                }
            )
        });
        assert!(
            !invented,
            "{wire}: parts were invented from a malformed chunk"
        );
        assert!(run.user_message_kept, "{wire}: the user's message was lost");
        assert_eq!(
            run.second_turn,
            OutcomeStatus::Completed,
            "{wire}: next turn"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_tool_call_json_from_the_model_is_a_tool_error_not_a_turn_failure() {
    for wire in ["openai", "anthropic"] {
        let run = run_wire_case(wire, "invalid_tool_arguments.sse").await;
        assert_eq!(
            run.status,
            OutcomeStatus::Completed,
            "{wire}: {:?}",
            run.error
        );
        let (action, finished) = (first_decision(&run.events), first_tool_finish(&run.events));
        assert_eq!(action, Some(DecisionAction::Invalid), "{wire}");
        let (success, error) = finished.expect("the call has an outcome");
        assert!(!success, "{wire}");
        assert!(
            error.contains("lookup") && error.to_lowercase().contains("json"),
            "{wire}: {error}"
        );
        assert_eq!(run.executions, 0, "{wire}: execute ran on invalid input");
        assert_eq!(run.second_turn, OutcomeStatus::Completed, "{wire}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_violating_tool_input_is_a_tool_error_naming_each_violation() {
    for wire in ["openai", "anthropic"] {
        let run = run_wire_case(wire, "schema_violating_tool_input.sse").await;
        assert_eq!(
            run.status,
            OutcomeStatus::Completed,
            "{wire}: {:?}",
            run.error
        );
        let (action, finished) = (first_decision(&run.events), first_tool_finish(&run.events));
        assert_eq!(action, Some(DecisionAction::Invalid), "{wire}");
        let (success, error) = finished.expect("the call has an outcome");
        assert!(!success, "{wire}");
        assert!(
            error.contains("lookup") && error.contains("/query") && error.contains("/limit"),
            "{wire}: {error}"
        );
        assert_eq!(run.executions, 0, "{wire}: execute ran on invalid input");
    }
}

/// The persisted assistant message of the first turn keeps the bad call as an error part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bad_call_is_kept_in_the_message_as_an_error_part() {
    let run = run_wire_case("openai", "invalid_tool_arguments.sse").await;
    let saved = run.events.iter().find_map(|e| match e {
        Event::AssistantMessageSaved { message, .. } => Some(message.clone()),
        _ => None,
    });
    let message = saved.expect("the assistant message was saved");
    let tool = message
        .parts
        .iter()
        .find_map(|p| match p {
            UIPart::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .expect("a tool part");
    assert_eq!(tool.state, ToolPartState::OutputError);
}
