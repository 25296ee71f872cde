//! The Chat Completions provider against a local server speaking the streaming wire format.

mod common;

use std::collections::BTreeMap;

use common::{collect, collect_all, one_read, say_hi, serve, serve_sse, stream_from_sse, Reply};
use mull_core::{
    CallSettings, FinishReason, LanguageModel, ModelContent, ModelErrorKind, ModelMessage,
    ModelRequest, ModelRole, StreamPart, ToolChoice, ToolSpec, Usage,
};
use mull_providers::openai::{OpenAiConfig, OpenAiModel, Streaming};
use mull_providers::Secret;
use serde_json::json;

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let data = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        "usage": null
    });
    format!("data: {data}\n\n")
}

fn usage_chunk() -> String {
    let data = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
        "choices": [],
        "usage": {
            "prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 8, "audio_tokens": 0}
        }
    });
    format!("data: {data}\n\n")
}

fn model(base_url: &str) -> OpenAiModel {
    let mut config = OpenAiConfig::openai("gpt-4o-mini", Secret::new("sk-test-secret"));
    config.base_url = base_url.to_owned();
    OpenAiModel::new(config).expect("model")
}

async fn run(
    wire: String,
    piece_size: usize,
    cut: bool,
) -> (Vec<StreamPart>, Option<mull_core::ModelError>) {
    stream_from_sse(&wire, piece_size, cut, model, say_hi()).await
}

fn tool_stream() -> String {
    [
        ": keep-alive\n\n".to_owned(),
        chunk(json!({"role": "assistant", "content": "", "refusal": null}), None),
        chunk(json!({"content": "Héllo 👋"}), None),
        chunk(json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "search", "arguments": ""}}]}), None),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":"}}]}), None),
        chunk(json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]}), None),
        ": another comment\n\n".to_owned(),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"rust\"}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat()
}

fn expected_tool_parts() -> Vec<StreamPart> {
    vec![
        StreamPart::TextStart {
            id: "text-0".into(),
        },
        StreamPart::TextDelta {
            id: "text-0".into(),
            text: "Héllo 👋".into(),
        },
        StreamPart::ToolInputStart {
            call_id: "call_a".into(),
            tool_name: "search".into(),
        },
        StreamPart::ToolInputDelta {
            call_id: "call_a".into(),
            delta: "{\"q\":".into(),
        },
        StreamPart::ToolInputStart {
            call_id: "call_b".into(),
            tool_name: "clock".into(),
        },
        StreamPart::ToolInputDelta {
            call_id: "call_b".into(),
            delta: "{}".into(),
        },
        StreamPart::ToolInputDelta {
            call_id: "call_a".into(),
            delta: "\"rust\"}".into(),
        },
        StreamPart::TextEnd {
            id: "text-0".into(),
        },
        StreamPart::ToolInputEnd {
            call_id: "call_a".into(),
        },
        StreamPart::ToolCall {
            call_id: "call_a".into(),
            tool_name: "search".into(),
            input: "{\"q\":\"rust\"}".into(),
        },
        StreamPart::ToolInputEnd {
            call_id: "call_b".into(),
        },
        StreamPart::ToolCall {
            call_id: "call_b".into(),
            tool_name: "clock".into(),
            input: "{}".into(),
        },
        StreamPart::Finish {
            finish_reason: FinishReason::ToolCalls,
            raw_finish_reason: Some("tool_calls".into()),
            usage: Usage {
                input_tokens: Some(120),
                output_tokens: Some(30),
                total_tokens: Some(150),
                reasoning_tokens: Some(8),
                cached_input_tokens: Some(64),
            },
            provider_metadata: None,
        },
    ]
}

#[tokio::test]
async fn text_and_parallel_tool_calls_assemble_by_index() {
    let (parts, error) = run(tool_stream(), 4096, false).await;
    assert_eq!(error, None);
    assert_eq!(parts, expected_tool_parts());
}

