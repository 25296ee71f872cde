//! The inputs of a session: every way work enters it from outside, as data.
//!
//! Architecture invariant: an input is appended to the log as one event *before* the session
//! acts on it, and that event carries everything needed to act on it again. Everything else a
//! session writes follows from its inputs, the agent's code, and what the model, the tools and
//! the clock answered — so re-executing a session is re-issuing its inputs at their recorded
//! places, with no guessing about what must have happened.
//!
//! Each input has its own event kind:
//!
//! | input | event | entry points |
//! |---|---|---|
//! | [`Input::Turn`] | `turn_requested` | `chat`, `chat_http`, `save_messages`, `continue_last_turn`, `regenerate` |
//! | [`Input::Submit`] | `submission_accepted` | `submit_messages` |
//! | [`Input::ToolResult`] | `client_tool_result` | `add_tool_result` |
//! | [`Input::Cancel`] | `cancellation_requested` | `cancel_chat`, `abort_all` |
//! | [`Input::ApprovalAnswer`] | `tool_approval_answered` (not `expired`) | `answer_approval` |
//!
//! One rule for what the conversation holds: an input records what was *asked*; the messages
//! enter the conversation when the turn takes them (`user_messages_saved`, under the turn lock),
//! and the projection folds the conversation from that event only.

use serde_json::Value;

use crate::event::{EntryPath, Event};
use crate::message::{ToolPartState, UIMessage};
use crate::model::ToolSpec;

/// Something from outside that makes a session act, as recorded in its input event.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Input {
    /// Run a turn (`turn_requested`).
    Turn(TurnRequest),
    /// A durable submission (`submission_accepted`).
    Submit {
        submission_id: String,
        idempotency_key: Option<String>,
        messages: Vec<UIMessage>,
        body: Value,
    },
    /// A client's answer to a client tool call (`client_tool_result`). The tool's name is not
    /// part of the input: the session finds it from the call.
    ToolResult {
        call_id: String,
        state: ToolPartState,
        output: Option<Value>,
        error: Option<String>,
    },
    /// Cancel one request, or every request of the session (`cancellation_requested`).
    Cancel {
        request_id: Option<String>,
        reason: String,
    },
    /// A person's answer to a tool call waiting for approval (`tool_approval_answered`; an
    /// expiry is the session's own doing, not an input).
    ApprovalAnswer {
        approval_id: String,
        approved: bool,
        reason: Option<String>,
        /// Who answered (see [`Event::ToolApprovalAnswered`]'s `by`).
        by: Option<String>,
    },
}

/// A request to run a turn, as its `turn_requested` event records it.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRequest {
    pub request_id: String,
    /// `chat`, `http`, `save_messages` or `sub_agent` (with messages), `continue_last_turn` or
    /// `regenerate` (without).
    pub entry: EntryPath,
    pub messages: Vec<UIMessage>,
    /// The fields hooks see as the turn's body (a continuation's is the one it resolved).
    pub body: Value,
    /// For a regeneration: the message it names (`None`: the last message).
    pub target: Option<String>,
    /// Tools the client answers itself.
    pub client_tools: Vec<ToolSpec>,
}

impl TurnRequest {
    /// Why this request cannot be acted on, or `Ok` when it can: the entry must be one a
    /// caller starts (auto-continuations and submissions have inputs of their own), only
    /// message entries carry messages, and only a regeneration names a target.
    pub fn check(&self) -> Result<(), String> {
        let entry = self.entry;
        match entry {
            EntryPath::Chat | EntryPath::Http | EntryPath::SaveMessages | EntryPath::SubAgent => {}
            EntryPath::ContinueLastTurn | EntryPath::Regenerate => {
                if !self.messages.is_empty() {
                    return Err(format!(
                        "a turn request with entry {entry:?} carries messages"
                    ));
                }
            }
            EntryPath::AutoContinue | EntryPath::SubmitMessages => {
                return Err(format!(
                    "entry {entry:?} is not requested directly (it follows another input)"
                ));
            }
        }
        if self.target.is_some() && entry != EntryPath::Regenerate {
            return Err(format!(
                "a turn request with entry {entry:?} names a message to regenerate"
            ));
        }
        if self.request_id.is_empty() {
            return Err("a turn request has an empty request id".to_owned());
        }
        Ok(())
    }

