//! The replay model serves recorded model output by request hash and explains misses.

mod common;

use common::collect;
use futures::StreamExt;
use mull_core::{
    Clock, Envelope, Event, FinishReason, FixedClock, LanguageModel, ModelError, ModelErrorKind,
    ModelErrorRecord, ModelMessage, ModelRequest, ModelRole, RequestSummary, StepReport,
    StreamPart, ToolChoice, TurnStatus, Usage, EVENT_VERSION,
};
use mull_providers::replay::{recorded_steps, RecordedRetry, ReplayError, ReplayModel, StepEnding};
use serde_json::json;

/// Builds a log the way the engine writes one.
struct LogBuilder {
    clock: FixedClock,
    envelopes: Vec<Envelope>,
}

impl LogBuilder {
    fn new() -> Self {
        Self {
            clock: FixedClock::at_fixture_epoch(),
            envelopes: Vec::new(),
        }
    }

    fn push(&mut self, turn: &str, event: Event) {
        self.envelopes.push(Envelope {
            seq: self.envelopes.len() as u64 + 1,
            session_id: "s1".into(),
            turn_id: Some(turn.into()),
            at: self.clock.now(),
            v: EVENT_VERSION,
            event,
        });
    }

    fn chunk(&mut self, turn: &str, step: u32, part: StreamPart) {
        self.push(
            turn,
            Event::Chunk {
                step,
                part,
                original: None,
            },
        );
    }

    fn finish(&mut self, turn: &str, step: u32, request: &ModelRequest) {
        self.push(
            turn,
            Event::StepFinished {
                record: Box::new(StepReport {
                    step,
                    model_id: "gpt-4o-mini".into(),
                    request: json!({"hash": request.canonical_hash(), "system": request.system, "messages": request.messages}),
                    ..StepReport::default()
                }),
            },
        );
    }
}

fn request(text: &str) -> ModelRequest {
    ModelRequest {
        system: Some("Be brief.".into()),
        messages: vec![ModelMessage::text(ModelRole::User, text)],
        ..ModelRequest::default()
    }
}

fn text(id: &str, t: &str) -> StreamPart {
    StreamPart::TextDelta {
        id: id.into(),
        text: t.into(),
    }
}

fn finish(reason: FinishReason) -> StreamPart {
    StreamPart::Finish {
        finish_reason: reason,
        raw_finish_reason: None,
        usage: Usage {
            input_tokens: Some(5),
            ..Usage::default()
        },
        provider_metadata: None,
    }
}

fn recorded_log() -> LogBuilder {
    let mut log = LogBuilder::new();
    let first = request("what time is it?");
    // Turn 1, step 0: a tool call, its (engine-made) result, then a retry-free finish.
    log.push("t1", Event::StepStarted { step: 0 });
    log.chunk(
        "t1",
        0,
        StreamPart::ToolInputStart {
            call_id: "c1".into(),
            tool_name: "clock".into(),
        },
    );
    log.chunk(
        "t1",
        0,
        StreamPart::ToolInputEnd {
            call_id: "c1".into(),
        },
    );
    log.chunk(
        "t1",
        0,
        StreamPart::ToolCall {
            call_id: "c1".into(),
            tool_name: "clock".into(),
            input: "{}".into(),
        },
    );
    log.chunk("t1", 0, finish(FinishReason::ToolCalls));
    log.chunk(
        "t1",
        0,
        StreamPart::ToolResult {
            call_id: "c1".into(),
            tool_name: "clock".into(),
            output: json!("noon"),
            preliminary: false,
        },
    );
    log.finish("t1", 0, &first);
    // Turn 1, step 1: a failed attempt, a retry, and the attempt that counted; a transformed chunk.
    log.push("t1", Event::StepStarted { step: 1 });
    log.chunk("t1", 1, StreamPart::TextStart { id: "x".into() });
    log.push(
        "t1",
        Event::ModelRetried {
            step: 1,
            attempt: 1,
            error: "overloaded".into(),
            delay_ms: 10,
        },
    );
    log.chunk("t1", 1, StreamPart::TextStart { id: "a".into() });
    log.push(
        "t1",
        Event::Chunk {
            step: 1,
            part: text("a", "NOON"),
            original: Some(Box::new(text("a", "noon"))),
        },
    );
    log.chunk("t1", 1, StreamPart::TextEnd { id: "a".into() });
    log.chunk("t1", 1, finish(FinishReason::Stop));
    let second = request("it is noon");
    log.finish("t1", 1, &second);
    // Turn 2 repeats the first request with a different answer.
    log.push("t2", Event::StepStarted { step: 0 });
    log.chunk("t2", 0, StreamPart::TextStart { id: "b".into() });
    log.chunk("t2", 0, text("b", "again?"));
    log.chunk("t2", 0, StreamPart::TextEnd { id: "b".into() });
    log.chunk("t2", 0, finish(FinishReason::Stop));
    log.finish("t2", 0, &first);
    log
}