#[tokio::test]
async fn events_split_at_awkward_byte_boundaries_decode_the_same() {
    // Small pieces cut through `data:` prefixes, JSON strings, the blank-line separators and
    // the multi-byte characters of "é" and "👋".
    for size in [3, 7] {
        let (parts, error) = run(tool_stream(), size, false).await;
        assert_eq!(error, None, "piece size {size}");
        assert_eq!(parts, expected_tool_parts(), "piece size {size}");
    }
}

#[tokio::test]
async fn one_byte_reads_split_every_multibyte_character() {
    let wire = [
        chunk(json!({"content": "é👋"}), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let (parts, error) = run(wire, 1, false).await;
    assert_eq!(error, None);
    assert_eq!(
        parts[..3],
        [
            StreamPart::TextStart {
                id: "text-0".into()
            },
            StreamPart::TextDelta {
                id: "text-0".into(),
                text: "é👋".into()
            },
            StreamPart::TextEnd {
                id: "text-0".into()
            },
        ]
    );
}

#[tokio::test]
async fn reasoning_content_of_local_servers_becomes_reasoning_blocks() {
    let wire = [
        chunk(
            json!({"role": "assistant", "content": null, "reasoning_content": "Two plus"}),
            None,
        ),
        chunk(json!({"content": null, "reasoning_content": " two."}), None),
        chunk(json!({"content": "4"}), None),
        chunk(json!({}), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let (parts, error) = run(wire, 4096, false).await;
    assert_eq!(error, None);
    assert_eq!(
        parts,
        vec![
            StreamPart::ReasoningStart {
                id: "reasoning-0".into()
            },
            StreamPart::ReasoningDelta {
                id: "reasoning-0".into(),
                text: "Two plus".into()
            },
            StreamPart::ReasoningDelta {
                id: "reasoning-0".into(),
                text: " two.".into()
            },
            StreamPart::ReasoningEnd {
                id: "reasoning-0".into()
            },
            StreamPart::TextStart {
                id: "text-1".into()
            },
            StreamPart::TextDelta {
                id: "text-1".into(),
                text: "4".into()
            },
            StreamPart::TextEnd {
                id: "text-1".into()
            },
            StreamPart::Finish {
                finish_reason: FinishReason::Stop,
                raw_finish_reason: Some("stop".into()),
                usage: Usage::default(),
                provider_metadata: None,
            },
        ]
    );
}

#[tokio::test]
async fn data_after_done_is_ignored() {
    let wire = [
        chunk(json!({"content": "a"}), Some("length")),
        "data: [DONE]\n\n".to_owned(),
        "data: {not json\n\n".to_owned(),
    ]
    .concat();
    let (parts, error) = run(wire, 4096, false).await;
    assert_eq!(error, None);
    assert!(matches!(
        parts.last(),
        Some(StreamPart::Finish {
            finish_reason: FinishReason::Length,
            ..
        })
    ));
}

#[tokio::test]
async fn an_in_band_error_ends_the_stream_with_its_kind_and_body() {
    let error_line = r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#;
    let wire = [
        chunk(json!({"content": "par"}), None),
        format!("data: {error_line}\n\n"),
        chunk(json!({"content": "tial"}), None),
    ]
    .concat();
    let (parts, error) = run(wire, 4096, false).await;
    assert_eq!(
        parts,
        vec![
            StreamPart::TextStart {
                id: "text-0".into()
            },
            StreamPart::TextDelta {
                id: "text-0".into(),
                text: "par".into()
            },
        ]
    );
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::Transient);
    assert!(
        error.message.contains("The server had an error"),
        "{}",
        error.message
    );
    assert_eq!(error.body.as_deref(), Some(error_line));
}

#[tokio::test]
async fn an_in_band_overflow_error_stays_classifiable() {
    let wire = "data: {\"error\":{\"message\":\"This model's maximum context length is 8192 tokens\",\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}}\n\n".to_owned();
    let (_, error) = run(wire, 4096, false).await;
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
    assert!(mull_core::default_context_overflow_classifier(&error).is_some());
}

#[tokio::test]
async fn a_connection_cut_mid_stream_is_transient() {
    let wire = chunk(json!({"content": "half"}), None);
    let (parts, error) = run(wire, 4096, true).await;
    assert_eq!(parts.len(), 2, "{parts:?}");
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::Transient, "{}", error.message);
    assert!(error.message.contains("mid-stream"), "{}", error.message);
}

#[tokio::test]
async fn malformed_json_is_a_protocol_error_naming_the_data() {
    let wire = [
        chunk(json!({"content": "ok"}), None),
        "data: {\"choices\": [\n\n".to_owned(),
    ]
    .concat();
    let (parts, error) = run(wire, 4096, false).await;
    assert_eq!(parts.len(), 2);
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::Protocol);
    assert!(error.message.contains("invalid JSON"), "{}", error.message);
    assert!(
        error.message.contains("{\"choices\": ["),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn a_stream_without_a_finish_is_probed_once_without_streaming() {
    let wire = chunk(json!({"content": "and then"}), None);
    let server = serve_sse(&wire, 4096, false).await;
    let stream = model(&server.base_url)
        .stream(say_hi())
        .await
        .expect("stream");
    let (parts, error) = collect(stream).await;
    assert_eq!(parts.len(), 2);
    let error = error.expect("error");
    // The probe was answered 200: the failure did not repeat, so a retry may help.
    assert_eq!(error.kind, ModelErrorKind::Transient);
    assert!(
        error
            .message
            .contains("a stream cut short: no finish_reason or [DONE]")
            && error.message.contains("without streaming succeeded"),
        "{}",
        error.message
    );
    let received = server.received();
    assert_eq!(received.len(), 2, "the stream, then one probe");
    assert_eq!(received[0].body["stream"], json!(true));
    assert_eq!(received[1].body["stream"], json!(false));
    assert!(received[1].body.get("stream_options").is_none());
    assert_eq!(received[1].body["max_completion_tokens"], json!(1));
    assert_eq!(received[1].body["messages"], received[0].body["messages"]);
}

#[tokio::test]
async fn an_empty_200_is_explained_by_the_probe_refusal_and_classified() {
    let overflow = r#"{"error":{"message":"Requested tokens (5000) exceed context window of 4096","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    let server = serve(Reply::Sequence(vec![
        Reply::Sse {
            pieces: Vec::new(),
            cut: false,
        },
        Reply::Status {
            status: 400,
            headers: Vec::new(),
            body: overflow.into(),
        },
    ]))
    .await;
    let stream = model(&server.base_url)
        .stream(say_hi())
        .await
        .expect("stream");
    let (parts, error) = collect(stream).await;
    assert!(parts.is_empty());
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::InvalidRequest);
    assert!(!error.is_retryable());
    assert_eq!(error.status, Some(400));
    assert_eq!(error.body.as_deref(), Some(overflow));
    assert!(
        error.message.contains("HTTP 200 with an empty stream")
            && error.message.contains("HTTP 400: Requested tokens (5000)"),
        "{}",
        error.message
    );
    assert_eq!(
        mull_core::default_context_overflow_classifier(&error),
        Some(mull_core::ChatErrorClassification::ContextOverflow)
    );
}

