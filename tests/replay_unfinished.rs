//! Re-execution replay of what a plain record of finished steps could not serve: a step
//! cancelled mid-stream, a step whose stream failed, a model call retried, a turn that came in
//! over the network (entry `http`), and the session's own tools (`update_context`,
//! `search_messages`), whose results and context block writes come from the log.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use mull::core::{
    ContextBlockSource, Envelope, Event, LanguageModel, ModelError, ModelErrorKind, StreamPart,
    TurnStatus, UIMessage,
};
use mull::engine::replay::{Recording, ReplayReport};
use mull::engine::{
    Agent, ContextBlock, HookResult, OutcomeStatus, PrepareStepContext, SessionConfig, StepConfig,
    TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use support::replay::reexecute_ok;
use support::test_log::TestLog;

/// An agent on a scripted model; `before_step` can replace the system prompt, and the session
/// can be given a writable context block and the search tool.
struct Agentish {
    model: ScriptedModel,
    step_system: Option<String>,
    memory: bool,
    /// A token counter that calls every non-empty text 1,000 tokens (over any budget).
    inflated_tokens: bool,
}

impl Agentish {
    fn new(model: ScriptedModel) -> Agentish {
        Agentish {
            model,
            step_system: None,
            memory: false,
            inflated_tokens: false,
        }
    }
}

#[async_trait]
impl Agent for Agentish {
    fn name(&self) -> &str {
        "agentish"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn system_prompt(&self) -> String {
        "Answer in one line.".into()
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        if !self.memory {
            return session;
        }
        let session = session
            .with_context(
                "memory",
                ContextBlock::writable("What you know about the user.", 50),
            )
            .with_search_tool();
        if self.inflated_tokens {
            session.token_counter(|text: &str| if text.is_empty() { 0 } else { 1_000 })
        } else {
            session
        }
    }
    async fn before_step(&self, _ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        Ok(self.step_system.clone().map(|system| StepConfig {
            system: Some(system.into()),
            ..StepConfig::default()
        }))
    }
}

fn user(id: &str, text: &str) -> Vec<UIMessage> {
    vec![UIMessage::user(id, text)]
}

fn recording_of(log: &TestLog) -> Recording {
    support::replay::recording_of(&log.path, "s1")
}

/// Re-executes `recording` with `agent` into a fresh log, the model served from the recording.
async fn replay(recording: &Recording, agent: Agentish) -> ReplayReport {
    reexecute_ok(recording, Arc::new(agent)).await
}

fn assert_identical(recording: &Recording, report: &ReplayReport) {
    if let Some(divergence) = &report.divergence {
        panic!("{divergence}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
}

fn turn_statuses(events: &[Envelope]) -> Vec<TurnStatus> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnFinished { status, .. } => Some(*status),
            _ => None,
        })
        .collect()
}

/// Three turns; the second is cancelled while its stream hangs after its first text block.
fn three_turns_one_cancelled() -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Hello."))
        .step(|s| {
            s.text_deltas(["Once upon ", "a time"])
                .pause(Duration::from_secs(600))
                .text("never shown")
        })
        .step(|s| s.text("Short, then."))
        .build()
}

