//! The AI SDK's wire shapes for messages and chat requests, mapped to mull's snake_case model.
//!
//! The log speaks snake_case (`call_id`, `error_text`, `media_type`); the AI SDK speaks camelCase
//! (`toolCallId`, `errorText`, `mediaType`) and names tool parts after their tool (`tool-search`)
//! and data parts after their kind (`data-weather`). Every rename between the two lives here, so
//! the rest of the server only sees [`UIMessage`].
//!
//! Decoding names where a body went wrong (`messages[1].parts[0]: unknown part type "x"`), which
//! is what a client needs to fix its request.

use mull_core::{Role, ToolPart, ToolPartState, UIMessage, UIPart};
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A request body that does not fit the AI SDK's chat request shape.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The body is not JSON at all.
    #[error("request body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// The body is JSON but a field does not fit; `path` says which one.
    #[error("request body does not fit the chat request shape at {path}: {message}")]
    BadShape { path: String, message: String },
}

/// What the client asks for: a new answer to its latest message, or a fresh answer in place of
/// an earlier assistant message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    SubmitMessage,
    RegenerateMessage,
}

/// A chat request as `DefaultChatTransport` posts it (and as the WebSocket `send` frame carries
/// it). Fields the AI SDK does not define are kept in `body` for the hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The chat id; mull runs one session per chat id.
    pub chat_id: String,
    /// The client's view of the conversation.
    pub messages: Vec<UIMessage>,
    pub trigger: Trigger,
    /// For `regenerate-message`: the assistant message to replace.
    pub message_id: Option<String>,
    /// Every other top-level field, passed to hooks as the turn's body.
    pub body: Map<String, Value>,
    /// Approval answers the client's tool parts carry (`addToolApprovalResponse`).
    pub approvals: Vec<ApprovalResponse>,
}

/// A person's answer on a tool part in the `approval-responded` state: the AI SDK's
/// `approval: { id, approved, reason }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalResponse {
    pub approval_id: String,
    pub call_id: String,
    pub approved: bool,
    pub reason: Option<String>,
}

