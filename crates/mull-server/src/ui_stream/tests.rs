use super::*;
use chrono::DateTime;
use mull_core::{EntryPath, StepReport, TurnConfigRecord, Usage};
use serde_json::json;

fn env(seq: u64, event: Event) -> Envelope {
    Envelope {
        seq,
        session_id: "s".into(),
        turn_id: Some("t".into()),
        at: DateTime::from_timestamp(0, 0).unwrap_or_default(),
        v: 1,
        event,
    }
}

fn chunk(part: StreamPart) -> Event {
    Event::Chunk {
        step: 0,
        part,
        original: None,
    }
}

fn started() -> Event {
    Event::TurnStarted {
        request_id: "r".into(),
        message_id: "m1".into(),
        entry: EntryPath::Http,
        continuation: false,
        attempt: 0,
        body: json!({}),
    }
}

fn step_finished(reason: FinishReason) -> Event {
    Event::StepFinished {
        record: Box::new(StepReport {
            finish_reason: reason,
            ..StepReport::default()
        }),
    }
}

fn finished(status: TurnStatus, error: Option<&str>) -> Event {
    Event::TurnFinished {
        request_id: "r".into(),
        status,
        error: error.map(str::to_owned),
        steps: 1,
        usage: Usage::default(),
        response_owed: false,
    }
}

fn run(events: Vec<Event>, mapper: &mut UiStreamMapper) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, event) in events.into_iter().enumerate() {
        mapper.map_into(&env(i as u64 + 1, event), &mut out);
    }
    out.iter()
        .map(|c| serde_json::to_value(c).expect("encodes"))
        .collect()
}