#[test]
fn recorded_steps_keep_only_what_the_model_emitted() {
    let steps = recorded_steps(recorded_log().envelopes).expect("steps");
    assert_eq!(steps.len(), 3);
    assert_eq!(
        steps[0].parts.len(),
        4,
        "the tool result is the engine's, not the model's"
    );
    assert_eq!(
        steps[1].parts,
        vec![
            StreamPart::TextStart { id: "a".into() },
            text("a", "noon"),
            StreamPart::TextEnd { id: "a".into() },
            finish(FinishReason::Stop),
        ],
        "the failed attempt's parts are dropped and the untransformed part served"
    );
    assert_eq!(
        steps[1].retries,
        vec![RecordedRetry {
            error: "overloaded".into(),
            delay_ms: 10
        }]
    );
    assert!(steps.iter().all(|s| s.ending == StepEnding::Finished));
    assert_eq!(steps[2].seq, 21);
}

#[tokio::test]
async fn serves_steps_by_hash_first_in_first_out() {
    let model = ReplayModel::from_envelopes(recorded_log().envelopes).expect("model");
    assert_eq!(
        (model.provider(), model.model_id()),
        ("replay", "gpt-4o-mini")
    );
    assert_eq!(model.remaining(), 3);

    // The recorded failed attempt comes first, as a retryable error with the recorded delay.
    let retry = model
        .stream(request("it is noon"))
        .await
        .err()
        .expect("the recorded failed attempt");
    assert!(retry.is_retryable());
    assert_eq!(retry.message, "overloaded");
    assert_eq!(
        retry.retry_after,
        Some(std::time::Duration::from_millis(10))
    );
    let (parts, error) = collect(model.stream(request("it is noon")).await.expect("hit")).await;
    assert_eq!(error, None);
    assert_eq!(parts[1], text("a", "noon"));

    let (parts, _) = collect(
        model
            .stream(request("what time is it?"))
            .await
            .expect("hit"),
    )
    .await;
    assert!(matches!(parts[2], StreamPart::ToolCall { .. }), "{parts:?}");
    let (parts, _) = collect(
        model
            .stream(request("what time is it?"))
            .await
            .expect("hit"),
    )
    .await;
    assert_eq!(parts[1], text("b", "again?"));
    assert_eq!(model.remaining(), 0);

    let error = model
        .stream(request("what time is it?"))
        .await
        .err()
        .expect("exhausted");
    assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
    assert!(
        error.message.contains("already been served"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn a_miss_shows_a_diff_against_the_nearest_recorded_request() {
    let model = ReplayModel::from_envelopes(recorded_log().envelopes).expect("model");
    let mut changed = request("it is noon");
    changed.system = Some("Be verbose.".into());
    let error = model.stream(changed.clone()).await.err().expect("miss");
    assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
    let message = error.message;
    assert!(
        message.contains(&format!(
            "no recorded step matches request {}",
            changed.canonical_hash()
        )),
        "{message}"
    );
    assert!(
        message.contains("nearest recorded request: seq 15, session s1, step 1"),
        "{message}"
    );
    assert!(
        message.contains(r#"system: "Be brief." ≠ "Be verbose.""#),
        "{message}"
    );
    assert!(
        !message.contains("messages["),
        "equal fields are not listed: {message}"
    );
    assert!(
        !message.contains("tools"),
        "fields the log did not record are not listed: {message}"
    );
}

#[test]
fn a_step_without_a_hash_is_refused_with_its_seq() {
    let mut log = LogBuilder::new();
    log.push("t1", Event::StepStarted { step: 0 });
    log.push(
        "t1",
        Event::StepFinished {
            record: Box::default(),
        },
    );
    assert_eq!(
        ReplayModel::from_envelopes(log.envelopes).err(),
        Some(ReplayError::MissingHash {
            seq: 2,
            session_id: "s1".into(),
            step: 0
        })
    );
    assert_eq!(
        ReplayModel::from_envelopes(Vec::new()).err(),
        Some(ReplayError::NoSteps)
    );
}

fn configured(log: &mut LogBuilder, turn: &str, request: &ModelRequest) {
    log.push(turn, Event::StepStarted { step: 0 });
    log.push(
        turn,
        Event::StepConfigured {
            step: 0,
            model_id: "gpt-4o-mini".into(),
            active_tools: None,
            tool_choice: ToolChoice::Auto,
            system: request.system.clone(),
            message_count: 1,
            overrides: Vec::new(),
            request_hash: Some(request.canonical_hash()),
        },
    );
    log.chunk(turn, 0, StreamPart::TextStart { id: "t".into() });
    log.chunk(turn, 0, text("t", "Half"));
}

fn turn_finished(status: TurnStatus, error: Option<&str>) -> Event {
    Event::TurnFinished {
        request_id: "r".into(),
        status,
        error: error.map(str::to_owned),
        steps: 0,
        usage: Usage::default(),
        response_owed: false,
    }
}

#[tokio::test]
async fn steps_cut_short_are_served_with_their_recorded_ending() {
    let mut log = LogBuilder::new();
    configured(&mut log, "cancelled", &request("one"));
    log.push("cancelled", turn_finished(TurnStatus::Aborted, None));
    configured(&mut log, "failed", &request("two"));
    log.push(
        "failed",
        turn_finished(TurnStatus::Error, Some("connection reset by peer")),
    );
    configured(&mut log, "cut", &request("three"));
    // A failure whose model error the log kept (on_chat_error rewrote what callers saw); as
    // the engine writes it, `turn_failed` comes after `turn_finished`.
    configured(&mut log, "overloaded", &request("four"));
    let overloaded = ModelError {
        status: Some(529),
        retry_after: Some(std::time::Duration::from_millis(1500)),
        body: Some(r#"{"type":"error","error":{"type":"overloaded_error"}}"#.into()),
        ..ModelError::new(ModelErrorKind::Transient, "Overloaded")
    };
    log.push(
        "overloaded",
        turn_finished(
            TurnStatus::Error,
            Some("Something went wrong. Please try again."),
        ),
    );
    log.push(
        "overloaded",
        Event::TurnFailed {
            request_id: Some("r".into()),
            stage: mull_core::ErrorStage::Stream,
            messages_persisted: true,
            classification: None,
            error: "Something went wrong. Please try again.".into(),
            model_error: Some(ModelErrorRecord::from(&overloaded)),
        },
    );
    let steps = recorded_steps(log.envelopes.clone()).expect("steps");
    let endings: Vec<&StepEnding> = steps.iter().map(|s| &s.ending).collect();
    assert_eq!(
        endings,
        [
            &StepEnding::Cancelled,
            &StepEnding::Failed {
                error: ModelError::new(ModelErrorKind::Other, "connection reset by peer")
            },
            &StepEnding::Failed {
                error: overloaded.clone()
            },
            &StepEnding::Cut,
        ]
    );
    let model = ReplayModel::from_envelopes(log.envelopes).expect("model");

    // Cancelled: the recorded parts, then the stream stays open for the cancellation.
    let mut stream = model.stream(request("one")).await.expect("hit");
    for _ in 0..2 {
        assert!(stream.next().await.expect("a part").is_ok());
    }
    let waited = tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await;
    assert!(waited.is_err(), "a cancelled step does not end by itself");

    // Failed: the recorded parts, then the recorded error.
    let (parts, error) = collect(model.stream(request("two")).await.expect("hit")).await;
    assert_eq!(parts.len(), 2);
    assert_eq!(
        error.expect("the recorded failure").message,
        "connection reset by peer"
    );

    // Cut: the recorded parts, then an error that says the recording stops there.
    let (parts, error) = collect(model.stream(request("three")).await.expect("hit")).await;
    assert_eq!(parts.len(), 2);
    let message = error.expect("the recording ends").message;
    assert!(
        message.contains("ends inside step 0 of turn cut"),
        "{message}"
    );

    // Failed with the model's error kept: exactly that error, status, body and delay included.
    let (parts, error) = collect(model.stream(request("four")).await.expect("hit")).await;
    assert_eq!(parts.len(), 2);
    assert_eq!(error, Some(overloaded));
}

#[tokio::test]
async fn a_miss_against_a_summary_names_the_changed_message_and_shows_it() {
    let mut recorded = request("what time is it?");
    recorded
        .messages
        .push(ModelMessage::text(ModelRole::Assistant, "Noon."));
    recorded
        .messages
        .push(ModelMessage::text(ModelRole::User, "and in Lisbon?"));
    let mut log = LogBuilder::new();
    log.push("t1", Event::StepStarted { step: 0 });
    log.push(
        "t1",
        Event::StepFinished {
            record: Box::new(StepReport {
                step: 0,
                model_id: "gpt-4o-mini".into(),
                request: RequestSummary::of(&recorded).to_value(),
                ..StepReport::default()
            }),
        },
    );
    let model = ReplayModel::from_envelopes(log.envelopes).expect("model");
    let mut actual = recorded.clone();
    actual.messages[1] = ModelMessage::text(ModelRole::Assistant, "Half past noon.");
    actual.settings.temperature = Some(0.2);
    let message = model.stream(actual).await.err().expect("miss").message;
    assert!(
        message.contains("nearest recorded request: seq 2, session s1, step 0"),
        "{message}"
    );
    let summary_of = |r: &ModelRequest| RequestSummary::of(r).messages[1].clone();
    let mut changed = recorded.clone();
    changed.messages[1] = ModelMessage::text(ModelRole::Assistant, "Half past noon.");
    assert!(
        message.contains(&format!(
            "messages[1]: {:?} ≠ {:?}",
            summary_of(&recorded),
            summary_of(&changed)
        )),
        "{message}"
    );
    assert!(
        message.contains(r#"actual messages[1]: {"role":"assistant","content":[{"type":"text","text":"Half past noon."}]}"#),
        "{message}"
    );
    assert!(
        message.contains("settings.temperature: (absent) ≠ 0.2"),
        "{message}"
    );
    assert!(
        !message.contains("messages[0]") && !message.contains("messages[2]"),
        "unchanged messages are not listed: {message}"
    );
}
