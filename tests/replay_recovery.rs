//! Re-execution replay of sessions a crash cut off: a process stopped in the middle of a turn
//! (or after accepting a durable submission), and a later process reopened the session, whose
//! recovery finished the turn as an error at stage `recovery` or ran the submission.
//!
//! Such a log is built the way a crash leaves one: a full session is recorded, its first events
//! up to the cut are copied into a fresh log (what the stopped process had committed), and the
//! session is reopened there by a new process, which then goes on with another turn.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mull::core::{
    Envelope, ErrorStage, Event, IdSource, LanguageModel, SequentialIds, SubmissionStatus,
    UIMessage,
};
use mull::engine::replay::{Recording, ReplayError, ReplayReport};
use mull::engine::{
    Agent, HookResult, OutcomeStatus, Session, SubmitOptions, ToolCallContext, ToolCallDecision,
    ToolSet, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;
use support::replay::{recording_of, reexecute_ok, try_reexecute};
use support::test_log::TestLog;
use support::tools::{block_lookups, echo_lookup};

/// A scripted agent with one server tool; `block_lookup` is the changed policy.
struct Looker {
    model: ScriptedModel,
    block_lookup: bool,
    /// Held as long as the agent is: tells whether anything still runs it.
    _alive: Arc<()>,
}

#[async_trait]
impl Agent for Looker {
    fn name(&self) -> &str {
        "looker"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new().with(echo_lookup())
    }
    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        Ok(block_lookups(self.block_lookup, ctx))
    }
}

fn looker(model: ScriptedModel) -> Arc<Looker> {
    Arc::new(Looker {
        model,
        block_lookup: false,
        _alive: Arc::new(()),
    })
}

/// The ids of the process that reopens the session: counting, under their own prefix, so they
/// never repeat the first process's.
struct SecondProcessIds(SequentialIds);

impl IdSource for SecondProcessIds {
    fn next_id(&self, prefix: &str) -> String {
        self.0.next_id(&format!("{prefix}_p2"))
    }
}

fn user(id: &str, text: &str) -> Vec<UIMessage> {
    vec![UIMessage::user(id, text)]
}

/// What the first process's model answers: a greeting, then a turn that streams text, looks
/// something up and answers.
fn first_script() -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Hello."))
        .step(|s| {
            s.text_deltas(["Let me ", "look that up."]).tool_call(
                "call_1",
                "lookup",
                json!({"word": "mull"}),
            )
        })
        .step(|s| s.text("It means to think."))
        .build()
}

/// The first process, run to the end: the log a crash cuts.
async fn first_process(durable: bool) -> Vec<Envelope> {
    let log = TestLog::new();
    let session = log.open(&looker(first_script())).await;
    let out = session
        .save_messages(user("u1", "Hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    if durable {
        let receipt = session
            .submit_messages(
                user("u2", "What does mull mean?"),
                SubmitOptions {
                    submission_id: Some("sub_a".into()),
                    ..SubmitOptions::default()
                },
            )
            .await
            .unwrap();
        let result = session
            .wait_submission(&receipt.submission_id)
            .await
            .unwrap();
        assert_eq!(result.status, SubmissionStatus::Completed);
    } else {
        let out = session
            .save_messages(user("u2", "What does mull mean?"), TurnOptions::default())
            .await
            .unwrap();
        assert_eq!(out.status, OutcomeStatus::Completed);
    }
    drop(session);
    log.events().await
}

/// How the process after a crash comes to the session.
#[derive(Debug, Clone, Copy)]
enum Restart {
    /// It opens the log file anew: the log's recovery resolves the turn the crash left open
    /// before any session opens.
    NewWriter,
    /// It reopens the session on a log already open (as a backend with one writer per
    /// session does): the session's opening resolves the turn.
    SameWriter,
}

/// The log after a crash: the first `cut` events of `full`, then a second process that reopens
/// the session (its model answers a re-run submission, then one more question) and asks that
/// question.
async fn crashed_at(full: &[Envelope], cut: usize) -> (TestLog, Recording) {
    crashed_and_restarted_at(full, cut, Restart::SameWriter).await
}

async fn crashed_and_restarted_at(
    full: &[Envelope],
    cut: usize,
    restart: Restart,
) -> (TestLog, Recording) {
    let mut log = TestLog::holding(&full[..cut]).await;
    if let Restart::NewWriter = restart {
        log = log.reopened();
    }
    let second = ScriptedModel::builder("scripted-1")
        // Only a submission that was never applied runs again; a question in any case.
        .step(|s| s.text("Mull: to think it over."))
        .step(|s| s.text("Welcome back."))
        .build();
    let options = log
        .options()
        .with_ids(Arc::new(SecondProcessIds(SequentialIds::new())));
    let session = Session::open(&log.log, looker(second), options)
        .await
        .unwrap();
    let idle = async {
        while session.is_busy() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), idle)
        .await
        .expect("recovery finishes");
    let state = session.state();
    if let Some(sub) = state.submissions.first() {
        session.wait_submission(&sub.submission_id).await.unwrap();
    }
    let out = session
        .save_messages(user("u3", "Thanks"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    drop(session);
    let recording = recording_of(&log.path, "s1");
    (log, recording)
}

async fn replay(recording: &Recording, agent: Looker) -> ReplayReport {
    reexecute_ok(recording, Arc::new(agent)).await
}

async fn try_replay(recording: &Recording, agent: Looker) -> Result<ReplayReport, ReplayError> {
    try_reexecute(recording, Arc::new(agent)).await
}

fn unchanged() -> Looker {
    Looker {
        model: first_script(),
        block_lookup: false,
        _alive: Arc::new(()),
    }
}

/// The recovery failures of a log.
fn recovered(events: &[Envelope]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                Event::TurnFailed {
                    stage: ErrorStage::Recovery,
                    ..
                }
            )
        })
        .count()
}

