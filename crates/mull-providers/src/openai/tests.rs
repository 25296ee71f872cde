use eventsource_stream::Event as SseEvent;
use mull_core::{
    CallWarning, FinishReason, ModelContent, ModelMessage, ModelRole, StreamPart, Usage,
};
use serde_json::json;

use super::stream::finish_reason;
use super::*;
use crate::http::WireDecoder;

#[test]
fn top_k_is_a_warning_where_the_server_rejects_it_and_sent_where_it_accepts_it() {
    let mut request = ModelRequest::default();
    request.settings.top_k = Some(40);
    let openai = OpenAiConfig::openai("gpt-4o", Secret::new("sk-test"));
    assert!(matches!(
        &warnings(&openai, &request)[..],
        [CallWarning::UnsupportedSetting { setting, .. }] if setting == "top_k"
    ));
    assert!(request_body(&openai, &request).get("top_k").is_none());
    let local = OpenAiConfig::compatible("http://127.0.0.1:1/v1", "local");
    assert!(warnings(&local, &request).is_empty());
    assert_eq!(request_body(&local, &request)["top_k"], 40);
}

#[test]
fn the_first_chunk_names_the_response() {
    let (parts, error) = decode(&[
        r#"{"id":"chatcmpl-1","model":"gpt-4o-2024-08-06","created":1733097600,"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
        r#"{"id":"chatcmpl-1","model":"gpt-4o-2024-08-06","created":1733097600,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ]);
    assert_eq!(error, None);
    let metadata: Vec<&StreamPart> = parts.iter().filter(|p| p.is_call_metadata()).collect();
    assert_eq!(
        metadata,
        [&StreamPart::ResponseMetadata {
            id: Some("chatcmpl-1".into()),
            model_id: Some("gpt-4o-2024-08-06".into()),
            timestamp: chrono::DateTime::from_timestamp(1_733_097_600, 0),
            headers: None,
            streamed: None,
        }]
    );
}

fn decode(lines: &[&str]) -> (Vec<StreamPart>, Option<ModelError>) {
    let mut decoder = ChatCompletionsDecoder::new(Arc::from("openai"));
    let mut parts = Vec::new();
    for data in lines {
        let event = SseEvent {
            event: "message".into(),
            data: (*data).into(),
            ..SseEvent::default()
        };
        match decoder.event(&event) {
            Ok(more) => parts.extend(more),
            Err(e) => return (parts, Some(e)),
        }
        if decoder.is_done() {
            return (parts, None);
        }
    }
    match decoder.end() {
        Ok(more) => {
            parts.extend(more);
            (parts, None)
        }
        Err(e) => (parts, Some(e)),
    }
}

#[test]
fn reasoning_then_text_then_usage() {
    let (parts, error) = decode(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":1}}}"#,
        "[DONE]",
    ]);
    assert!(error.is_none());
    assert_eq!(
        parts,
        vec![
            StreamPart::ReasoningStart {
                id: "reasoning-0".into()
            },
            StreamPart::ReasoningDelta {
                id: "reasoning-0".into(),
                text: "think".into()
            },
            StreamPart::ReasoningEnd {
                id: "reasoning-0".into()
            },
            StreamPart::TextStart {
                id: "text-1".into()
            },
            StreamPart::TextDelta {
                id: "text-1".into(),
                text: "Hi".into()
            },
            StreamPart::TextEnd {
                id: "text-1".into()
            },
            StreamPart::Finish {
                finish_reason: FinishReason::Stop,
                raw_finish_reason: Some("stop".into()),
                usage: Usage {
                    input_tokens: Some(9),
                    output_tokens: Some(3),
                    total_tokens: Some(12),
                    reasoning_tokens: Some(1),
                    cached_input_tokens: Some(4),
                },
                provider_metadata: None,
            },
        ]
    );
}

#[test]
fn a_call_whose_name_comes_late_starts_when_named() {
    let (parts, error) = decode(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":":1}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ]);
    assert!(error.is_none());
    assert_eq!(
        parts,
        vec![
            StreamPart::ToolInputStart {
                call_id: "call_0".into(),
                tool_name: "f".into()
            },
            StreamPart::ToolInputDelta {
                call_id: "call_0".into(),
                delta: r#"{"a":1}"#.into()
            },
            StreamPart::ToolInputEnd {
                call_id: "call_0".into()
            },
            StreamPart::ToolCall {
                call_id: "call_0".into(),
                tool_name: "f".into(),
                input: r#"{"a":1}"#.into()
            },
            StreamPart::Finish {
                finish_reason: FinishReason::ToolCalls,
                raw_finish_reason: Some("tool_calls".into()),
                usage: Usage::default(),
                provider_metadata: None,
            },
        ]
    );
}

