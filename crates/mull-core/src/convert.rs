//! Turning the projected conversation into the messages a model is sent.

use serde_json::Value;

use crate::message::{Role, ToolPartState, UIMessage, UIPart};
use crate::model::{ModelContent, ModelMessage, ModelRole};

/// Converts UI messages to model messages: assistant tool parts become a tool call in the
/// assistant message plus a tool-result message after it; reasoning is kept; step boundaries
/// inside an assistant message split it so each step's calls are followed by their results.
/// Tool parts still waiting for a result (client tools) are sent as calls without results.
pub fn to_model_messages(messages: &[UIMessage]) -> Vec<ModelMessage> {
    let mut out = Vec::with_capacity(messages.len());
    for msg in messages {
        match msg.role {
            Role::System | Role::User => {
                let role = if msg.role == Role::System {
                    ModelRole::System
                } else {
                    ModelRole::User
                };
                let content: Vec<ModelContent> = msg
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        UIPart::Text { text, .. } => {
                            Some(ModelContent::Text { text: text.clone() })
                        }
                        UIPart::File {
                            media_type, url, ..
                        } => Some(ModelContent::File {
                            media_type: media_type.clone(),
                            url: url.clone(),
                        }),
                        _ => None,
                    })
                    .collect();
                if !content.is_empty() {
                    out.push(ModelMessage { role, content });
                }
            }
            Role::Assistant => push_assistant(msg, &mut out),
        }
    }
    out
}

fn push_assistant(msg: &UIMessage, out: &mut Vec<ModelMessage>) {
    let mut content = Vec::new();
    let mut results = Vec::new();
    let flush = |content: &mut Vec<ModelContent>,
                 results: &mut Vec<ModelContent>,
                 out: &mut Vec<ModelMessage>| {
        if !content.is_empty() {
            out.push(ModelMessage {
                role: ModelRole::Assistant,
                content: std::mem::take(content),
            });
        }
        if !results.is_empty() {
            out.push(ModelMessage {
                role: ModelRole::Tool,
                content: std::mem::take(results),
            });
        }
    };
    for part in &msg.parts {
        match part {
            UIPart::StepStart => flush(&mut content, &mut results, out),
            UIPart::Text { text, .. } if !text.is_empty() => {
                content.push(ModelContent::Text { text: text.clone() })
            }
            UIPart::Reasoning { text, .. } if !text.is_empty() => {
                content.push(ModelContent::Reasoning { text: text.clone() })
            }
            UIPart::Tool(tool) => {
                if tool.state == ToolPartState::InputStreaming {
                    continue;
                }
                content.push(ModelContent::ToolCall {
                    call_id: tool.call_id.clone(),
                    tool_name: tool.tool_name.clone(),
                    input: tool.input.clone(),
                });
                let result = match tool.state {
                    ToolPartState::OutputAvailable => {
                        Some((tool.output.clone().unwrap_or(Value::Null), false))
                    }
                    // A denied approval follows Think's block semantics: the model sees
                    // the reason as the tool's output.
                    ToolPartState::OutputDenied if tool.output.is_some() => {
                        Some((tool.output.clone().unwrap_or(Value::Null), false))
                    }
                    ToolPartState::OutputError | ToolPartState::OutputDenied => Some((
                        Value::String(tool.error_text.clone().unwrap_or_default()),
                        true,
                    )),
                    _ => None,
                };
                if let Some((output, is_error)) = result {
                    results.push(ModelContent::ToolResult {
                        call_id: tool.call_id.clone(),
                        tool_name: tool.tool_name.clone(),
                        output,
                        is_error,
                    });
                }
            }
            _ => {}
        }
    }
    flush(&mut content, &mut results, out);
}

/// Marker appended where a long text or tool output was cut.
pub const TRUNCATION_MARKER: &str = "… [truncated]";

/// Shortens old oversized texts and tool outputs to `max_chars`, keeping the last `keep_last`
/// messages whole, so a long history does not crowd out the current exchange.
pub fn truncate_for_context(messages: &mut [ModelMessage], max_chars: usize, keep_last: usize) {
    let cut_until = messages.len().saturating_sub(keep_last);
    for msg in &mut messages[..cut_until] {
        for content in &mut msg.content {
            match content {
                ModelContent::Text { text } if text.len() > max_chars => {
                    *text = cut(text, max_chars);
                }
                ModelContent::ToolResult { output, .. } => {
                    let rendered = match &*output {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    if rendered.len() > max_chars {
                        *output = Value::String(cut(&rendered, max_chars));
                    }
                }
                _ => {}
            }
        }
    }
}

fn cut(text: &str, max_chars: usize) -> String {
    let mut end = max_chars.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{TRUNCATION_MARKER}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolPart;
    use serde_json::json;

    fn tool(call: &str, state: ToolPartState) -> UIPart {
        UIPart::Tool(ToolPart {
            call_id: call.into(),
            tool_name: "lookup".into(),
            state,
            input: json!({"q": call}),
            output: (state == ToolPartState::OutputAvailable).then(|| json!("ok")),
            error_text: (state == ToolPartState::OutputError).then(|| "boom".to_string()),
            preliminary: false,
        })
    }

    #[test]
    fn assistant_steps_become_call_then_result_messages() {
        let assistant = UIMessage {
            id: "a".into(),
            role: Role::Assistant,
            metadata: None,
            parts: vec![
                UIPart::StepStart,
                UIPart::Text {
                    text: "looking".into(),
                    streaming: false,
                },
                tool("c1", ToolPartState::OutputAvailable),
                UIPart::StepStart,
                tool("c2", ToolPartState::OutputError),
                UIPart::StepStart,
                UIPart::Text {
                    text: "done".into(),
                    streaming: false,
                },
            ],
        };
        let out = to_model_messages(&[UIMessage::user("u", "hi"), assistant]);
        let roles: Vec<ModelRole> = out.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![
                ModelRole::User,
                ModelRole::Assistant,
                ModelRole::Tool,
                ModelRole::Assistant,
                ModelRole::Tool,
                ModelRole::Assistant
            ]
        );
        assert!(matches!(
            &out[4].content[0],
            ModelContent::ToolResult { is_error: true, .. }
        ));
    }

    #[test]
    fn truncation_keeps_recent_messages_whole() {
        let long = "x".repeat(100);
        let mut msgs: Vec<ModelMessage> = (0..6)
            .map(|_| ModelMessage::text(ModelRole::User, long.clone()))
            .collect();
        truncate_for_context(&mut msgs, 10, 4);
        assert_eq!(msgs[0].char_len(), 10 + TRUNCATION_MARKER.len());
        assert_eq!(msgs[1].char_len(), 10 + TRUNCATION_MARKER.len());
        for m in &msgs[2..] {
            assert_eq!(m.char_len(), 100);
        }
    }
}
