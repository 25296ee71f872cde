//! The Messages provider against a local server speaking Anthropic's streaming events.

mod common;

use std::collections::BTreeMap;

use common::{collect, one_read, say_hi, serve_sse, stream_from_sse};
use mull_core::{
    CallSettings, CallWarning, FinishReason, LanguageModel, ModelContent, ModelError,
    ModelErrorKind, ModelMessage, ModelRequest, ModelRole, StreamPart, ToolChoice, ToolSpec, Usage,
};
use mull_providers::anthropic::{AnthropicConfig, AnthropicModel, DEFAULT_MAX_TOKENS};
use mull_providers::Secret;
use serde_json::{json, Value};

fn event(data: Value) -> String {
    let name = data["type"].as_str().unwrap_or("message").to_owned();
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start() -> String {
    event(json!({"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 1}
    }}))
}

fn delta(index: u64, delta: Value) -> String {
    event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn full_stream() -> String {
    [
        message_start(),
        event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})),
        "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_owned(),
        delta(0, json!({"type": "thinking_delta", "thinking": "The user wants rüst."})),
        delta(0, json!({"type": "signature_delta", "signature": "EqQBCgIYAh"})),
        event(json!({"type": "content_block_stop", "index": 0})),
        event(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
        delta(1, json!({"type": "text_delta", "text": "Searching — "})),
        delta(1, json!({"type": "text_delta", "text": "now."})),
        event(json!({"type": "content_block_stop", "index": 1})),
        event(json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}})),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(2, json!({"type": "input_json_delta", "partial_json": "{\"q\": \"ru"})),
        delta(2, json!({"type": "input_json_delta", "partial_json": "st\"}"})),
        event(json!({"type": "content_block_stop", "index": 2})),
        event(json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "clock", "input": {}}})),
        event(json!({"type": "content_block_stop", "index": 3})),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 42}})),
        event(json!({"type": "message_stop"})),
    ]
    .concat()
}

fn expected_full() -> Vec<StreamPart> {
    vec![
        StreamPart::ReasoningStart {
            id: "reasoning-0".into(),
        },
        StreamPart::ReasoningDelta {
            id: "reasoning-0".into(),
            text: "The user wants rüst.".into(),
        },
        StreamPart::ReasoningEnd {
            id: "reasoning-0".into(),
        },
        StreamPart::TextStart {
            id: "text-1".into(),
        },
        StreamPart::TextDelta {
            id: "text-1".into(),
            text: "Searching — ".into(),
        },
        StreamPart::TextDelta {
            id: "text-1".into(),
            text: "now.".into(),
        },
        StreamPart::TextEnd {
            id: "text-1".into(),
        },
        StreamPart::ToolInputStart {
            call_id: "toolu_1".into(),
            tool_name: "search".into(),
        },
        StreamPart::ToolInputDelta {
            call_id: "toolu_1".into(),
            delta: "{\"q\": \"ru".into(),
        },
        StreamPart::ToolInputDelta {
            call_id: "toolu_1".into(),
            delta: "st\"}".into(),
        },
        StreamPart::ToolInputEnd {
            call_id: "toolu_1".into(),
        },
        StreamPart::ToolCall {
            call_id: "toolu_1".into(),
            tool_name: "search".into(),
            input: "{\"q\": \"rust\"}".into(),
        },
        StreamPart::ToolInputStart {
            call_id: "toolu_2".into(),
            tool_name: "clock".into(),
        },
        StreamPart::ToolInputEnd {
            call_id: "toolu_2".into(),
        },
        StreamPart::ToolCall {
            call_id: "toolu_2".into(),
            tool_name: "clock".into(),
            input: "{}".into(),
        },
        StreamPart::Finish {
            finish_reason: FinishReason::ToolCalls,
            raw_finish_reason: Some("tool_use".into()),
            usage: Usage {
                input_tokens: Some(115),
                output_tokens: Some(42),
                total_tokens: Some(157),
                reasoning_tokens: None,
                cached_input_tokens: Some(100),
            },
            provider_metadata: Some(json!({"anthropic": {
                "cache_creation_input_tokens": 5,
                "cache_read_input_tokens": 100,
                "cacheCreationInputTokens": 5,
                "cacheReadInputTokens": 100,
                "thinking_signatures": {"reasoning-0": "EqQBCgIYAh"}
            }})),
        },
    ]
}

