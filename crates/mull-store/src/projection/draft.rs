//! The draft: the assistant message a running turn builds from its stream chunks (text and
//! reasoning blocks, sources, files, tool parts), and finding a message's tool part.

use mull_core::{StreamPart, ToolPart, ToolPartState, UIMessage, UIPart};
use serde_json::Value;

use super::state::SessionState;

impl SessionState {
    pub(super) fn apply_chunk(&mut self, part: &StreamPart) {
        let Some(draft) = &mut self.draft else {
            return;
        };
        let parts = &mut draft.parts;
        match part {
            StreamPart::TextStart { id } | StreamPart::ReasoningStart { id } => {
                let text = String::new();
                parts.push(match part {
                    StreamPart::TextStart { .. } => UIPart::Text {
                        text,
                        streaming: true,
                    },
                    _ => UIPart::Reasoning {
                        text,
                        streaming: true,
                    },
                });
                self.open_blocks.push((id.clone(), parts.len() - 1));
            }
            StreamPart::TextDelta { id, text: delta }
            | StreamPart::ReasoningDelta { id, text: delta } => {
                if let Some(index) = open_block(&self.open_blocks, id) {
                    if let Some(UIPart::Text { text, .. } | UIPart::Reasoning { text, .. }) =
                        parts.get_mut(index)
                    {
                        text.push_str(delta);
                    }
                }
            }
            StreamPart::TextEnd { id } | StreamPart::ReasoningEnd { id } => {
                if let Some(index) = open_block(&self.open_blocks, id) {
                    if let Some(
                        UIPart::Text { streaming, .. } | UIPart::Reasoning { streaming, .. },
                    ) = parts.get_mut(index)
                    {
                        *streaming = false;
                    }
                    self.open_blocks.retain(|(open, _)| open != id);
                }
            }
            StreamPart::Source { source } => parts.push(UIPart::from_source(source)),
            StreamPart::File { media_type, data } => parts.push(UIPart::File {
                media_type: media_type.clone(),
                url: data.clone(),
                filename: None,
            }),
            StreamPart::ToolInputStart { call_id, tool_name } => {
                parts.push(UIPart::Tool(new_tool_part(
                    call_id,
                    tool_name,
                    ToolPartState::InputStreaming,
                    Value::String(String::new()),
                )));
            }
            StreamPart::ToolInputDelta { call_id, delta } => {
                if let Some(ToolPart {
                    input: Value::String(text),
                    ..
                }) = draft.tool_part_mut(call_id)
                {
                    text.push_str(delta);
                }
            }
            StreamPart::ToolCall {
                call_id,
                tool_name,
                input,
            } => {
                let parsed =
                    serde_json::from_str(input).unwrap_or_else(|_| Value::String(input.clone()));
                if let Some(part) = tool_part_or_new(draft, call_id, tool_name) {
                    part.tool_name.clone_from(tool_name);
                    part.state = ToolPartState::InputAvailable;
                    part.input = parsed;
                }
            }
            StreamPart::ToolResult {
                call_id,
                tool_name,
                output,
                preliminary,
            } => {
                if let Some(part) = tool_part_or_new(draft, call_id, tool_name) {
                    part.state = ToolPartState::OutputAvailable;
                    part.output = Some(output.clone());
                    part.preliminary = *preliminary;
                }
            }
            StreamPart::ToolError {
                call_id,
                tool_name,
                error,
            } => {
                if let Some(part) = tool_part_or_new(draft, call_id, tool_name) {
                    part.state = ToolPartState::OutputError;
                    part.error_text = Some(error.clone());
                    part.preliminary = false;
                }
            }
            StreamPart::ToolInputEnd { .. }
            | StreamPart::Raw { .. }
            | StreamPart::Error { .. }
            | StreamPart::Finish { .. }
            | StreamPart::StreamStart { .. }
            | StreamPart::ResponseMetadata { .. } => {}
        }
    }
}

fn open_block(open: &[(String, usize)], id: &str) -> Option<usize> {
    open.iter()
        .rev()
        .find(|(open, _)| open == id)
        .map(|(_, index)| *index)
}

pub(super) fn new_tool_part(
    call_id: &str,
    tool_name: &str,
    state: ToolPartState,
    input: Value,
) -> ToolPart {
    ToolPart {
        call_id: call_id.to_owned(),
        tool_name: tool_name.to_owned(),
        state,
        input,
        output: None,
        error_text: None,
        preliminary: false,
    }
}

/// The draft's tool part for `call_id`, created (with no input yet) when the stream skipped
/// its start.
fn tool_part_or_new<'a>(
    draft: &'a mut UIMessage,
    call_id: &str,
    tool_name: &str,
) -> Option<&'a mut ToolPart> {
    if draft.tool_part_mut(call_id).is_none() {
        draft.parts.push(UIPart::Tool(new_tool_part(
            call_id,
            tool_name,
            ToolPartState::InputStreaming,
            Value::Null,
        )));
    }
    draft.tool_part_mut(call_id)
}

/// The tool part for `call_id` in `messages`, newest message first; limited to `message_id`
/// when given and present.
pub(crate) fn find_tool_part<'a>(
    messages: &'a mut [UIMessage],
    message_id: Option<&str>,
    call_id: &str,
) -> Option<&'a mut ToolPart> {
    let preferred = message_id.and_then(|id| messages.iter().position(|m| m.id == id));
    let index = match preferred {
        Some(index) if messages[index].tool_part_mut(call_id).is_some() => Some(index),
        _ => messages
            .iter_mut()
            .rposition(|m| m.tool_part_mut(call_id).is_some()),
    }?;
    messages[index].tool_part_mut(call_id)
}