#[test]
fn a_text_turn_maps_to_the_ai_sdk_parts() {
    let parts = run(
        vec![
            started(),
            Event::StepStarted { step: 0 },
            chunk(StreamPart::TextStart { id: "t0".into() }),
            chunk(StreamPart::TextDelta {
                id: "t0".into(),
                text: "Hel".into(),
            }),
            chunk(StreamPart::TextDelta {
                id: "t0".into(),
                text: "lo".into(),
            }),
            chunk(StreamPart::TextEnd { id: "t0".into() }),
            chunk(StreamPart::Finish {
                finish_reason: FinishReason::Stop,
                raw_finish_reason: None,
                usage: Usage::default(),
                provider_metadata: None,
            }),
            step_finished(FinishReason::Stop),
            Event::AssistantMessageSaved {
                request_id: "r".into(),
                message: mull_core::UIMessage::text("m1", mull_core::Role::Assistant, "Hello"),
            },
            finished(TurnStatus::Completed, None),
        ],
        &mut UiStreamMapper::new(),
    );
    assert_eq!(
        parts,
        vec![
            json!({"type": "start", "messageId": "m1"}),
            json!({"type": "start-step"}),
            json!({"type": "text-start", "id": "t0"}),
            json!({"type": "text-delta", "id": "t0", "delta": "Hel"}),
            json!({"type": "text-delta", "id": "t0", "delta": "lo"}),
            json!({"type": "text-end", "id": "t0"}),
            json!({"type": "finish-step"}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]
    );
}

#[test]
fn tool_calls_stream_input_then_output_once() {
    let parts = run(
        vec![
            chunk(StreamPart::ToolInputStart {
                call_id: "c1".into(),
                tool_name: "search".into(),
            }),
            chunk(StreamPart::ToolInputDelta {
                call_id: "c1".into(),
                delta: "{\"q\":".into(),
            }),
            chunk(StreamPart::ToolInputEnd {
                call_id: "c1".into(),
            }),
            chunk(StreamPart::ToolCall {
                call_id: "c1".into(),
                tool_name: "search".into(),
                input: "{\"q\":1}".into(),
            }),
            Event::ToolCallStarted {
                step: 0,
                call_id: "c1".into(),
                tool: "search".into(),
                input: json!({"q": 1}),
                client: false,
                dynamic: false,
            },
            chunk(StreamPart::ToolResult {
                call_id: "c1".into(),
                tool_name: "search".into(),
                output: json!("partial"),
                preliminary: true,
            }),
            chunk(StreamPart::ToolResult {
                call_id: "c1".into(),
                tool_name: "search".into(),
                output: json!("done"),
                preliminary: false,
            }),
            Event::ToolCallFinished {
                step: 0,
                call_id: "c1".into(),
                tool: "search".into(),
                success: true,
                output: Some(json!("done")),
                error: None,
                duration_ms: 3,
            },
            Event::ToolCallFinished {
                step: 0,
                call_id: "c2".into(),
                tool: "fail".into(),
                success: false,
                output: None,
                error: Some("boom".into()),
                duration_ms: 0,
            },
        ],
        &mut UiStreamMapper::new(),
    );
    assert_eq!(
        parts,
        vec![
            json!({"type": "tool-input-start", "toolCallId": "c1", "toolName": "search"}),
            json!({"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{\"q\":"}),
            json!({"type": "tool-input-available", "toolCallId": "c1", "toolName": "search",
                   "input": {"q": 1}}),
            json!({"type": "tool-output-available", "toolCallId": "c1", "output": "partial",
                   "preliminary": true}),
            json!({"type": "tool-output-available", "toolCallId": "c1", "output": "done"}),
            json!({"type": "tool-output-error", "toolCallId": "c2", "errorText": "boom"}),
        ]
    );
}

#[test]
fn a_tool_call_with_invalid_json_keeps_the_raw_text() {
    let parts = run(
        vec![chunk(StreamPart::ToolCall {
            call_id: "c".into(),
            tool_name: "t".into(),
            input: "{oops".into(),
        })],
        &mut UiStreamMapper::new(),
    );
    assert_eq!(parts[0]["input"], json!("{oops"));
}

fn reasoning_turn(send_reasoning: bool) -> Vec<Event> {
    vec![
        Event::TurnConfigured {
            config: Box::new(TurnConfigRecord {
                send_reasoning,
                ..TurnConfigRecord::default()
            }),
        },
        chunk(StreamPart::ReasoningStart { id: "r0".into() }),
        chunk(StreamPart::ReasoningDelta {
            id: "r0".into(),
            text: "hmm".into(),
        }),
        chunk(StreamPart::ReasoningEnd { id: "r0".into() }),
    ]
}

#[test]
fn reasoning_follows_the_turns_send_reasoning_and_the_server_switch() {
    let shown = run(reasoning_turn(true), &mut UiStreamMapper::new());
    assert_eq!(shown.len(), 3);
    assert_eq!(
        shown[1],
        json!({"type": "reasoning-delta", "id": "r0", "delta": "hmm"})
    );
    assert!(run(reasoning_turn(false), &mut UiStreamMapper::new()).is_empty());
    assert!(run(
        reasoning_turn(true),
        &mut UiStreamMapper::without_reasoning()
    )
    .is_empty());
}

#[test]
fn endings_map_to_finish_abort_and_a_single_error() {
    let mut mapper = UiStreamMapper::new();
    let aborted = run(
        vec![finished(TurnStatus::Aborted, Some("cancelled"))],
        &mut mapper,
    );
    assert_eq!(
        aborted,
        vec![json!({"type": "abort", "reason": "cancelled"})]
    );
    assert!(mapper.is_finished());

    // A failure recorded before its turn's end is reported once, and that end closes
    // the stream.
    let mut mapper = UiStreamMapper::new();
    let errored = run(
        vec![
            started(),
            chunk(StreamPart::Error {
                message: "overloaded".into(),
            }),
            Event::TurnFailed {
                request_id: Some("r".into()),
                stage: mull_core::ErrorStage::Stream,
                messages_persisted: true,
                classification: None,
                error: "overloaded".into(),
                model_error: None,
            },
            finished(TurnStatus::Error, Some("overloaded")),
        ],
        &mut mapper,
    );
    assert_eq!(
        errored,
        vec![
            json!({"type": "start", "messageId": "m1"}),
            json!({"type": "error", "errorText": "overloaded"})
        ]
    );
    assert!(mapper.is_finished());

    let completed = run(
        vec![
            step_finished(FinishReason::ToolCalls),
            finished(TurnStatus::Completed, None),
            Event::StepStarted { step: 9 },
        ],
        &mut UiStreamMapper::new(),
    );
    assert_eq!(
        completed,
        vec![
            json!({"type": "finish-step"}),
            json!({"type": "finish", "finishReason": "tool-calls"})
        ]
    );
}

#[test]
fn an_overflow_retry_replaces_the_failed_attempt_and_its_error_is_never_sent() {
    let mut mapper = UiStreamMapper::new();
    let mut parts = run(
        vec![
            started(),
            Event::StepStarted { step: 0 },
            finished(TurnStatus::Error, Some("prompt is too long")),
        ],
        &mut mapper,
    );
    assert!(!mapper.is_finished(), "the verdict is still open");
    let retried = Event::TurnStarted {
        request_id: "r".into(),
        message_id: "m2".into(),
        entry: EntryPath::Http,
        continuation: false,
        attempt: 1,
        body: json!({}),
    };
    let mut out = Vec::new();
    for (i, event) in [
        retried,
        Event::StepStarted { step: 0 },
        chunk(StreamPart::TextDelta {
            id: "t".into(),
            text: "Answer.".into(),
        }),
        step_finished(FinishReason::Stop),
        finished(TurnStatus::Completed, None),
    ]
    .into_iter()
    .enumerate()
    {
        mapper.map_into(&env(10 + i as u64, event), &mut out);
    }
    parts.extend(
        out.iter()
            .map(|c| serde_json::to_value(c).expect("encodes")),
    );
    assert_eq!(
        parts,
        vec![
            json!({"type": "start", "messageId": "m1"}),
            json!({"type": "start", "messageId": "m2"}),
            json!({"type": "start-step"}),
            json!({"type": "text-delta", "id": "t", "delta": "Answer."}),
            json!({"type": "finish-step"}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]
    );
    assert!(mapper.is_finished());
}

#[test]
fn a_failed_attempt_without_a_retry_reports_its_error_once() {
    let failure = Event::TurnFailed {
        request_id: Some("r".into()),
        stage: mull_core::ErrorStage::Stream,
        messages_persisted: true,
        classification: None,
        error: "prompt is too long".into(),
        model_error: None,
    };
    let mut mapper = UiStreamMapper::new();
    let parts = run(
        vec![
            started(),
            finished(TurnStatus::Error, Some("prompt is too long")),
            failure,
        ],
        &mut mapper,
    );
    assert_eq!(
        parts,
        vec![
            json!({"type": "start", "messageId": "m1"}),
            json!({"type": "error", "errorText": "prompt is too long"}),
        ]
    );
    assert!(mapper.is_finished());

    // A stream that ends before the verdict reports the held error.
    let mut mapper = UiStreamMapper::new();
    run(
        vec![started(), finished(TurnStatus::Error, Some("cut"))],
        &mut mapper,
    );
    let mut out = Vec::new();
    mapper.end(&mut out);
    assert_eq!(
        out,
        vec![UiChunk::Error {
            error_text: "cut".into()
        }]
    );
}

#[test]
fn a_continuation_starts_without_a_message_id() {
    let parts = run(
        vec![Event::TurnStarted {
            request_id: "r2".into(),
            message_id: "m2".into(),
            entry: EntryPath::AutoContinue,
            continuation: true,
            attempt: 0,
            body: json!({}),
        }],
        &mut UiStreamMapper::new(),
    );
    assert_eq!(parts, vec![json!({"type": "start"})]);
}

#[test]
fn sources_and_files_use_the_wire_names() {
    let parts = run(
        vec![
            chunk(StreamPart::Source {
                source: Source::Url {
                    id: "s1".into(),
                    url: "https://example.com".into(),
                    title: None,
                },
            }),
            chunk(StreamPart::File {
                media_type: "image/png".into(),
                data: "AAAA".into(),
            }),
            chunk(StreamPart::File {
                media_type: "image/png".into(),
                data: "https://example.com/a.png".into(),
            }),
        ],
        &mut UiStreamMapper::new(),
    );
    assert_eq!(
        parts,
        vec![
            json!({"type": "source-url", "sourceId": "s1", "url": "https://example.com"}),
            json!({"type": "file", "url": "data:image/png;base64,AAAA", "mediaType": "image/png"}),
            json!({"type": "file", "url": "https://example.com/a.png", "mediaType": "image/png"}),
        ]
    );
}

#[test]
fn chunks_decode_back_from_their_json() {
    let chunk = UiChunk::ToolOutputAvailable {
        tool_call_id: "c".into(),
        output: json!({"a": 1}),
        preliminary: Some(true),
    };
    let back: UiChunk = serde_json::from_str(&chunk.to_json()).expect("decodes");
    assert_eq!(back, chunk);
    assert!(UiChunk::Finish {
        finish_reason: None
    }
    .is_terminal());
    assert!(!UiChunk::StartStep.is_terminal());
}

#[test]
fn message_metadata_reaches_the_client_as_the_ai_sdks_message_metadata_chunk() {
    let mut keys = serde_json::Map::new();
    keys.insert("model".into(), json!("scripted-1"));
    let parts = run(
        vec![
            started(),
            Event::StepStarted { step: 0 },
            chunk(StreamPart::TextStart { id: "t0".into() }),
            Event::MessageMetadataUpdated {
                step: 0,
                metadata: keys,
            },
            chunk(StreamPart::TextEnd { id: "t0".into() }),
            step_finished(FinishReason::Stop),
            finished(TurnStatus::Completed, None),
        ],
        &mut UiStreamMapper::new(),
    );
    assert_eq!(
        parts,
        vec![
            json!({"type": "start", "messageId": "m1"}),
            json!({"type": "start-step"}),
            json!({"type": "text-start", "id": "t0"}),
            json!({"type": "message-metadata", "messageMetadata": {"model": "scripted-1"}}),
            json!({"type": "text-end", "id": "t0"}),
            json!({"type": "finish-step"}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]
    );
}