fn model(base_url: &str) -> AnthropicModel {
    let mut config = AnthropicConfig::new("claude-sonnet-4-5", Secret::new("sk-ant-test-secret"));
    config.base_url = base_url.to_owned();
    AnthropicModel::new(config).expect("model")
}

async fn run(wire: String, piece_size: usize, cut: bool) -> (Vec<StreamPart>, Option<ModelError>) {
    stream_from_sse(&wire, piece_size, cut, model, say_hi()).await
}

#[tokio::test]
async fn thinking_text_and_tool_use_blocks_become_parts() {
    let (parts, error) = run(full_stream(), 8192, false).await;
    assert_eq!(error, None);
    assert_eq!(parts, expected_full());
}

/// The step record's raw material: the call's warnings (settings the API has no field for),
/// the response's headers, id and model, and the cache counts under the seed's names.
#[tokio::test]
async fn the_stream_opens_with_warnings_headers_and_the_responses_id_and_model() {
    let server = serve_sse(&full_stream(), 8192, false).await;
    let mut request = say_hi();
    request.settings.seed = Some(7);
    let stream = model(&server.base_url)
        .stream(request)
        .await
        .expect("stream opens");
    let (parts, error) = common::collect_all(stream).await;
    assert_eq!(error, None);
    let StreamPart::StreamStart { warnings } = &parts[0] else {
        panic!("the stream opens with stream-start: {parts:#?}")
    };
    assert!(matches!(
        &warnings[..],
        [CallWarning::UnsupportedSetting { setting, .. }] if setting == "seed"
    ));
    let StreamPart::ResponseMetadata {
        headers: Some(headers),
        ..
    } = &parts[1]
    else {
        panic!("then the response's headers: {parts:#?}")
    };
    assert!(headers
        .get("content-type")
        .is_some_and(|v| v.starts_with("text/event-stream")));
    assert!(parts.iter().any(|p| matches!(
        p,
        StreamPart::ResponseMetadata { id: Some(id), model_id: Some(m), .. }
            if id == "msg_1" && m == "claude-sonnet-4-5"
    )));
    // Neither reaches a content reader.
    assert_eq!(
        parts
            .into_iter()
            .filter(|p| !p.is_call_metadata())
            .collect::<Vec<_>>(),
        expected_full()
    );
}

#[tokio::test]
async fn events_split_at_awkward_byte_boundaries_decode_the_same() {
    for size in [3, 11] {
        let (parts, error) = run(full_stream(), size, false).await;
        assert_eq!(error, None, "piece size {size}");
        assert_eq!(parts, expected_full(), "piece size {size}");
    }
}

#[tokio::test]
async fn an_error_event_mid_stream_ends_it_with_its_kind() {
    let error_data =
        r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
    let wire = [
        message_start(),
        event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        delta(0, json!({"type": "text_delta", "text": "Hel"})),
        format!("event: error\ndata: {error_data}\n\n"),
        delta(0, json!({"type": "text_delta", "text": "lo"})),
    ]
    .concat();
    let (parts, error) = run(wire, 8192, false).await;
    assert_eq!(
        parts,
        vec![
            StreamPart::TextStart {
                id: "text-0".into()
            },
            StreamPart::TextDelta {
                id: "text-0".into(),
                text: "Hel".into()
            },
        ]
    );
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::Transient);
    assert_eq!(
        error.message,
        "anthropic: error event mid-stream: Overloaded"
    );
    assert_eq!(error.body.as_deref(), Some(error_data));
}

