//! The request side: a [`ModelRequest`] as a streaming Chat Completions body, and the
//! warnings for what the server is not sent.

use mull_core::{CallWarning, ModelContent, ModelMessage, ModelRequest, ModelRole, ToolChoice};
use serde_json::{json, Map, Value};

use super::OpenAiConfig;

/// What the server is not sent of `request`, as warnings the step record shows.
pub fn warnings(config: &OpenAiConfig, request: &ModelRequest) -> Vec<CallWarning> {
    let mut out = Vec::new();
    if !config.send_top_k && request.settings.top_k.is_some() {
        out.push(CallWarning::UnsupportedSetting {
            setting: "top_k".into(),
            details: Some(format!(
                "{} does not accept top_k; it was not sent",
                config.provider_name
            )),
        });
    }
    out
}

/// Maps a [`ModelRequest`] to a streaming Chat Completions body.
pub fn request_body(config: &OpenAiConfig, request: &ModelRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("messages".into(), Value::Array(messages(request)));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool { tool_name } => {
                json!({"type": "function", "function": {"name": tool_name}})
            }
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "response_format".into(),
            json!({
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": schema, "strict": false}
            }),
        );
    }
    let s = &request.settings;
    if let Some(max) = s.max_output_tokens {
        body.insert(config.max_tokens_field.name().into(), json!(max));
    }
    insert_some(&mut body, "temperature", s.temperature);
    insert_some(&mut body, "top_p", s.top_p);
    if config.send_top_k {
        insert_some(&mut body, "top_k", s.top_k);
    } else if s.top_k.is_some() {
        // Not sent: the step record's warnings say so (see `warnings`).
    }
    insert_some(&mut body, "presence_penalty", s.presence_penalty);
    insert_some(&mut body, "frequency_penalty", s.frequency_penalty);
    if !s.stop_sequences.is_empty() {
        body.insert("stop".into(), json!(s.stop_sequences));
    }
    insert_some(&mut body, "seed", s.seed);
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(Value::Object(options)) = &s.provider_options {
        for (key, value) in options {
            body.insert(key.clone(), value.clone());
        }
    }
    Value::Object(body)
}

fn insert_some<T: serde::Serialize>(body: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(value) = value {
        body.insert(key.into(), json!(value));
    }
}

fn messages(request: &ModelRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        out.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        push_message(message, &mut out);
    }
    out
}

fn push_message(message: &ModelMessage, out: &mut Vec<Value>) {
    match message.role {
        ModelRole::System => {
            out.push(json!({"role": "system", "content": joined_text(&message.content)}));
        }
        ModelRole::User => {
            let parts: Vec<Value> = message.content.iter().filter_map(user_part).collect();
            let content = match parts.as_slice() {
                [only] if only["type"] == "text" => only["text"].clone(),
                _ => Value::Array(parts),
            };
            out.push(json!({"role": "user", "content": content}));
            push_tool_results(&message.content, out);
        }
        ModelRole::Assistant => {
            let text = joined_text(&message.content);
            let calls: Vec<Value> = message
                .content
                .iter()
                .filter_map(|c| match c {
                    ModelContent::ToolCall {
                        call_id,
                        tool_name,
                        input,
                    } => Some(json!({
                        "id": call_id,
                        "type": "function",
                        "function": {"name": tool_name, "arguments": input.to_string()},
                    })),
                    _ => None,
                })
                .collect();
            let mut msg = Map::new();
            msg.insert("role".into(), json!("assistant"));
            // Always a string, `""` beside tool calls: OpenAI also takes `null` there, but
            // llama.cpp's server, some vLLM versions, LM Studio and Ollama's shim fail on it.
            msg.insert("content".into(), json!(text));
            if !calls.is_empty() {
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            out.push(Value::Object(msg));
            push_tool_results(&message.content, out);
        }
        ModelRole::Tool => push_tool_results(&message.content, out),
    }
}

fn push_tool_results(content: &[ModelContent], out: &mut Vec<Value>) {
    for c in content {
        if let ModelContent::ToolResult {
            call_id, output, ..
        } = c
        {
            let text = match output {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text}));
        }
    }
}

fn joined_text(content: &[ModelContent]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            ModelContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

fn user_part(content: &ModelContent) -> Option<Value> {
    match content {
        ModelContent::Text { text } => Some(json!({"type": "text", "text": text})),
        ModelContent::File { media_type, url } if media_type.starts_with("image/") => {
            Some(json!({"type": "image_url", "image_url": {"url": url}}))
        }
        ModelContent::File { url, .. } => Some(json!({"type": "file", "file": {"file_data": url}})),
        _ => None,
    }
}