/// The non-streaming twin of [`tool_stream`]: one `chat.completion` with the same answer.
fn tool_completion() -> String {
    json!({
        "id": "chatcmpl-2", "object": "chat.completion", "created": 2, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "logprobs": null, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Héllo 👋",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"rust\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
            ]
        }}],
        "usage": {
            "prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 64},
            "completion_tokens_details": {"reasoning_tokens": 8}
        }
    })
    .to_string()
}

/// What [`tool_completion`] decodes to: [`expected_tool_parts`] with each input in one delta.
fn expected_completion_parts() -> Vec<StreamPart> {
    let mut parts = expected_tool_parts();
    parts.retain(|p| !matches!(p, StreamPart::ToolInputDelta { .. }));
    let delta = |call_id: &str, delta: &str| StreamPart::ToolInputDelta {
        call_id: call_id.into(),
        delta: delta.into(),
    };
    parts.insert(3, delta("call_a", "{\"q\":\"rust\"}"));
    parts.insert(5, delta("call_b", "{}"));
    parts
}

fn completion_reply() -> Reply {
    Reply::Status {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        body: tool_completion(),
    }
}

fn model_streaming(base_url: &str, streaming: Streaming) -> OpenAiModel {
    let mut config = OpenAiConfig::compatible(base_url, "local");
    config.streaming = streaming;
    OpenAiModel::new(config).expect("model")
}