#[tokio::test]
async fn a_connection_cut_mid_stream_is_transient() {
    let wire = [message_start(), event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))].concat();
    let (parts, error) = run(wire, 8192, true).await;
    assert_eq!(
        parts,
        vec![StreamPart::TextStart {
            id: "text-0".into()
        }]
    );
    assert_eq!(error.map(|e| e.kind), Some(ModelErrorKind::Transient));
}

#[tokio::test]
async fn a_stream_without_message_stop_is_a_protocol_error() {
    let wire = [
        message_start(),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}})),
    ]
    .concat();
    let (parts, error) = run(wire, 8192, false).await;
    assert_eq!(parts, vec![]);
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::Protocol);
    assert_eq!(error.message, "anthropic: stream ended before message_stop");
}

#[tokio::test]
async fn malformed_json_and_unknown_blocks() {
    let (_, error) = run([message_start(), "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0,\n\n".to_owned()].concat(), 8192, false).await;
    assert_eq!(error.map(|e| e.kind), Some(ModelErrorKind::Protocol));

    let (_, error) = run(
        [
            message_start(),
            delta(4, json!({"type": "text_delta", "text": "orphan"})),
        ]
        .concat(),
        8192,
        false,
    )
    .await;
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::Protocol);
    assert!(
        error.message.contains("block 4, which was never started"),
        "{}",
        error.message
    );

    // Block and event types this build does not know are passed over.
    let wire = [
        message_start(),
        event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}}})),
        delta(0, json!({"type": "input_json_delta", "partial_json": "{}"})),
        event(json!({"type": "content_block_stop", "index": 0})),
        event(json!({"type": "brand_new_event"})),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}})),
        event(json!({"type": "message_stop"})),
    ]
    .concat();
    let (parts, error) = run(wire, 8192, false).await;
    assert_eq!(error, None);
    assert!(
        matches!(
            parts.as_slice(),
            [StreamPart::Finish {
                finish_reason: FinishReason::Stop,
                ..
            }]
        ),
        "{parts:?}"
    );
}

#[tokio::test]
async fn every_request_field_reaches_the_messages_body() {
    let wire = [message_start(), event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})), event(json!({"type": "message_stop"}))].concat();
    let server = serve_sse(&wire, 8192, false).await;
    let mut headers = BTreeMap::new();
    headers.insert("anthropic-beta".to_owned(), "some-beta".to_owned());
    let request = ModelRequest {
        system: Some("Be brief.".into()),
        messages: vec![
            ModelMessage::text(ModelRole::System, "Use metric units."),
            ModelMessage {
                role: ModelRole::User,
                content: vec![
                    ModelContent::Text {
                        text: "Weather?".into(),
                    },
                    ModelContent::File {
                        media_type: "image/jpeg".into(),
                        url: "data:image/jpeg;base64,/9j/".into(),
                    },
                ],
            },
            ModelMessage {
                role: ModelRole::Assistant,
                content: vec![
                    ModelContent::Reasoning {
                        text: "need the tool".into(),
                    },
                    ModelContent::Text {
                        text: "Checking.".into(),
                    },
                    ModelContent::ToolCall {
                        call_id: "toolu_1".into(),
                        tool_name: "weather".into(),
                        input: json!({"city": "Oslo"}),
                    },
                ],
            },
            ModelMessage {
                role: ModelRole::Tool,
                content: vec![ModelContent::ToolResult {
                    call_id: "toolu_1".into(),
                    tool_name: "weather".into(),
                    output: json!("timeout"),
                    is_error: true,
                }],
            },
            ModelMessage::text(ModelRole::User, "Try again."),
        ],
        tools: vec![ToolSpec {
            name: "weather".into(),
            description: "Weather by city".into(),
            input_schema: json!({"type": "object"}).into(),
        }],
        tool_choice: ToolChoice::Required,
        settings: CallSettings {
            max_output_tokens: Some(1000),
            temperature: Some(0.3),
            top_p: Some(0.8),
            top_k: Some(20),
            presence_penalty: Some(0.5),
            frequency_penalty: None,
            stop_sequences: vec!["\n\nHuman:".into()],
            seed: Some(1),
            headers,
            provider_options: Some(json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})),
        },
        output_schema: None,
    };
    let (_, error) = collect(
        model(&server.base_url)
            .stream(request)
            .await
            .expect("stream"),
    )
    .await;
    assert_eq!(error, None);
    let received = &server.received()[0];
    assert_eq!(received.path, "/v1/messages");
    assert_eq!(received.headers["x-api-key"], "sk-ant-test-secret");
    assert_eq!(received.headers["anthropic-version"], "2023-06-01");
    assert_eq!(received.headers["anthropic-beta"], "some-beta");
    assert_eq!(
        received.body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1000,
            "system": "Be brief.\n\nUse metric units.",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Weather?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "timeout", "is_error": true},
                    {"type": "text", "text": "Try again."}
                ]}
            ],
            "tools": [{"name": "weather", "description": "Weather by city", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "temperature": 0.3,
            "top_p": 0.8,
            "top_k": 20,
            "stop_sequences": ["\n\nHuman:"],
            "stream": true,
            "thinking": {"type": "enabled", "budget_tokens": 1024}
        })
    );
}

