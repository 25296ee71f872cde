//! The conversation as users see it: messages made of typed parts.
//!
//! The model follows the AI SDK's `UIMessage`, with snake_case fields in the log; a network
//! layer renames them to the AI SDK's wire names.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stream::Source;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UIMessage {
    /// Stable id, from the client or the engine's id source.
    pub id: String,
    pub role: Role,
    /// Free-form metadata the application attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    pub parts: Vec<UIPart>,
}

impl UIMessage {
    /// A message holding one text part.
    pub fn text(id: impl Into<String>, role: Role, text: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            role,
            metadata: None,
            parts: vec![UIPart::Text {
                text: text.into(),
                streaming: false,
            }],
        }
    }

    /// A user message holding one text part.
    pub fn user(id: impl Into<String>, text: impl Into<String>) -> Self {
        Self::text(id, Role::User, text)
    }

    /// All text parts joined, the way a transcript shows the message.
    pub fn plain_text(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            if let UIPart::Text { text, .. } = part {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool part for `call_id`, if this message has one.
    pub fn tool_part_mut(&mut self, call_id: &str) -> Option<&mut ToolPart> {
        self.parts.iter_mut().find_map(|p| match p {
            UIPart::Tool(t) if t.call_id == call_id => Some(t),
            _ => None,
        })
    }
}

/// The lifecycle of a tool part, as the AI SDK names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolPartState {
    /// The model is still streaming the input.
    InputStreaming,
    /// The input is complete; no result yet (a client tool waits here).
    InputAvailable,
    /// The tool produced its output.
    OutputAvailable,
    /// The tool failed; `error_text` says why.
    OutputError,
    /// The user or client denied the call.
    OutputDenied,
    /// The call waits for a person's approval before it may run.
    ApprovalRequested,
    /// A person answered the approval; the call runs (or is denied) in the next turn.
    ApprovalResponded,
}

/// A tool call and, once known, its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPart {
    pub call_id: String,
    pub tool_name: String,
    pub state: ToolPartState,
    /// The input as the model produced it (the JSON text while streaming, then the parsed value).
    #[serde(default)]
    pub input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_text: Option<String>,
    /// A streaming tool's output so far is preliminary until its final value arrives.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preliminary: bool,
}

/// One part of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum UIPart {
    /// Text; `streaming` while its block is still open.
    Text {
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        streaming: bool,
    },
    /// The model's reasoning.
    Reasoning {
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        streaming: bool,
    },
    /// Marks where a new model step begins inside an assistant message.
    StepStart,
    /// A tool call and its result.
    Tool(ToolPart),
    /// A web citation.
    SourceUrl {
        source_id: String,
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// A document citation.
    SourceDocument {
        source_id: String,
        media_type: String,
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
    /// A file (a data URL or a link).
    File {
        media_type: String,
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
    /// Application data (`data-<name>` in the AI SDK).
    Data {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        data: Value,
    },
}

impl UIPart {
    /// The part a streamed source becomes in a message.
    pub fn from_source(source: &Source) -> UIPart {
        match source {
            Source::Url { id, url, title } => UIPart::SourceUrl {
                source_id: id.clone(),
                url: url.clone(),
                title: title.clone(),
            },
            Source::Document {
                id,
                media_type,
                title,
                filename,
            } => UIPart::SourceDocument {
                source_id: id.clone(),
                media_type: media_type.clone(),
                title: title.clone(),
                filename: filename.clone(),
            },
        }
    }

    /// The source a source part shows (`None` for any other part).
    pub fn source(&self) -> Option<Source> {
        match self {
            UIPart::SourceUrl {
                source_id,
                url,
                title,
            } => Some(Source::Url {
                id: source_id.clone(),
                url: url.clone(),
                title: title.clone(),
            }),
            UIPart::SourceDocument {
                source_id,
                media_type,
                title,
                filename,
            } => Some(Source::Document {
                id: source_id.clone(),
                media_type: media_type.clone(),
                title: title.clone(),
                filename: filename.clone(),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_part_round_trips() {
        let msg = UIMessage {
            id: "m1".into(),
            role: Role::Assistant,
            metadata: None,
            parts: vec![
                UIPart::StepStart,
                UIPart::Tool(ToolPart {
                    call_id: "c1".into(),
                    tool_name: "search".into(),
                    state: ToolPartState::OutputAvailable,
                    input: json!({"q": "rust"}),
                    output: Some(json!(["a"])),
                    error_text: None,
                    preliminary: false,
                }),
            ],
        };
        let text = serde_json::to_string(&msg).unwrap_or_default();
        assert!(text.contains(r#""type":"step-start""#));
        assert!(text.contains(r#""state":"output-available""#));
        let back: UIMessage = serde_json::from_str(&text).expect("round trip");
        assert_eq!(back, msg);
    }

    #[test]
    fn plain_text_joins_text_parts() {
        let mut m = UIMessage::user("u", "hello ");
        m.parts.push(UIPart::Reasoning {
            text: "hidden".into(),
            streaming: false,
        });
        m.parts.push(UIPart::Text {
            text: "world".into(),
            streaming: false,
        });
        assert_eq!(m.plain_text(), "hello world");
    }
}