impl ChatRequest {
    /// A request from its parts, the approval answers gathered from its messages.
    pub fn new(
        chat_id: String,
        messages: Vec<WireMessage>,
        trigger: Trigger,
        message_id: Option<String>,
        body: Map<String, Value>,
    ) -> ChatRequest {
        let mut approvals = Vec::new();
        let mut plain = Vec::with_capacity(messages.len());
        for WireMessage(message, answers) in messages {
            if message.role == Role::Assistant {
                approvals.extend(answers);
            }
            plain.push(message);
        }
        ChatRequest {
            chat_id,
            messages: plain,
            trigger,
            message_id,
            body,
            approvals,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChatRequestWire {
    id: String,
    messages: Vec<WireMessage>,
    #[serde(default = "default_trigger")]
    trigger: Trigger,
    #[serde(default)]
    message_id: Option<String>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

fn default_trigger() -> Trigger {
    Trigger::SubmitMessage
}

impl ChatRequest {
    /// Decodes a POST body.
    pub fn from_slice(bytes: &[u8]) -> Result<ChatRequest, WireError> {
        let value: Value = serde_json::from_slice(bytes).map_err(WireError::NotJson)?;
        Self::from_value(value)
    }

    /// Decodes an already parsed JSON body.
    pub fn from_value(value: Value) -> Result<ChatRequest, WireError> {
        let wire: ChatRequestWire = decode_at_path(value)?;
        Ok(ChatRequest::new(
            wire.id,
            wire.messages,
            wire.trigger,
            wire.message_id,
            wire.rest,
        ))
    }
}

/// Decodes `value` as `T`, reporting the JSON path of the first field that does not fit.
pub fn decode_at_path<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, WireError> {
    serde_path_to_error::deserialize(value).map_err(|err| WireError::BadShape {
        path: match err.path().to_string() {
            p if p == "." => "the top level".to_owned(),
            p => p,
        },
        message: err.inner().to_string(),
    })
}

/// A [`UIMessage`] in the AI SDK's wire shape, with the approval answers its tool parts carry
/// (decoded only; mull keeps approvals in the log, not on the part).
#[derive(Debug, Clone, PartialEq)]
pub struct WireMessage(pub UIMessage, pub Vec<ApprovalResponse>);

/// A message as decoded: its parts keep what they say about approvals.
#[derive(Deserialize)]
struct WireMessageIn {
    id: String,
    role: Role,
    #[serde(default)]
    metadata: Option<Value>,
    parts: Vec<WirePartIn>,
}

/// A part as decoded, with the approval answer a tool part carries.
struct WirePartIn(UIPart, Option<ApprovalResponse>);

impl<'de> Deserialize<'de> for WirePartIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let approval = approval_of(&value);
        WirePart::from_value(value)
            .map(|part| WirePartIn(part, approval))
            .map_err(D::Error::custom)
    }
}

/// The answer on a tool part: `approval.approved` set (an `approval-responded` or later part).
fn approval_of(part: &Value) -> Option<ApprovalResponse> {
    let approval = part.get("approval")?;
    Some(ApprovalResponse {
        approval_id: approval.get("id")?.as_str()?.to_owned(),
        call_id: part.get("toolCallId")?.as_str()?.to_owned(),
        approved: approval.get("approved")?.as_bool()?,
        reason: approval
            .get("reason")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

#[derive(Serialize, Deserialize)]
struct WireMessageShape {
    id: String,
    role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metadata: Option<Value>,
    parts: Vec<WirePart>,
}

impl Serialize for WireMessage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let shape = WireMessageShape {
            id: self.0.id.clone(),
            role: self.0.role,
            metadata: self.0.metadata.clone(),
            parts: self.0.parts.iter().cloned().map(WirePart).collect(),
        };
        shape.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WireMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let shape = WireMessageIn::deserialize(deserializer)?;
        let mut parts = Vec::with_capacity(shape.parts.len());
        let mut approvals = Vec::new();
        for WirePartIn(part, approval) in shape.parts {
            parts.push(part);
            approvals.extend(approval);
        }
        Ok(WireMessage(
            UIMessage {
                id: shape.id,
                role: shape.role,
                metadata: shape.metadata,
                parts,
            },
            approvals,
        ))
    }
}

/// A [`UIPart`] in the AI SDK's wire shape.
#[derive(Debug, Clone, PartialEq)]
pub struct WirePart(pub UIPart);

/// `state` of text and reasoning parts on the wire.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum TextState {
    Streaming,
    Done,
}

#[derive(Serialize, Deserialize)]
struct TextWire {
    text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<TextState>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolWire {
    tool_call_id: String,
    state: ToolPartState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preliminary: Option<bool>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DynamicToolWire {
    tool_name: String,
    #[serde(flatten)]
    tool: ToolWire,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SourceUrlWire {
    source_id: String,
    url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SourceDocumentWire {
    source_id: String,
    media_type: String,
    title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    filename: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileWire {
    media_type: String,
    url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    filename: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct DataWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(default)]
    data: Value,
}

fn tool_from_wire(tool_name: String, wire: ToolWire) -> UIPart {
    UIPart::Tool(ToolPart {
        call_id: wire.tool_call_id,
        tool_name,
        state: wire.state,
        input: wire.input.unwrap_or(Value::Null),
        output: wire.output,
        error_text: wire.error_text,
        preliminary: wire.preliminary.unwrap_or(false),
    })
}

fn tool_to_wire(part: &ToolPart) -> ToolWire {
    ToolWire {
        tool_call_id: part.call_id.clone(),
        state: part.state,
        input: match &part.input {
            Value::Null => None,
            other => Some(other.clone()),
        },
        output: part.output.clone(),
        error_text: part.error_text.clone(),
        preliminary: part.preliminary.then_some(true),
    }
}

/// Adds the `type` tag to an object-shaped wire part.
fn tagged<T: Serialize>(kind: &str, fields: &T) -> Result<Value, serde_json::Error> {
    let mut object = Map::new();
    object.insert("type".to_owned(), Value::String(kind.to_owned()));
    if let Value::Object(rest) = serde_json::to_value(fields)? {
        object.extend(rest);
    }
    Ok(Value::Object(object))
}

impl WirePart {
    fn to_value(&self) -> Result<Value, serde_json::Error> {
        match &self.0 {
            UIPart::Text { text, streaming } | UIPart::Reasoning { text, streaming } => {
                let kind = if matches!(self.0, UIPart::Text { .. }) {
                    "text"
                } else {
                    "reasoning"
                };
                let state = if *streaming {
                    TextState::Streaming
                } else {
                    TextState::Done
                };
                tagged(
                    kind,
                    &TextWire {
                        text: text.clone(),
                        state: Some(state),
                    },
                )
            }
            UIPart::StepStart => tagged("step-start", &Map::new()),
            UIPart::Tool(part) => tagged(&format!("tool-{}", part.tool_name), &tool_to_wire(part)),
            UIPart::SourceUrl {
                source_id,
                url,
                title,
            } => tagged(
                "source-url",
                &SourceUrlWire {
                    source_id: source_id.clone(),
                    url: url.clone(),
                    title: title.clone(),
                },
            ),
            UIPart::SourceDocument {
                source_id,
                media_type,
                title,
                filename,
            } => tagged(
                "source-document",
                &SourceDocumentWire {
                    source_id: source_id.clone(),
                    media_type: media_type.clone(),
                    title: title.clone(),
                    filename: filename.clone(),
                },
            ),
            UIPart::File {
                media_type,
                url,
                filename,
            } => tagged(
                "file",
                &FileWire {
                    media_type: media_type.clone(),
                    url: url.clone(),
                    filename: filename.clone(),
                },
            ),
            UIPart::Data { name, id, data } => tagged(
                &format!("data-{name}"),
                &DataWire {
                    id: id.clone(),
                    data: data.clone(),
                },
            ),
        }
    }

    fn from_value(value: Value) -> Result<UIPart, String> {
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| "part has no string \"type\" field".to_owned())?
            .to_owned();
        let fit = |e: serde_json::Error| format!("{kind} part: {e}");
        let text = |value: Value| -> Result<(String, bool), String> {
            let wire: TextWire = serde_json::from_value(value).map_err(fit)?;
            Ok((wire.text, wire.state == Some(TextState::Streaming)))
        };
        Ok(match kind.as_str() {
            "text" => {
                let (text, streaming) = text(value)?;
                UIPart::Text { text, streaming }
            }
            "reasoning" => {
                let (text, streaming) = text(value)?;
                UIPart::Reasoning { text, streaming }
            }
            "step-start" => UIPart::StepStart,
            "source-url" => {
                let wire: SourceUrlWire = serde_json::from_value(value).map_err(fit)?;
                UIPart::SourceUrl {
                    source_id: wire.source_id,
                    url: wire.url,
                    title: wire.title,
                }
            }
            "source-document" => {
                let wire: SourceDocumentWire = serde_json::from_value(value).map_err(fit)?;
                UIPart::SourceDocument {
                    source_id: wire.source_id,
                    media_type: wire.media_type,
                    title: wire.title,
                    filename: wire.filename,
                }
            }
            "file" => {
                let wire: FileWire = serde_json::from_value(value).map_err(fit)?;
                UIPart::File {
                    media_type: wire.media_type,
                    url: wire.url,
                    filename: wire.filename,
                }
            }
            "dynamic-tool" => {
                let wire: DynamicToolWire = serde_json::from_value(value).map_err(fit)?;
                tool_from_wire(wire.tool_name, wire.tool)
            }
            other => {
                if let Some(tool_name) = other.strip_prefix("tool-") {
                    let wire: ToolWire = serde_json::from_value(value).map_err(fit)?;
                    tool_from_wire(tool_name.to_owned(), wire)
                } else if let Some(name) = other.strip_prefix("data-") {
                    let wire: DataWire = serde_json::from_value(value).map_err(fit)?;
                    UIPart::Data {
                        name: name.to_owned(),
                        id: wire.id,
                        data: wire.data,
                    }
                } else {
                    return Err(format!("unknown part type {other:?}"));
                }
            }
        })
    }
}

impl Serialize for WirePart {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value()
            .map_err(S::Error::custom)?
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WirePart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        WirePart::from_value(value)
            .map(WirePart)
            .map_err(D::Error::custom)
    }
}

/// Encodes messages in the AI SDK's wire shape.
pub fn messages_to_wire(messages: &[UIMessage]) -> Value {
    Value::Array(
        messages
            .iter()
            .map(|m| {
                serde_json::to_value(WireMessage(m.clone(), Vec::new())).unwrap_or(Value::Null)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(value: Value) -> Result<ChatRequest, WireError> {
        ChatRequest::from_value(value)
    }

    #[test]
    fn a_submit_request_decodes_with_free_form_fields_in_body() {
        let req = request(json!({
            "id": "chat-1",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
            "trigger": "submit-message",
            "messageId": null,
            "mode": "fast",
            "tenant": {"id": 7}
        }))
        .expect("decodes");
        assert_eq!(req.chat_id, "chat-1");
        assert_eq!(req.trigger, Trigger::SubmitMessage);
        assert_eq!(req.messages, vec![UIMessage::user("u1", "hi")]);
        assert_eq!(req.body.get("mode"), Some(&json!("fast")));
        assert_eq!(req.body.get("tenant"), Some(&json!({"id": 7})));
        assert!(!req.body.contains_key("messages"));
    }

    #[test]
    fn tool_parts_map_camel_case_to_snake_case() {
        let req = request(json!({
            "id": "c",
            "trigger": "submit-message",
            "messages": [{"id": "a1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-get_location", "toolCallId": "call_1", "state": "output-available",
                 "input": {"precise": true}, "output": "Berlin"},
                {"type": "tool-ask", "toolCallId": "call_2", "state": "output-error",
                 "input": {}, "errorText": "denied"}
            ]}]
        }))
        .expect("decodes");
        let parts = &req.messages[0].parts;
        assert_eq!(parts[0], UIPart::StepStart);
        let UIPart::Tool(tool) = &parts[1] else {
            panic!("expected a tool part, got {:?}", parts[1]);
        };
        assert_eq!(tool.call_id, "call_1");
        assert_eq!(tool.tool_name, "get_location");
        assert_eq!(tool.state, ToolPartState::OutputAvailable);
        assert_eq!(tool.output, Some(json!("Berlin")));
        let UIPart::Tool(tool) = &parts[2] else {
            panic!("expected a tool part, got {:?}", parts[2]);
        };
        assert_eq!(tool.state, ToolPartState::OutputError);
        assert_eq!(tool.error_text.as_deref(), Some("denied"));
    }

    #[test]
    fn every_part_kind_round_trips_through_the_wire() {
        let message = UIMessage {
            id: "a1".into(),
            role: Role::Assistant,
            metadata: Some(json!({"model": "m"})),
            parts: vec![
                UIPart::StepStart,
                UIPart::Reasoning {
                    text: "think".into(),
                    streaming: false,
                },
                UIPart::Text {
                    text: "hello".into(),
                    streaming: true,
                },
                UIPart::Tool(ToolPart {
                    call_id: "c1".into(),
                    tool_name: "search".into(),
                    state: ToolPartState::OutputAvailable,
                    input: json!({"q": "x"}),
                    output: Some(json!([1, 2])),
                    error_text: None,
                    preliminary: true,
                }),
                UIPart::SourceUrl {
                    source_id: "s1".into(),
                    url: "https://example.com".into(),
                    title: Some("Example".into()),
                },
                UIPart::SourceDocument {
                    source_id: "s2".into(),
                    media_type: "application/pdf".into(),
                    title: "Doc".into(),
                    filename: None,
                },
                UIPart::File {
                    media_type: "image/png".into(),
                    url: "data:image/png;base64,AA==".into(),
                    filename: Some("a.png".into()),
                },
                UIPart::Data {
                    name: "weather".into(),
                    id: Some("d1".into()),
                    data: json!({"temp": 3}),
                },
            ],
        };
        let wire = serde_json::to_value(WireMessage(message.clone(), Vec::new())).expect("encodes");
        assert_eq!(
            wire["parts"][2],
            json!({"type": "text", "text": "hello", "state": "streaming"})
        );
        assert_eq!(
            wire["parts"][3],
            json!({"type": "tool-search", "toolCallId": "c1", "state": "output-available",
                   "input": {"q": "x"}, "output": [1, 2], "preliminary": true})
        );
        assert_eq!(wire["parts"][4]["sourceId"], json!("s1"));
        assert_eq!(wire["parts"][6]["mediaType"], json!("image/png"));
        assert_eq!(
            wire["parts"][7],
            json!({"type": "data-weather", "id": "d1", "data": {"temp": 3}})
        );
        let back: WireMessage = serde_json::from_value(wire).expect("decodes");
        assert_eq!(back.0, message);
    }

    #[test]
    fn dynamic_tool_parts_carry_their_name_in_a_field() {
        let part: WirePart = serde_json::from_value(json!({
            "type": "dynamic-tool", "toolName": "mcp_search", "toolCallId": "c9",
            "state": "input-available", "input": {"q": 1}
        }))
        .expect("decodes");
        let UIPart::Tool(tool) = part.0 else {
            panic!("expected a tool part");
        };
        assert_eq!(tool.tool_name, "mcp_search");
        assert_eq!(tool.state, ToolPartState::InputAvailable);
    }

    #[test]
    fn errors_name_the_path_of_the_bad_field() {
        let err = request(json!({
            "id": "c",
            "messages": [
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "ok"}]},
                {"id": "u2", "role": "user", "parts": [{"type": "telepathy"}]}
            ]
        }))
        .expect_err("unknown part type must fail");
        let text = err.to_string();
        assert!(text.contains("messages[1].parts[0]"), "{text}");
        assert!(text.contains("telepathy"), "{text}");

        let err = request(json!({"messages": []})).expect_err("missing id must fail");
        assert!(err.to_string().contains("id"), "{err}");

        let err = ChatRequest::from_slice(b"{nope").expect_err("not JSON");
        assert!(matches!(err, WireError::NotJson(_)));

        let err = request(json!({"id": "c", "messages": [], "trigger": "shout"}))
            .expect_err("unknown trigger must fail");
        assert!(err.to_string().contains("trigger"), "{err}");
    }

    #[test]
    fn a_tool_part_in_an_unknown_state_is_refused() {
        let err = serde_json::from_value::<WirePart>(json!({
            "type": "tool-x", "toolCallId": "c", "state": "cooking", "input": {}
        }))
        .expect_err("an unknown state is refused");
        assert!(err.to_string().contains("cooking"), "{err}");
    }

    #[test]
    fn approval_answers_are_read_from_assistant_tool_parts() {
        let req = request(json!({"id": "c", "messages": [
            {"id": "u", "role": "user", "parts": [{"type": "text", "text": "book it"}]},
            {"id": "a", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-book", "toolCallId": "call_1", "state": "approval-responded",
                 "input": {"hotel": "H"},
                 "approval": {"id": "approval_1", "approved": false, "reason": "too pricey"}},
                {"type": "tool-book", "toolCallId": "call_2", "state": "approval-requested",
                 "input": {"hotel": "I"}, "approval": {"id": "approval_2"}}
            ]}
        ]}))
        .expect("decodes");
        assert_eq!(
            req.approvals,
            vec![ApprovalResponse {
                approval_id: "approval_1".into(),
                call_id: "call_1".into(),
                approved: false,
                reason: Some("too pricey".into()),
            }]
        );
        let UIPart::Tool(tool) = &req.messages[1].parts[2] else {
            panic!("a tool part")
        };
        assert_eq!(tool.state, ToolPartState::ApprovalRequested);
    }
}