#[test]
fn a_nameless_call_is_a_protocol_error() {
    let (_, error) = decode(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
    ]);
    assert_eq!(error.map(|e| e.kind), Some(ModelErrorKind::Protocol));
}

#[test]
fn a_usage_count_of_the_wrong_type_is_a_protocol_error_naming_it() {
    for (usage, named) in [
        (r#"{"prompt_tokens":"9"}"#, "`usage.prompt_tokens` should be a non-negative integer, found a string"),
        (r#"{"completion_tokens":-1}"#, "`usage.completion_tokens` should be a non-negative integer, found a number"),
        (r#"{"prompt_tokens_details":{"cached_tokens":1.5}}"#, "`usage.prompt_tokens_details.cached_tokens` should be a non-negative integer, found a number"),
        (r#"{"completion_tokens_details":[]}"#, "`usage.completion_tokens_details` should be an object, found an array"),
    ] {
        let usage_chunk = format!(r#"{{"choices":[],"usage":{usage}}}"#);
        let (_, error) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#,
            &usage_chunk,
            "[DONE]",
        ]);
        let error = error.expect("a wrong-shaped usage fails the stream");
        assert_eq!(error.kind, ModelErrorKind::Protocol, "{usage}");
        assert!(error.message.contains(named), "{usage}: {}", error.message);
    }
}

#[test]
fn a_usage_without_details_leaves_them_unknown() {
    let (parts, error) = decode(&[
        r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3,"completion_tokens_details":null}}"#,
        "[DONE]",
    ]);
    assert!(error.is_none(), "{error:?}");
    let Some(StreamPart::Finish { usage, .. }) = parts.last() else {
        panic!("the stream ends with a finish part: {parts:?}");
    };
    assert_eq!(
        *usage,
        Usage {
            input_tokens: Some(2),
            output_tokens: Some(1),
            total_tokens: Some(3),
            reasoning_tokens: None,
            cached_input_tokens: None,
        }
    );
}

#[test]
fn finish_reasons_map() {
    assert_eq!(finish_reason("stop"), FinishReason::Stop);
    assert_eq!(finish_reason("length"), FinishReason::Length);
    assert_eq!(finish_reason("tool_calls"), FinishReason::ToolCalls);
    assert_eq!(finish_reason("function_call"), FinishReason::ToolCalls);
    assert_eq!(finish_reason("content_filter"), FinishReason::ContentFilter);
    assert_eq!(finish_reason("eos"), FinishReason::Other);
}

#[test]
fn an_assistant_message_of_tool_calls_only_has_empty_string_content() {
    let request = ModelRequest {
        messages: vec![ModelMessage {
            role: ModelRole::Assistant,
            content: vec![ModelContent::ToolCall {
                call_id: "call_1".into(),
                tool_name: "clock".into(),
                input: json!({}),
            }],
        }],
        ..ModelRequest::default()
    };
    let body = request_body(
        &OpenAiConfig::compatible("http://127.0.0.1:1/v1", "m"),
        &request,
    );
    assert_eq!(body["messages"][0]["content"], json!(""));
    assert_eq!(body["messages"][0]["tool_calls"][0]["id"], json!("call_1"));
}

#[test]
fn debug_output_hides_the_key() {
    let config = OpenAiConfig::openai("gpt-4o-mini", Secret::new("sk-secret-value"));
    let model = OpenAiModel::new(config).expect("client builds");
    assert!(!format!("{model:?}").contains("sk-secret-value"));
}