#[tokio::test]
async fn max_tokens_defaults_when_unset() {
    let body = mull_providers::anthropic::request_body("m", &ModelRequest::default());
    assert_eq!(body["max_tokens"], json!(DEFAULT_MAX_TOKENS));
    assert!(body.get("system").is_none());
    assert!(body.get("tools").is_none());
}

/// Decodes `wire` with the pure decoder entry point, in one read.
async fn decode(wire: &str) -> (Vec<StreamPart>, Option<mull_core::ModelError>) {
    collect(mull_providers::anthropic::decode_sse(
        "anthropic",
        one_read(wire),
    ))
    .await
}

#[tokio::test]
async fn the_pure_decoder_matches_the_client() {
    let (parts, error) = decode(&full_stream()).await;
    assert_eq!(error, None);
    assert_eq!(parts, expected_full());
}

#[tokio::test]
async fn known_events_of_the_wrong_shape_are_protocol_errors_naming_the_field() {
    let text_block = event(
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    );
    let cases = [
        (
            delta(0, json!("not an object")),
            "`content_block_delta` event: `delta` should be an object, found a string",
        ),
        (
            event(json!({"type": "content_block_delta", "index": 0})),
            "`content_block_delta` event: `delta` (an object) is missing",
        ),
        (
            delta(0, json!({"text": "no type"})),
            "`delta.type` (a string) is missing",
        ),
        (
            delta(0, json!({"type": "text_delta", "text": 5})),
            "`delta.text` should be a string, found a number",
        ),
        (
            delta(0, json!({"type": "text_delta"})),
            "`delta.text` (a string) is missing",
        ),
        (
            event(json!({"type": "content_block_stop", "index": "0"})),
            "`index` should be an integer, found a string",
        ),
        (
            event(
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "name": "x"}}),
            ),
            "`content_block.id` (a string) is missing",
        ),
        (
            event(json!({"type": "content_block_start", "index": 1, "content_block": []})),
            "`content_block` should be an object",
        ),
        (
            event(json!({"type": "message_delta", "delta": {"stop_reason": 1}})),
            "`delta.stop_reason` should be a string",
        ),
        (
            event(json!({"type": "message_delta", "delta": {}, "usage": {"output_tokens": "5"}})),
            "`usage.output_tokens` should be an integer",
        ),
        (
            "event: message_stop\ndata: [1]\n\n".to_owned(),
            "data should be an object, found an array",
        ),
    ];
    for (bad, what) in cases {
        let wire = [
            message_start(),
            text_block.clone(),
            bad.clone(),
            event(json!({"type": "content_block_stop", "index": 0})),
            event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})),
            event(json!({"type": "message_stop"})),
        ]
        .concat();
        let (parts, error) = decode(&wire).await;
        assert_eq!(
            parts,
            vec![StreamPart::TextStart {
                id: "text-0".into()
            }],
            "{bad}"
        );
        let error = error.unwrap_or_else(|| panic!("{bad}: no error"));
        assert_eq!(error.kind, ModelErrorKind::Protocol, "{bad}");
        assert!(
            error.message.starts_with("anthropic: malformed `") && error.message.contains(what),
            "{bad}: {}",
            error.message
        );
    }
}