/// Where the second turn runs in the full log: its `turn_started` and `turn_finished`.
fn second_turn(full: &[Envelope]) -> (usize, usize) {
    let starts: Vec<usize> = full
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.event, Event::TurnStarted { .. }))
        .map(|(i, _)| i)
        .collect();
    let finish = full
        .iter()
        .rposition(|e| matches!(e.event, Event::TurnFinished { .. }))
        .unwrap();
    (starts[1], finish)
}

/// The cut right after the second turn's first text delta: mid-stream, before the tool call.
fn after_first_delta_of_the_second_turn(full: &[Envelope]) -> usize {
    full.iter()
        .position(|e| {
            matches!(&e.event, Event::Chunk { part: mull::core::StreamPart::TextDelta { text, .. }, .. } if text == "Let me ")
        })
        .expect("the second turn streams \"Let me \"")
        + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_mid_stream_and_recovered_replays_identically() {
    let full = first_process(false).await;
    let cut = after_first_delta_of_the_second_turn(&full);
    let (_log, recording) = crashed_at(&full, cut).await;
    assert_eq!(recovered(recording.envelopes()), 1);
    let partial = recording.envelopes().iter().find_map(|e| match &e.event {
        Event::AssistantMessageSaved { message, .. } if message.plain_text() == "Let me " => {
            Some(message.clone())
        }
        _ => None,
    });
    assert!(partial.is_some(), "recovery keeps the partial answer");

    let report = replay(&recording, unchanged()).await;
    if let Some(divergence) = &report.divergence {
        panic!("{divergence}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
    assert_eq!(recovered(&report.actual), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_mid_stream_and_recovered_by_the_next_writer_replays_identically() {
    let full = first_process(false).await;
    let cut = after_first_delta_of_the_second_turn(&full);
    let (_log, recording) = crashed_and_restarted_at(&full, cut, Restart::NewWriter).await;
    // The log's recovery ran before the second process opened the session.
    let kinds: Vec<&str> = recording.envelopes()[cut..]
        .iter()
        .map(|e| e.kind())
        .collect();
    assert_eq!(
        kinds[..4],
        [
            "assistant_message_saved",
            "turn_finished",
            "turn_failed",
            "session_opened"
        ],
        "{kinds:?}"
    );
    let report = replay(&recording, unchanged()).await;
    if let Some(divergence) = &report.divergence {
        panic!("{divergence}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
    assert_eq!(recovered(&report.actual), 1);
}

/// Replays the log of a crash at every cut in `cuts`; returns the kinds of the last event
/// before each cut the replay could not stop at (every other cut must replay identically).
async fn replay_every_cut(full: &[Envelope], cuts: std::ops::RangeInclusive<usize>) -> Vec<String> {
    let unreachable = replay_every_cut_after(full, cuts.clone(), Restart::SameWriter).await;
    // When the next writer's recovery resolved the turn, every cut replays at least as well:
    // the log's recovery comes right after the cut, where the replay re-enacts it.
    let by_new_writer = replay_every_cut_after(full, cuts, Restart::NewWriter).await;
    assert!(
        by_new_writer.iter().all(|k| unreachable.contains(k)),
        "{by_new_writer:?} ⊄ {unreachable:?}"
    );
    unreachable
}

async fn replay_every_cut_after(
    full: &[Envelope],
    cuts: std::ops::RangeInclusive<usize>,
    restart: Restart,
) -> Vec<String> {
    let mut unreachable = Vec::new();
    for cut in cuts {
        let (_log, recording) = crashed_and_restarted_at(full, cut, restart).await;
        assert!(recovered(recording.envelopes()) <= 1);
        match try_replay(&recording, unchanged()).await {
            Ok(report) => {
                if let Some(divergence) = report.divergence {
                    panic!(
                        "{restart:?}: cut after {} ({}): {divergence}",
                        cut,
                        full[cut - 1].kind()
                    );
                }
                assert_eq!(report.actual.len(), recording.envelopes().len());
            }
            Err(ReplayError::UnreachableStop { seq, after, .. }) => {
                assert_eq!(seq, full[cut - 1].seq);
                unreachable.push(after);
            }
            Err(other) => panic!("{restart:?}: cut after {cut}: {other}"),
        }
    }
    unreachable
}

/// The places in a turn where the engine writes the next event without waiting, so a replay
/// cannot stop there: between the user's messages (and, for a submission, its application) and
/// the turn's start, which share a barrier; between the turn's configuration and its first
/// step; between a tool call's chunk and `tool_call_started` (the call's `on_chunk` waits until
/// its hooks ran, as in Think, so no hook runs in between); and between the saved answer and
/// the turn's end.
const UNREACHABLE: [&str; 4] = [
    "user_messages_saved",
    "turn_configured",
    "chunk",
    "assistant_message_saved",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cut_inside_a_turn_replays_identically_or_is_named_unreachable() {
    let full = first_process(false).await;
    let saved = full
        .iter()
        .rposition(|e| matches!(e.event, Event::UserMessagesSaved { .. }))
        .unwrap();
    let (_, finished) = second_turn(&full);
    assert_eq!(
        replay_every_cut(&full, saved + 1..=finished).await,
        UNREACHABLE
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_policy_diverges_in_the_turn_a_crash_cut() {
    let full = first_process(false).await;
    // Cut after the tool decision was recorded, while the tool ran.
    let cut = full
        .iter()
        .position(|e| matches!(e.event, Event::ToolDecided { .. }))
        .unwrap()
        + 1;
    let (_log, recording) = crashed_at(&full, cut).await;
    let report = replay(
        &recording,
        Looker {
            model: first_script(),
            block_lookup: true,
            _alive: Arc::new(()),
        },
    )
    .await;
    let divergence = report.divergence.expect("the changed policy must diverge");
    assert_eq!(divergence.index, cut - 1, "{divergence}");
    assert!(
        divergence
            .differences()
            .contains(&r#"event.action: "allow" ≠ "block""#.to_owned()),
        "{divergence}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_accepted_before_the_crash_reruns_on_reopen_and_replays_identically() {
    let full = first_process(true).await;
    let cut = full
        .iter()
        .position(|e| matches!(e.event, Event::SubmissionAccepted { .. }))
        .unwrap()
        + 1;
    let (_log, recording) = crashed_at(&full, cut).await;
    // The second process applied and ran it.
    let applied = recording.envelopes().iter().position(|e| {
        matches!(&e.event, Event::SubmissionApplied { submission_id, .. } if submission_id == "sub_a")
    });
    let reopened = recording
        .envelopes()
        .iter()
        .rposition(|e| matches!(e.event, Event::SessionOpened { .. }))
        .unwrap();
    assert!(applied.is_some_and(|at| at > reopened));

    let report = replay(&recording, unchanged()).await;
    if let Some(divergence) = &report.divergence {
        panic!("{divergence}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cut_inside_a_submitted_turn_replays_identically_or_is_named_unreachable() {
    let full = first_process(true).await;
    // From the acceptance (the run not yet applied) to the submission's end.
    let accepted = full
        .iter()
        .position(|e| matches!(e.event, Event::SubmissionAccepted { .. }))
        .unwrap();
    let finished = full
        .iter()
        .rposition(|e| matches!(e.event, Event::SubmissionFinished { .. }))
        .unwrap();
    let [saved, configured, tool_call, answered] = UNREACHABLE;
    // The submission's end follows its `on_chat_response`'s delivery mark without waiting.
    assert_eq!(
        replay_every_cut(&full, accepted + 1..=finished).await,
        [
            saved,
            "submission_applied",
            configured,
            tool_call,
            answered,
            "chat_response_delivered"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_parked_at_a_reenacted_stop_does_not_outlive_the_replay() {
    // A durable submission runs in a background task; cut its turn mid-stream, so the replay
    // parks that task where the recorded process died.
    let full = first_process(true).await;
    let cut = after_first_delta_of_the_second_turn(&full);
    let (_log, recording) = crashed_at(&full, cut).await;
    assert_eq!(recovered(recording.envelopes()), 1);
    let alive = Arc::new(());
    let agent = Looker {
        _alive: Arc::clone(&alive),
        ..unchanged()
    };
    let report = replay(&recording, agent).await;
    if let Some(divergence) = &report.divergence {
        panic!("{divergence}");
    }
    // Every holder of the agent is gone once the aborted task has been dropped by the runtime.
    let released = async {
        while Arc::strong_count(&alive) > 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), released)
        .await
        .expect("the parked turn was let go of after the replay");
}
