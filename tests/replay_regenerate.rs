//! Re-execution replay of regenerated answers: the retraction and the new turn are driven again
//! through `Session::regenerate`, so a session with regenerations replays identically, and a
//! changed hook is reported at the first event of the regenerated turn it changes.

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use mull::core::{EntryPath, Envelope, Event, LanguageModel, UIMessage};
use mull::engine::replay::{Recording, ReplayReport};
use mull::engine::{
    Agent, HookResult, OutcomeStatus, Session, ToolCallContext, ToolCallDecision, ToolSet,
    TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;
use support::replay::{recording_of, reexecute_ok};
use support::test_log::TestLog;
use support::tools::{block_lookups, echo_lookup};

/// A scripted agent with one server tool; `block_lookup` is the changed policy.
struct Answerer {
    model: ScriptedModel,
    block_lookup: bool,
}

#[async_trait]
impl Agent for Answerer {
    fn name(&self) -> &str {
        "answerer"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn system_prompt(&self) -> String {
        "Answer briefly.".into()
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

/// The model's answers, in the order the recorded session asks for them.
fn script() -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| s.text("First answer."))
        // The regenerated first answer looks something up.
        .step(|s| s.tool_call("call_1", "lookup", json!({"word": "hi"})))
        .step(|s| s.text("Second answer."))
        .step(|s| s.text("Third answer."))
        .step(|s| s.text("Fourth answer."))
        .step(|s| s.text("Fifth answer."))
        .step(|s| s.text("Sixth answer."))
        .build()
}

fn agent(block_lookup: bool) -> Arc<Answerer> {
    Arc::new(Answerer {
        model: script(),
        block_lookup,
    })
}

fn users(messages: &[(&str, &str)]) -> Vec<UIMessage> {
    messages
        .iter()
        .map(|(id, text)| UIMessage::user(*id, *text))
        .collect()
}

async fn regenerate(session: &Session, message_id: Option<&str>) {
    let mut stream = session
        .regenerate(message_id, TurnOptions::with_body(json!({"tone": "dry"})))
        .unwrap();
    while stream.next().await.is_some() {}
    assert_eq!(
        stream.finish().await.unwrap().status,
        OutcomeStatus::Completed
    );
}

fn retractions(events: &[Envelope]) -> Vec<Vec<String>> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::MessagesRetracted { message_ids, .. } => Some(message_ids.clone()),
            _ => None,
        })
        .collect()
}

/// A chat turn and its regeneration (which calls a tool), then two more regenerations: of an
/// earlier answer (retracting what followed it too) and from a user message that another user
/// message followed (the first retracted message is a question).
async fn record() -> (TestLog, Recording) {
    let log = TestLog::new();
    let session = log.open(&agent(false)).await;
    let mut stream = session
        .chat(users(&[("u1", "Hi")]), TurnOptions::default())
        .unwrap();
    while stream.next().await.is_some() {}
    assert_eq!(
        stream.finish().await.unwrap().status,
        OutcomeStatus::Completed
    );
    let first_answer = session.read_state(|s| s.messages[1].id.clone());

    regenerate(&session, None).await;
    let regenerated = session.read_state(|s| s.messages[1].id.clone());
    assert_ne!(regenerated, first_answer);

    let out = session
        .save_messages(users(&[("u2", "One")]), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    regenerate(&session, Some(&regenerated)).await;

    let out = session
        .save_messages(
            users(&[("u3", "Two"), ("u4", "Three")]),
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    regenerate(&session, Some("u3")).await;
    drop(session);

    let events = log.events().await;
    let retracted = retractions(&events);
    assert_eq!(retracted.len(), 3);
    assert_eq!(retracted[0], [first_answer]);
    assert_eq!(retracted[1].len(), 3, "{retracted:?}");
    assert_eq!(retracted[1][..2], [regenerated, "u2".to_owned()]);
    assert_eq!(retracted[2][0], "u4", "{retracted:?}");
    let recording = recording_of(&log.path, "s1");
    (log, recording)
}

async fn replay(recording: &Recording, agent: Arc<Answerer>) -> ReplayReport {
    reexecute_ok(recording, agent).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_regenerations_replays_identically() {
    let (_log, recording) = record().await;
    let report = replay(&recording, agent(false)).await;
    if let Some(divergence) = &report.divergence {
        panic!("{divergence}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
    let regenerations = report
        .actual
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                Event::TurnStarted {
                    entry: EntryPath::Regenerate,
                    ..
                }
            )
        })
        .count();
    assert_eq!(regenerations, 3);
    assert_eq!(
        retractions(&report.actual),
        retractions(recording.envelopes())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_policy_diverges_inside_the_regenerated_turn() {
    let (_log, recording) = record().await;
    let report = replay(&recording, agent(true)).await;
    let divergence = report.divergence.expect("the changed policy must diverge");
    let decision = recording
        .envelopes()
        .iter()
        .find(|e| matches!(&e.event, Event::ToolDecided { tool, .. } if tool == "lookup"))
        .unwrap();
    assert_eq!(divergence.seq, decision.seq, "{divergence}");
    let differences = divergence.differences();
    assert!(
        differences.contains(&r#"event.action: "allow" ≠ "block""#.to_owned()),
        "{differences:?}"
    );
    // The retraction and the regenerated turn's start came before it, written as recorded.
    let retraction = recording
        .envelopes()
        .iter()
        .position(|e| matches!(e.event, Event::MessagesRetracted { .. }))
        .unwrap();
    assert!(retraction < divergence.index);
    let unnumbered = |e: &Envelope| Envelope {
        seq: 0,
        ..e.clone()
    };
    assert!(report.actual[..divergence.index]
        .iter()
        .map(unnumbered)
        .eq(recording.envelopes()[..divergence.index]
            .iter()
            .map(unnumbered)));
    // Once diverged, no later input was issued: no second regeneration was replayed.
    assert_eq!(retractions(&report.actual).len(), 1);
}