/// The `streamed` marks of a call's `response-metadata` parts.
fn streamed_marks(parts: &[StreamPart]) -> Vec<Option<bool>> {
    parts
        .iter()
        .filter_map(|p| match p {
            StreamPart::ResponseMetadata { streamed, .. } => Some(*streamed),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_empty_stream_falls_back_to_the_answer_without_streaming_and_stays_there() {
    let empty = Reply::Sse {
        pieces: Vec::new(),
        cut: false,
    };
    let server = serve(Reply::Sequence(vec![empty, completion_reply()])).await;
    let model = model_streaming(&server.base_url, Streaming::Auto);
    assert!(model.streams());
    let (parts, error) = collect_all(model.stream(say_hi()).await.expect("stream")).await;
    assert_eq!(error, None);
    // The answer, as the same parts a stream gives, marked as served without streaming.
    assert_eq!(streamed_marks(&parts), [None, Some(false)]);
    let content: Vec<StreamPart> = parts
        .into_iter()
        .filter(|p| !p.is_call_metadata())
        .collect();
    assert_eq!(content, expected_completion_parts());
    // The whole request went again without streaming (not a one-token probe) ...
    let received = server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body["stream"], json!(true));
    assert_eq!(received[1].body["stream"], json!(false));
    assert!(received[1].body.get("stream_options").is_none());
    assert_eq!(
        received[1].body["max_tokens"],
        received[0].body["max_tokens"]
    );
    // ... and the model remembers: the next call does not stream at all.
    assert!(!model.streams());
    let (parts, error) = collect_all(model.stream(say_hi()).await.expect("stream")).await;
    assert_eq!(error, None);
    assert!(matches!(parts[0], StreamPart::StreamStart { .. }));
    assert_eq!(streamed_marks(&parts), [Some(false), Some(false)]);
    let content: Vec<StreamPart> = parts
        .into_iter()
        .filter(|p| !p.is_call_metadata())
        .collect();
    assert_eq!(content, expected_completion_parts());
    let received = server.received();
    assert_eq!(received.len(), 3);
    assert_eq!(received[2].body["stream"], json!(false));
}

#[tokio::test]
async fn streaming_on_never_falls_back_and_streaming_off_never_streams() {
    let empty = Reply::Sse {
        pieces: Vec::new(),
        cut: false,
    };
    let server = serve(Reply::Sequence(vec![empty, completion_reply()])).await;
    let model = model_streaming(&server.base_url, Streaming::On);
    let (parts, error) = collect(model.stream(say_hi()).await.expect("stream")).await;
    assert!(parts.is_empty());
    let error = error.expect("an empty stream is an error when streaming is on");
    assert!(
        error.message.contains("HTTP 200 with an empty stream")
            && error.message.contains("without streaming succeeded"),
        "{}",
        error.message
    );
    assert_eq!(server.received()[1].body["max_tokens"], json!(1), "a probe");
    assert!(model.streams());

    let server = serve(completion_reply()).await;
    let model = model_streaming(&server.base_url, Streaming::Off);
    let (parts, error) = collect(model.stream(say_hi()).await.expect("stream")).await;
    assert_eq!(error, None);
    assert_eq!(parts, expected_completion_parts());
    let received = server.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body["stream"], json!(false));
}

#[tokio::test]
async fn a_fallback_answer_that_is_not_json_is_a_protocol_error_showing_it() {
    let empty = Reply::Sse {
        pieces: Vec::new(),
        cut: false,
    };
    let html = Reply::Status {
        status: 200,
        headers: vec![("content-type", "text/html".into())],
        body: "<html>busy</html>".into(),
    };
    let server = serve(Reply::Sequence(vec![empty, html])).await;
    let model = model_streaming(&server.base_url, Streaming::Auto);
    let (_, error) = collect(model.stream(say_hi()).await.expect("stream")).await;
    let error = error.expect("error");
    assert_eq!(error.kind, ModelErrorKind::Protocol);
    assert!(
        error.message.contains("not JSON") && error.message.contains("<html>busy</html>"),
        "{}",
        error.message
    );
    assert!(model.streams(), "a failed fallback teaches nothing");
}

#[tokio::test]
async fn a_finish_reason_without_done_still_finishes() {
    let wire = chunk(json!({"content": "x"}), Some("stop"));
    let (parts, error) = run(wire, 4096, false).await;
    assert_eq!(error, None);
    assert!(matches!(
        parts.last(),
        Some(StreamPart::Finish {
            finish_reason: FinishReason::Stop,
            ..
        })
    ));
}

fn full_request() -> ModelRequest {
    let mut headers = BTreeMap::new();
    headers.insert("x-trace".to_owned(), "abc".to_owned());
    ModelRequest {
        system: Some("Be brief.".into()),
        messages: vec![
            ModelMessage {
                role: ModelRole::User,
                content: vec![
                    ModelContent::Text {
                        text: "What is in this picture?".into(),
                    },
                    ModelContent::File {
                        media_type: "image/png".into(),
                        url: "data:image/png;base64,AAAA".into(),
                    },
                ],
            },
            ModelMessage {
                role: ModelRole::Assistant,
                content: vec![
                    ModelContent::Reasoning {
                        text: "look it up".into(),
                    },
                    ModelContent::Text {
                        text: "Let me search.".into(),
                    },
                    ModelContent::ToolCall {
                        call_id: "call_1".into(),
                        tool_name: "search".into(),
                        input: json!({"q": "cats"}),
                    },
                ],
            },
            ModelMessage {
                role: ModelRole::Tool,
                content: vec![ModelContent::ToolResult {
                    call_id: "call_1".into(),
                    tool_name: "search".into(),
                    output: json!({"hits": 3}),
                    is_error: false,
                }],
            },
            ModelMessage::text(ModelRole::User, "thanks"),
        ],
        tools: vec![ToolSpec {
            name: "search".into(),
            description: "Search the web".into(),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}).into(),
        }],
        tool_choice: ToolChoice::Tool {
            tool_name: "search".into(),
        },
        settings: CallSettings {
            max_output_tokens: Some(256),
            temperature: Some(0.5),
            top_p: Some(0.9),
            top_k: Some(40),
            presence_penalty: Some(0.1),
            frequency_penalty: Some(0.2),
            stop_sequences: vec!["END".into()],
            seed: Some(7),
            headers,
            provider_options: Some(json!({"user": "u-1", "parallel_tool_calls": false})),
        },
        output_schema: Some(json!({"type": "object"})),
    }
}

