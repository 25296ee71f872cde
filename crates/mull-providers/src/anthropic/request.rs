//! The request side: a [`ModelRequest`] as a streaming Messages body, and the warnings for
//! the settings it has no field for.

use mull_core::{CallWarning, ModelContent, ModelRequest, ModelRole, ToolChoice};
use serde_json::{json, Map, Value};

use super::{DEFAULT_MAX_TOKENS, JSON_TOOL};

/// The settings of `request` the Messages API has no field for (not sent), as warnings the
/// step record shows.
pub fn warnings(request: &ModelRequest) -> Vec<CallWarning> {
    let s = &request.settings;
    let unsupported = [
        ("presence_penalty", s.presence_penalty.is_some()),
        ("frequency_penalty", s.frequency_penalty.is_some()),
        ("seed", s.seed.is_some()),
    ];
    unsupported
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(setting, _)| CallWarning::UnsupportedSetting {
            setting: setting.into(),
            details: Some("the Messages API has no such field; it was not sent".into()),
        })
        .collect()
}

/// Maps a [`ModelRequest`] to a streaming Messages body for `model`.
pub fn request_body(model: &str, request: &ModelRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    let s = &request.settings;
    body.insert(
        "max_tokens".into(),
        json!(s.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    let mut system: Vec<String> = request.system.iter().cloned().collect();
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in &request.messages {
        let role = match message.role {
            ModelRole::System => {
                system.extend(message.content.iter().filter_map(|c| match c {
                    ModelContent::Text { text } => Some(text.clone()),
                    _ => None,
                }));
                continue;
            }
            ModelRole::User | ModelRole::Tool => "user",
            ModelRole::Assistant => "assistant",
        };
        let blocks: Vec<Value> = message.content.iter().filter_map(content_block).collect();
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last_role, last)) if *last_role == role => last.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if let Some(schema) = &request.output_schema {
        // Structured output the way the Messages API allows it: one tool whose input schema is
        // the output's, forced, whose input the decoder turns into the answer's text. The
        // step's own tools are not offered on such a call (as the AI SDK does).
        body.insert(
            "tools".into(),
            json!([{
                "name": JSON_TOOL,
                "description": "Respond with a JSON object.",
                "input_schema": schema,
            }]),
        );
        body.insert(
            "tool_choice".into(),
            json!({"type": "tool", "name": JSON_TOOL}),
        );
    } else if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool { tool_name } => json!({"type": "tool", "name": tool_name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(t) = s.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = s.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(k) = s.top_k {
        body.insert("top_k".into(), json!(k));
    }
    if !s.stop_sequences.is_empty() {
        body.insert("stop_sequences".into(), json!(s.stop_sequences));
    }
    // Penalties and seed are not sent: `warnings` reports each one.
    body.insert("stream".into(), json!(true));
    if let Some(Value::Object(options)) = &s.provider_options {
        for (key, value) in options {
            body.insert(key.clone(), value.clone());
        }
    }
    Value::Object(body)
}

/// One content item as a Messages content block; reasoning is dropped (see the module docs).
pub(super) fn content_block(content: &ModelContent) -> Option<Value> {
    match content {
        ModelContent::Text { text } => Some(json!({"type": "text", "text": text})),
        ModelContent::Reasoning { .. } => None,
        ModelContent::File { media_type, url } => {
            let kind = if media_type.starts_with("image/") {
                "image"
            } else {
                "document"
            };
            let source = match url
                .strip_prefix("data:")
                .and_then(|rest| rest.split_once(";base64,"))
            {
                Some((data_type, data)) => {
                    let data_type = if data_type.is_empty() {
                        media_type.as_str()
                    } else {
                        data_type
                    };
                    json!({"type": "base64", "media_type": data_type, "data": data})
                }
                None => json!({"type": "url", "url": url}),
            };
            Some(json!({"type": kind, "source": source}))
        }
        ModelContent::ToolCall {
            call_id,
            tool_name,
            input,
        } => Some(json!({"type": "tool_use", "id": call_id, "name": tool_name, "input": input})),
        ModelContent::ToolResult {
            call_id,
            output,
            is_error,
            ..
        } => {
            let text = match output {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut block = json!({"type": "tool_result", "tool_use_id": call_id, "content": text});
            if *is_error {
                block["is_error"] = json!(true);
            }
            Some(block)
        }
    }
}