async fn record_cancelled_turn() -> (TestLog, Recording) {
    let log = TestLog::new();
    let agent = Arc::new(Agentish::new(three_turns_one_cancelled()));
    let session = log.open(&agent).await;
    let first = session
        .save_messages(user("u1", "Hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(first.status, OutcomeStatus::Completed);
    let mut stream = session
        .chat(user("u2", "Tell me a long story"), TurnOptions::default())
        .unwrap();
    while let Some(part) = stream.next().await {
        if matches!(part, StreamPart::TextEnd { .. }) {
            // Pressed stop while the model hangs mid-answer.
            assert!(session.cancel_chat(&stream.request_id).unwrap());
        }
    }
    let outcome = stream.finish().await.unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Aborted);
    let third = session
        .save_messages(user("u3", "A short one, then"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(third.status, OutcomeStatus::Completed);
    drop(session);
    let events = log.events().await;
    assert_eq!(
        turn_statuses(&events),
        [
            TurnStatus::Completed,
            TurnStatus::Aborted,
            TurnStatus::Completed
        ]
    );
    let recording = recording_of(&log);
    (log, recording)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cancelled_mid_stream_replays_identically() {
    let (_log, recording) = record_cancelled_turn().await;
    // The cancelled step never finished, yet the log says what it asked and what came back.
    let steps = mull::providers::replay::recorded_steps(recording.envelopes().to_vec()).unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(
        steps[1].ending,
        mull::providers::replay::StepEnding::Cancelled
    );
    assert_eq!(
        steps[1].parts.len(),
        4,
        "the first text block: start, two deltas, end"
    );

    let report = replay(&recording, Agentish::new(three_turns_one_cancelled())).await;
    assert_identical(&recording, &report);
    assert_eq!(
        turn_statuses(&report.actual),
        [
            TurnStatus::Completed,
            TurnStatus::Aborted,
            TurnStatus::Completed
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_before_step_diverges_at_the_first_step_it_configures() {
    let (_log, recording) = record_cancelled_turn().await;
    let mut agent = Agentish::new(three_turns_one_cancelled());
    agent.step_system = Some("Answer in two lines.".into());
    let report = replay(&recording, agent).await;
    let divergence = report.divergence.expect("the changed hook must diverge");
    let first_configured = recording
        .envelopes()
        .iter()
        .find(|e| e.kind() == "step_configured")
        .unwrap();
    assert_eq!(divergence.seq, first_configured.seq);
    let differences = divergence.differences();
    assert!(
        differences.contains(
            &r#"event.system: "Answer in one line." ≠ "Answer in two lines.""#.to_owned()
        ),
        "{differences:?}"
    );
    assert!(
        differences.iter().any(|d| d.starts_with("event.overrides"))
            && differences
                .iter()
                .any(|d| d.starts_with("event.request_hash")),
        "{differences:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_hook_in_the_cancelled_turn_is_named_there() {
    let (_log, recording) = record_cancelled_turn().await;
    // Only the cancelled turn's prompt changes: everything before it must replay as recorded.
    struct SecondTurnOnly(Agentish);
    #[async_trait]
    impl Agent for SecondTurnOnly {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn model(&self) -> Arc<dyn LanguageModel> {
            self.0.model()
        }
        fn system_prompt(&self) -> String {
            self.0.system_prompt()
        }
        async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
            let story = ctx.messages.len() == 3;
            Ok(story.then(|| StepConfig {
                system: Some("Stories are one line.".into()),
                ..StepConfig::default()
            }))
        }
    }
    let report = reexecute_ok(
        &recording,
        Arc::new(SecondTurnOnly(Agentish::new(three_turns_one_cancelled()))),
    )
    .await;
    let divergence = report.divergence.expect("the changed hook must diverge");
    let configured: Vec<&Envelope> = recording
        .envelopes()
        .iter()
        .filter(|e| e.kind() == "step_configured")
        .collect();
    assert_eq!(divergence.seq, configured[1].seq, "{divergence}");
    assert!(divergence.to_string().contains("Stories are one line."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_failed_mid_answer_and_a_retried_call_replay_identically() {
    let model = || {
        ScriptedModel::builder("scripted-1")
            .step(|s| {
                s.text_deltas(["Half an ", "answer"]).fail(ModelError::new(
                    ModelErrorKind::Transient,
                    "connection reset by peer",
                ))
            })
            .refuse(ModelError::new(ModelErrorKind::Transient, "overloaded"))
            .step(|s| s.text("Second time lucky."))
            .build()
    };
    let log = TestLog::new();
    let agent = Arc::new(Agentish::new(model()));
    let options = mull::engine::SessionOptions::deterministic("s1")
        .with_retry_base_delay(Duration::from_millis(5));
    let session = mull::engine::Session::open(&log.log, agent, options)
        .await
        .unwrap();
    let failed = session
        .save_messages(user("u1", "Hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(failed.status, OutcomeStatus::Error);
    let retried = session
        .save_messages(user("u2", "Again?"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(retried.status, OutcomeStatus::Completed);
    drop(session);
    let events = log.events().await;
    assert!(events.iter().any(|e| e.kind() == "model_retried"));
    let recording = recording_of(&log);

    let report = replay(&recording, Agentish::new(model())).await;
    assert_identical(&recording, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_came_in_over_http_replays_identically() {
    let model = || {
        ScriptedModel::builder("scripted-1")
            .step(|s| s.text("Hello from the server."))
            .build()
    };
    let log = TestLog::new();
    let session = log.open(&Arc::new(Agentish::new(model()))).await;
    // What the HTTP and WebSocket routes do with a request's new user message and its body.
    let body = serde_json::json!({"trigger": "submit-message", "tenant": "acme"});
    let mut stream = session
        .chat_http(user("u1", "Hi"), TurnOptions::with_body(body.clone()))
        .unwrap();
    while stream.next().await.is_some() {}
    assert_eq!(
        stream.finish().await.unwrap().status,
        OutcomeStatus::Completed
    );
    drop(session);
    let events = log.events().await;
    assert!(events.iter().any(|e| matches!(
        &e.event,
        Event::TurnStarted { entry: mull::core::EntryPath::Http, body: b, .. } if *b == body
    )));
    let recording = recording_of(&log);

    let report = replay(&recording, Agentish::new(model())).await;
    assert_identical(&recording, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_own_tools_are_served_from_the_log_and_their_writes_compared() {
    let model = || {
        ScriptedModel::builder("scripted-1")
            .step(|s| {
                s.tool_call(
                    "call_mem",
                    "update_context",
                    serde_json::json!({"block": "memory", "content": "Likes tea."}),
                )
                .tool_call(
                    "call_find",
                    "search_messages",
                    serde_json::json!({"query": "tea"}),
                )
            })
            .step(|s| s.text("Noted: tea."))
            .build()
    };
    let log = TestLog::new();
    let mut recorder = Agentish::new(model());
    recorder.memory = true;
    let session = log.open(&Arc::new(recorder)).await;
    let outcome = session
        .save_messages(user("u1", "I like tea."), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Completed, "{outcome:?}");
    drop(session);
    let events = log.events().await;
    let writes = |events: &[Envelope]| {
        events
            .iter()
            .filter(|e| {
                matches!(
                    &e.event,
                    Event::ContextBlockUpdated {
                        source: ContextBlockSource::Model,
                        ..
                    }
                )
            })
            .count()
    };
    assert_eq!(writes(&events), 1);
    let finished_ok = |events: &[Envelope], tool: &str| {
        events.iter().any(|e| {
            matches!(&e.event, Event::ToolCallFinished { tool: t, success: true, .. } if t == tool)
        })
    };
    assert!(finished_ok(&events, "update_context"));
    assert!(finished_ok(&events, "search_messages"));
    let recording = recording_of(&log);

    // Today's token counter would refuse the write (1,000 tokens > 50): had update_context run
    // again, its result would differ. Served from the log, the replay writes what was recorded,
    // the block write exactly once.
    let mut replayer = Agentish::new(model());
    replayer.memory = true;
    replayer.inflated_tokens = true;
    let report = replay(&recording, replayer).await;
    assert_identical(&recording, &report);
    assert_eq!(writes(&report.actual), 1);
}