fn expected_messages() -> serde_json::Value {
    json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        ]},
        {"role": "assistant", "content": "Let me search.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"cats\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"hits\":3}"},
        {"role": "user", "content": "thanks"}
    ])
}

#[tokio::test]
async fn every_request_field_reaches_the_openai_body() {
    let wire = [
        chunk(json!({"content": "ok"}), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let server = serve_sse(&wire, 4096, false).await;
    let stream = model(&server.base_url)
        .stream(full_request())
        .await
        .expect("stream");
    let (_, error) = collect(stream).await;
    assert_eq!(error, None);
    let received = server.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.headers["authorization"], "Bearer sk-test-secret");
    assert_eq!(request.headers["x-trace"], "abc");
    assert_eq!(
        request.body,
        json!({
            "model": "gpt-4o-mini",
            "messages": expected_messages(),
            "tools": [{"type": "function", "function": {
                "name": "search", "description": "Search the web",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
            }}],
            "tool_choice": {"type": "function", "function": {"name": "search"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "response", "schema": {"type": "object"}, "strict": false}},
            "max_completion_tokens": 256,
            "temperature": 0.5,
            "top_p": 0.9,
            "presence_penalty": 0.1,
            "frequency_penalty": 0.2,
            "stop": ["END"],
            "seed": 7,
            "stream": true,
            "stream_options": {"include_usage": true},
            "user": "u-1",
            "parallel_tool_calls": false
        })
    );
}

#[tokio::test]
async fn compatible_servers_get_max_tokens_and_top_k_and_no_auth() {
    let wire = [
        chunk(json!({"content": "ok"}), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let server = serve_sse(&wire, 4096, false).await;
    let config = OpenAiConfig::compatible(format!("{}/", server.base_url), "qwen3");
    let model = OpenAiModel::new(config).expect("model");
    assert_eq!(model.provider(), "openai-compatible");
    let (_, error) = collect(model.stream(full_request()).await.expect("stream")).await;
    assert_eq!(error, None);
    let request = &server.received()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert!(request.headers.get("authorization").is_none());
    assert_eq!(request.body["max_tokens"], json!(256));
    assert_eq!(request.body["top_k"], json!(40));
    assert!(request.body.get("max_completion_tokens").is_none());
    assert_eq!(request.body["model"], json!("qwen3"));
}

/// Decodes `wire` with the pure decoder entry point, in one read.
async fn decode(wire: &str) -> (Vec<StreamPart>, Option<mull_core::ModelError>) {
    collect(mull_providers::openai::decode_sse("openai", one_read(wire))).await
}

#[tokio::test]
async fn the_pure_decoder_matches_the_client() {
    let (parts, error) = decode(&tool_stream()).await;
    assert_eq!(error, None);
    assert_eq!(parts, expected_tool_parts());
}

#[tokio::test]
async fn known_fields_of_the_wrong_type_are_protocol_errors_naming_the_field() {
    let cases = [
        (
            r#"{"id":"c1","choices":"not a list"}"#,
            "`choices` should be an array, found a string",
        ),
        (
            r#"["a chunk in a list"]"#,
            "data should be an object, found an array",
        ),
        (
            r#"{"choices":[7]}"#,
            "`choices[0]` should be an object, found a number",
        ),
        (
            r#"{"choices":[{"index":0,"delta":"text"}]}"#,
            "`choices[0].delta` should be an object",
        ),
        (
            r#"{"choices":[{"index":0,"delta":{"content":["a"]}}]}"#,
            "`choices[0].delta.content` should be a string",
        ),
        (
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":1}}]}"#,
            "`choices[0].delta.reasoning_content` should be a string",
        ),
        (
            r#"{"choices":[{"index":0,"delta":{"tool_calls":{}}}]}"#,
            "`choices[0].delta.tool_calls` should be an array",
        ),
        (
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":3}}]}}]}"#,
            "`choices[0].delta.tool_calls[0].function.name` should be a string",
        ),
        (
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":true}]}"#,
            "`choices[0].finish_reason` should be a string",
        ),
        (
            r#"{"choices":[{"index":"0","delta":{}}]}"#,
            "`choices[0].index` should be an integer",
        ),
        (
            r#"{"choices":[],"usage":[1]}"#,
            "`usage` should be an object",
        ),
    ];
    for (data, what) in cases {
        let wire = format!("data: {data}\n\ndata: [DONE]\n\n");
        let (parts, error) = decode(&wire).await;
        assert_eq!(parts, vec![], "{data}");
        let error = error.unwrap_or_else(|| panic!("{data}: no error"));
        assert_eq!(error.kind, ModelErrorKind::Protocol, "{data}");
        assert!(
            error
                .message
                .starts_with("openai: malformed `chat.completion.chunk` event: ")
                && error.message.contains(what),
            "{data}: {}",
            error.message
        );
    }
}

#[tokio::test]
async fn unknown_and_null_fields_are_not_errors() {
    let data = json!({
        "id": "c1", "system_fingerprint": null, "service_tier": {"new": true},
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok", "refusal": null, "audio": {}},
                     "logprobs": null, "finish_reason": null, "extra": [1]}],
        "usage": null
    });
    let wire = format!(
        "data: {data}\n\n{}data: [DONE]\n\n",
        chunk(json!({}), Some("stop"))
    );
    let (parts, error) = decode(&wire).await;
    assert_eq!(error, None);
    assert!(parts.contains(&StreamPart::TextDelta {
        id: "text-0".into(),
        text: "ok".into()
    }));
}
