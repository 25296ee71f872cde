//! Every input is an event: each way work enters a session is appended as one input event
//! before anything it causes, and re-execution replay re-issues exactly those events — on every
//! entry path, on every shipped fixture — while a log written before inputs were events, or
//! one whose input events are malformed or out of order, is refused by name.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mull::core::{EntryPath, Envelope, Event, StreamPart, UIMessage};
use mull::engine::replay::{Recording, ReplayError};
use mull::engine::{ClientToolOutcome, OutcomeStatus, Session, SubmitOptions, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use mull::store::{import_jsonl, Log, LogReader};
use serde_json::json;

mod support;
use support::replay::{recording_of, reexecute_ok, try_reexecute};
use support::scripted::Asker;
use support::test_log::TestLog;

fn user(id: &str, text: &str) -> Vec<UIMessage> {
    vec![UIMessage::user(id, text)]
}

/// A model step that streams a little, then hangs until it is cancelled.
fn hanging(s: mull::providers::scripted::StepScript) -> mull::providers::scripted::StepScript {
    s.part(StreamPart::TextStart { id: "t".into() })
        .part(StreamPart::TextDelta {
            id: "t".into(),
            text: "Once upon ".into(),
        })
        .pause(Duration::from_secs(60))
        .part(StreamPart::TextDelta {
            id: "t".into(),
            text: "a time.".into(),
        })
}

/// Reads a chat stream until its first text delta, cancels it with `cancel`, and returns how
/// the turn ended.
async fn cancel_mid_stream(
    mut stream: mull::engine::ChatStream,
    cancel: impl FnOnce(&str),
) -> OutcomeStatus {
    while let Some(part) = stream.next().await {
        if matches!(part, StreamPart::TextDelta { .. }) {
            cancel(&stream.request_id.clone());
            break;
        }
    }
    while stream.next().await.is_some() {}
    stream.finish().await.unwrap().status
}

/// One session through every entry path: save_messages (ending in a client tool call), the
/// client's result (auto-continuation), chat, a network chat, continue_last_turn, regenerate,
/// a submission, and two cancellations (one request, then every request).
async fn every_entry_path() -> (TestLog, Arc<Asker>) {
    let model = ScriptedModel::builder("m")
        .step(|s| s.tool_call("call_1", "ask", json!({})))
        .step(|s| s.text("Thanks for answering."))
        .step(|s| s.text("Chat answer."))
        .step(|s| s.text("Network answer."))
        .step(|s| s.text("More, as asked."))
        .step(|s| s.text("More, said again."))
        .step(|s| s.text("Submitted answer."))
        .step(hanging)
        .step(hanging)
        .build();
    let agent = Asker::new(&model);
    let env = TestLog::new();
    let session: Session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "Ask me something."), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let continued = session
        .add_tool_result("call_1", ClientToolOutcome::Output(json!("yes")))
        .await
        .unwrap()
        .expect("the result completes its step and continues");
    assert_eq!(continued.status, OutcomeStatus::Completed);
    for (entry, id, text) in [
        (EntryPath::Chat, "u2", "Chat with me."),
        (EntryPath::Http, "u3", "Over the network."),
    ] {
        let opts = TurnOptions::with_body(json!({ "via": format!("{entry:?}") }));
        let stream = if entry == EntryPath::Http {
            session.chat_http(user(id, text), opts)
        } else {
            session.chat(user(id, text), opts)
        };
        let out = stream.unwrap().finish().await.unwrap();
        assert_eq!(out.status, OutcomeStatus::Completed);
    }
    let out = session
        .continue_last_turn(TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let out = session
        .regenerate(None, TurnOptions::default())
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let receipt = session
        .submit_messages(user("u4", "Queued question."), SubmitOptions::default())
        .await
        .unwrap();
    session
        .wait_submission(&receipt.submission_id)
        .await
        .unwrap();
    let stream = session
        .chat(user("u5", "Tell a story."), TurnOptions::default())
        .unwrap();
    let status = cancel_mid_stream(stream, |id| {
        assert!(session.cancel_chat(id).unwrap());
    })
    .await;
    assert_eq!(status, OutcomeStatus::Aborted);
    let stream = session
        .chat(user("u6", "Another story."), TurnOptions::default())
        .unwrap();
    let status = cancel_mid_stream(stream, |_| {
        assert_eq!(session.abort_all("closing").unwrap(), 1);
    })
    .await;
    assert_eq!(status, OutcomeStatus::Aborted);
    drop(session);
    (env, agent)
}

/// Where the input that caused `events[at]` (a turn's first event) was appended, if before it.
fn cause_of(events: &[Envelope], request: &str, entry: EntryPath) -> Option<usize> {
    events.iter().position(|e| match (&e.event, entry) {
        (Event::TurnRequested { request_id, .. }, _) => request_id == request,
        (Event::SubmissionApplied { request_id, .. }, EntryPath::SubmitMessages) => {
            request_id == request
        }
        _ => false,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_path_appends_its_input_before_anything_it_causes() {
    let (env, _agent) = every_entry_path().await;
    let events = env.events().await;
    let mut entries = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let Event::TurnStarted {
            request_id, entry, ..
        } = &e.event
        else {
            continue;
        };
        entries.push(*entry);
        // The first event any turn writes about its request (its messages, a retraction, the
        // turn's start) comes after the input.
        let first = events
            .iter()
            .position(|e| match &e.event {
                Event::UserMessagesSaved { request_id: r, .. }
                | Event::MessagesRetracted { request_id: r, .. } => {
                    r.as_deref() == Some(request_id.as_str())
                }
                Event::TurnStarted { request_id: r, .. } => r == request_id,
                _ => false,
            })
            .unwrap_or(i);
        match entry {
            EntryPath::AutoContinue => {
                let result = events[..i]
                    .iter()
                    .rposition(|e| matches!(e.event, Event::ClientToolResult { .. }))
                    .expect("a client_tool_result before the continuation");
                let previous_end = events[..i]
                    .iter()
                    .rposition(|e| matches!(e.event, Event::TurnFinished { .. }))
                    .unwrap();
                assert!(
                    previous_end < result,
                    "the result is the continuation's cause"
                );
            }
            EntryPath::SubmitMessages => {
                let applied = cause_of(&events, request_id, *entry).unwrap();
                let Event::SubmissionApplied { submission_id, .. } = &events[applied].event else {
                    unreachable!()
                };
                let accepted = events
                    .iter()
                    .position(|e| matches!(&e.event, Event::SubmissionAccepted { submission_id: s, .. } if s == submission_id))
                    .expect("the submission's input");
                assert!(
                    accepted < first,
                    "{entry:?}: accepted at {accepted}, acted at {first}"
                );
            }
            _ => {
                let requested = cause_of(&events, request_id, *entry)
                    .unwrap_or_else(|| panic!("{entry:?} {request_id}: no turn_requested"));
                assert!(
                    requested < first,
                    "{entry:?}: requested at {requested}, acted at {first}"
                );
                let Event::TurnRequested { entry: asked, .. } = &events[requested].event else {
                    unreachable!()
                };
                assert_eq!(asked, entry);
            }
        }
    }
    entries.sort_by_key(|e| format!("{e:?}"));
    entries.dedup();
    assert_eq!(entries.len(), 7, "every entry path ran: {entries:?}");
    // Each cancellation is recorded before the turn it ends.
    for (i, e) in events.iter().enumerate() {
        if let Event::CancellationRequested { .. } = e.event {
            assert!(events[i..].iter().any(|e| matches!(
                e.event,
                Event::TurnFinished {
                    status: mull::core::TurnStatus::Aborted,
                    ..
                }
            )));
        }
    }
    let cancels = events
        .iter()
        .filter(|e| matches!(e.event, Event::CancellationRequested { .. }))
        .count();
    assert_eq!(cancels, 2);
    // A continuation records the body it resolved, so re-issuing it needs no lookup.
    assert!(events.iter().any(|e| matches!(&e.event,
        Event::TurnRequested { entry: EntryPath::ContinueLastTurn, body, .. } if body["via"] == "Http")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_through_every_entry_path_re_executes_identically() {
    let (env, agent) = every_entry_path().await;
    env.log.flush().await.unwrap();
    let recording = recording_of(&env.path, &env.session_id);
    let report = reexecute_ok(&recording, agent).await;
    if let Some(d) = &report.divergence {
        panic!("{d}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
}

fn fixture_recording(path: &Path, dir: &Path) -> Recording {
    let db = dir.join(format!(
        "{}.db",
        path.file_stem().unwrap().to_string_lossy()
    ));
    let log = Log::open(&db).unwrap();
    let file = BufReader::new(std::fs::File::open(path).unwrap());
    import_jsonl(file, &path.display().to_string(), &log).unwrap();
    log.close().unwrap();
    recording_of(&db, "sess_1")
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_carries_its_inputs_and_re_executes_identically() {
    let dir = tempfile::tempdir().unwrap();
    let files = fixtures();
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let recording = fixture_recording(&path, dir.path());
        assert!(
            recording
                .envelopes()
                .iter()
                .any(|e| matches!(e.event, Event::TurnRequested { .. })),
            "{}: no input events; regenerate the fixtures",
            path.display()
        );
        let agent = mull::agents::built_in(recording.agent())
            .unwrap_or_else(|| panic!("{}: agent {}", path.display(), recording.agent()));
        let report = reexecute_ok(&recording, agent).await;
        if let Some(d) = &report.divergence {
            panic!("{}: {d}", path.display());
        }
        assert_eq!(report.actual.len(), recording.envelopes().len());
    }
}

fn legacy_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/legacy/two-tools-before-input-events.jsonl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_from_before_input_events_is_read_as_ever_and_refused_for_re_execution() {
    let dir = tempfile::tempdir().unwrap();
    let recording = fixture_recording(&legacy_fixture(), dir.path());
    // The projection reads it as it always did.
    let state = LogReader::open(dir.path().join("two-tools-before-input-events.db"))
        .unwrap()
        .load_session("sess_1")
        .unwrap();
    assert_eq!(state.messages.len(), 2);
    assert!(state.turns.iter().all(|t| t.finished_at.is_some()));
    // Re-executing it is refused, naming the format and the first turn no input requested.
    let agent = mull::agents::built_in(recording.agent()).unwrap();
    let err = try_reexecute(&recording, agent)
        .await
        .expect_err("an old log cannot be re-executed");
    let text = err.to_string();
    assert!(
        matches!(err, ReplayError::NoInputEvents { seq: 3, v: 1, .. }),
        "{err:?}"
    );
    assert!(
        text.contains("event format v1") && text.contains("seq 3, turn_started"),
        "{text}"
    );
}

/// The two-tools fixture's events, changed by `edit`, as a recording.
fn edited_fixture(edit: impl FnOnce(&mut Vec<Envelope>)) -> Recording {
    let dir = tempfile::tempdir().unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/two-tools.jsonl");
    let mut envelopes = fixture_recording(&path, dir.path()).envelopes().to_vec();
    edit(&mut envelopes);
    Recording::new(envelopes).unwrap()
}

async fn refused(recording: &Recording) -> (u64, String) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("replay.db")).unwrap();
    let model =
        mull::providers::replay::ReplayModel::from_envelopes(recording.envelopes().to_vec())
            .unwrap();
    let agent = mull::agents::built_in(recording.agent()).unwrap();
    let err = mull::engine::replay::reexecute(
        &log,
        agent,
        Arc::new(model),
        recording,
        Default::default(),
    )
    .await
    .expect_err("a bad input is refused");
    // Refused before anything ran: the replay wrote nothing.
    log.flush().await.unwrap();
    assert!(log
        .reader()
        .unwrap()
        .session_page(recording.session_id(), 0, 1)
        .unwrap()
        .is_empty());
    match err {
        ReplayError::BadInput { seq, what } => (seq, what),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_out_of_order_input_event_is_refused_naming_its_seq() {
    let position = |envelopes: &[Envelope], kind: &str| {
        envelopes.iter().position(|e| e.kind() == kind).unwrap()
    };
    // An input no caller can make: a turn request for an auto-continuation.
    let malformed = edited_fixture(|envelopes| {
        let at = position(envelopes, "turn_requested");
        if let Event::TurnRequested { entry, .. } = &mut envelopes[at].event {
            *entry = EntryPath::AutoContinue;
        }
    });
    let at = position(malformed.envelopes(), "turn_requested");
    let (seq, what) = refused(&malformed).await;
    assert_eq!(seq, malformed.envelopes()[at].seq);
    assert!(what.contains("AutoContinue"), "{what}");

    // The request moved after the turn it caused.
    let out_of_order = edited_fixture(|envelopes| {
        let at = position(envelopes, "turn_requested");
        let request = envelopes.remove(at);
        let started = position(envelopes, "turn_started");
        envelopes.insert(started + 1, request);
        for (i, e) in envelopes.iter_mut().enumerate() {
            e.seq = i as u64 + 1;
        }
    });
    let saved = position(out_of_order.envelopes(), "user_messages_saved");
    let started = position(out_of_order.envelopes(), "turn_started");
    let (seq, what) = refused(&out_of_order).await;
    assert_eq!(seq, out_of_order.envelopes()[started].seq, "{what}");
    assert!(saved < started);
    assert!(what.contains("before any turn_requested"), "{what}");
}