    /// The request's event.
    pub fn into_event(self) -> Event {
        Event::TurnRequested {
            request_id: self.request_id,
            entry: self.entry,
            messages: self.messages,
            body: self.body,
            target: self.target,
            client_tools: self.client_tools,
        }
    }
}

impl Input {
    /// The input an event records, or `None` for an event that is not an input.
    pub fn from_event(event: &Event) -> Option<Input> {
        Some(match event {
            Event::TurnRequested {
                request_id,
                entry,
                messages,
                body,
                target,
                client_tools,
            } => Input::Turn(TurnRequest {
                request_id: request_id.clone(),
                entry: *entry,
                messages: messages.clone(),
                body: body.clone(),
                target: target.clone(),
                client_tools: client_tools.clone(),
            }),
            Event::SubmissionAccepted {
                submission_id,
                idempotency_key,
                messages,
                body,
            } => Input::Submit {
                submission_id: submission_id.clone(),
                idempotency_key: idempotency_key.clone(),
                messages: messages.clone(),
                body: body.clone(),
            },
            Event::ClientToolResult {
                call_id,
                state,
                output,
                error,
                ..
            } => Input::ToolResult {
                call_id: call_id.clone(),
                state: *state,
                output: output.clone(),
                error: error.clone(),
            },
            Event::CancellationRequested { request_id, reason } => Input::Cancel {
                request_id: request_id.clone(),
                reason: reason.clone(),
            },
            Event::ToolApprovalAnswered {
                approval_id,
                approved,
                reason,
                expired: false,
                by,
                ..
            } => Input::ApprovalAnswer {
                approval_id: approval_id.clone(),
                approved: *approved,
                reason: reason.clone(),
                by: by.clone(),
            },
            _ => return None,
        })
    }
}

impl Event {
    /// Whether the event records an input (see the [`input`](crate::input) module).
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            Event::TurnRequested { .. }
                | Event::SubmissionAccepted { .. }
                | Event::ClientToolResult { .. }
                | Event::CancellationRequested { .. }
                | Event::ToolApprovalAnswered { expired: false, .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(entry: EntryPath) -> TurnRequest {
        TurnRequest {
            request_id: "req_1".into(),
            entry,
            messages: Vec::new(),
            body: Value::Null,
            target: None,
            client_tools: Vec::new(),
        }
    }

    #[test]
    fn a_turn_request_round_trips_through_its_event() {
        let req = TurnRequest {
            messages: vec![UIMessage::user("u_1", "hi")],
            body: json!({"mode": "x"}),
            ..request(EntryPath::Chat)
        };
        let event = req.clone().into_event();
        let text = event.encode();
        assert!(
            text.starts_with(r#"{"type":"turn_requested","request_id":"req_1","entry":"chat""#),
            "{text}"
        );
        assert!(!text.contains("target") && !text.contains("client_tools"));
        let back = Event::decode(crate::EVENT_VERSION, &text).expect("decodes");
        assert!(back.is_input());
        assert_eq!(Input::from_event(&back), Some(Input::Turn(req)));
    }

    #[test]
    fn malformed_requests_say_what_is_wrong() {
        assert!(request(EntryPath::Regenerate).check().is_ok());
        let err = request(EntryPath::AutoContinue).check().unwrap_err();
        assert!(err.contains("AutoContinue"), "{err}");
        let with_messages = TurnRequest {
            messages: vec![UIMessage::user("u", "x")],
            ..request(EntryPath::ContinueLastTurn)
        };
        assert!(with_messages
            .check()
            .unwrap_err()
            .contains("carries messages"));
        let target = TurnRequest {
            target: Some("m".into()),
            ..request(EntryPath::Chat)
        };
        assert!(target.check().unwrap_err().contains("regenerate"));
    }

    #[test]
    fn only_inputs_are_inputs() {
        assert!(!Event::StepStarted { step: 0 }.is_input());
        assert!(Input::from_event(&Event::StepStarted { step: 0 }).is_none());
        let cancel = Event::CancellationRequested {
            request_id: None,
            reason: "stop".into(),
        };
        assert!(matches!(
            Input::from_event(&cancel),
            Some(Input::Cancel {
                request_id: None,
                ..
            })
        ));
    }
}