#[tokio::test]
async fn unknown_delta_types_and_extra_fields_are_not_errors() {
    let wire = [
        message_start(),
        event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "", "citations": null}})),
        delta(0, json!({"type": "citations_delta", "citation": {"any": "shape"}})),
        delta(0, json!({"type": "text_delta", "text": "hi", "extra": [1]})),
        event(json!({"type": "content_block_stop", "index": 0, "extra": true})),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 2, "server_tool_use": {}}})),
        event(json!({"type": "message_stop"})),
    ]
    .concat();
    let (parts, error) = decode(&wire).await;
    assert_eq!(error, None);
    assert!(parts.contains(&StreamPart::TextDelta {
        id: "text-0".into(),
        text: "hi".into()
    }));
}

/// Structured output on the Messages API: the schema goes out as one forced `json` tool (the
/// step's own tools are not offered), and that tool's streamed input comes back as the answer's
/// text, ending the step with `stop` rather than a tool call. The stream is the documented
/// shape of a forced `tool_use` answer.
#[tokio::test]
async fn structured_output_is_a_forced_json_tool_whose_input_is_the_answer() {
    let wire = [
        message_start(),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_01", "name": "json", "input": {}}})),
        delta(0, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(0, json!({"type": "input_json_delta", "partial_json": "{\"city\": \"Os"})),
        delta(0, json!({"type": "input_json_delta", "partial_json": "lo\", \"high_c\": 4}"})),
        event(json!({"type": "content_block_stop", "index": 0})),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 17}})),
        event(json!({"type": "message_stop"})),
    ]
    .concat();
    let server = serve_sse(&wire, 8192, false).await;
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "high_c": {"type": "number"}},
        "required": ["city", "high_c"]
    });
    let mut request = say_hi();
    request.output_schema = Some(schema.clone());
    request.tools = vec![ToolSpec {
        name: "weather".into(),
        description: "Weather by city".into(),
        input_schema: std::sync::Arc::new(json!({"type": "object"})),
    }];
    let stream = model(&server.base_url)
        .stream(request)
        .await
        .expect("stream opens");
    let (parts, error) = common::collect_all(stream).await;
    assert_eq!(error, None);
    let body = &server.received()[0].body;
    assert_eq!(
        body["tools"],
        json!([{"name": "json", "description": "Respond with a JSON object.", "input_schema": schema}])
    );
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "json"}));
    // The schema is sent, so it is no longer a warning.
    assert!(matches!(
        parts.first(),
        Some(StreamPart::StreamStart { warnings }) if warnings.is_empty()
    ));
    let content: Vec<StreamPart> = parts
        .into_iter()
        .filter(|p| !p.is_call_metadata())
        .collect();
    let text: String = content
        .iter()
        .filter_map(|p| match p {
            StreamPart::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let answer: Value = serde_json::from_str(&text).expect("the answer is the JSON");
    assert_eq!(answer, json!({"city": "Oslo", "high_c": 4}));
    assert!(matches!(
        content.first(),
        Some(StreamPart::TextStart { .. })
    ));
    assert!(!content.iter().any(|p| matches!(
        p,
        StreamPart::ToolCall { .. } | StreamPart::ToolInputStart { .. }
    )));
    assert!(matches!(
        content.last(),
        Some(StreamPart::Finish { finish_reason: FinishReason::Stop, raw_finish_reason: Some(raw), .. })
            if raw == "tool_use"
    ));
}
