//! From logged events to the AI SDK's UI message stream.
//!
//! A client sees a turn as a sequence of [`UiChunk`]s (`start`, `start-step`, `text-delta`,
//! `tool-output-available`, `finish` …). Those chunks are a pure function of the turn's events in
//! `seq` order: [`UiStreamMapper`] folds envelopes into chunks and holds only what the mapping
//! needs to remember (whether reasoning is shown, which tool calls already reported an output).
//! A tool call's life (input, approval asked, denied, output, error, repaired) is read from the
//! store's [`Facts`] fold, which the mapper feeds each envelope: the chunks of a call are drawn
//! from the call's fact at the stage the envelope moved it to.
//! The live stream and a resumed stream both run the same mapper over the same events, so a
//! client that reconnects sees byte-identical parts, and the n-th chunk of a turn is the same
//! chunk however often it is served — which is what WebSocket resume sequences count.
//!
//! One request can run several turn attempts: context-overflow recovery ends a failed attempt
//! and retries under the same request id. A stream follows the request, so the mapper holds a
//! failed attempt's error until the request has its verdict, which the store's
//! [`RequestFold`] decides: a `turn_failed` makes it final, a retry's `turn_started` drops it
//! (the retry's `start` renames the message to the retry's id). A step
//! boundary is only sent once the step shows something, so an attempt refused before its first
//! part leaves no empty step in the client's message.

use std::collections::HashSet;

use mull_core::{
    DecisionAction, Envelope, Event, FinishReason, Source, StreamPart, ToolPartState, TurnStatus,
};
use mull_store::facts::{CallOutcome, CallStage, FactChange, Facts, ToolCallFact};
use mull_store::{RequestFold, RequestPhase};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One part of the UI message stream, shaped as the AI SDK's `uiMessageChunkSchema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub enum UiChunk {
    /// The assistant message begins.
    Start {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    /// A model step begins.
    StartStep,
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        delta: String,
    },
    TextEnd {
        id: String,
    },
    ReasoningStart {
        id: String,
    },
    ReasoningDelta {
        id: String,
        delta: String,
    },
    ReasoningEnd {
        id: String,
    },
    /// The model starts streaming a tool call's input.
    ToolInputStart {
        tool_call_id: String,
        tool_name: String,
    },
    /// More of the input's JSON text.
    ToolInputDelta {
        tool_call_id: String,
        input_text_delta: String,
    },
    /// The complete input (parsed JSON, or the raw text when it is not JSON).
    ToolInputAvailable {
        tool_call_id: String,
        tool_name: String,
        input: Value,
    },
    /// A tool's output; `preliminary` while a streaming tool has more to say.
    ToolOutputAvailable {
        tool_call_id: String,
        output: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preliminary: Option<bool>,
    },
    ToolOutputError {
        tool_call_id: String,
        error_text: String,
    },
    /// The call waits for a person's approval (the AI SDK's `needsApproval`); the client
    /// answers with `addToolApprovalResponse`, naming `approval_id`.
    ToolApprovalRequest {
        approval_id: String,
        tool_call_id: String,
    },
    /// A person denied the call; it did not run.
    ToolOutputDenied {
        tool_call_id: String,
    },
    SourceUrl {
        source_id: String,
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    SourceDocument {
        source_id: String,
        media_type: String,
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
    /// A generated file, as a URL (data URLs for inline bytes).
    File {
        url: String,
        media_type: String,
    },
    /// Metadata for the assistant message, shallow-merged into it by the client (the turn's
    /// `TurnConfig::message_metadata`).
    MessageMetadata {
        message_metadata: Value,
    },
    /// A model step ended.
    FinishStep,
    /// The turn completed.
    Finish {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
    },
    /// The turn failed; nothing follows.
    Error {
        error_text: String,
    },
    /// The turn was aborted; nothing follows.
    Abort {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl UiChunk {
    /// The chunk as one line of JSON, as SSE `data:` and WebSocket frames carry it.
    pub fn to_json(&self) -> String {
        // Plain data with string keys: encoding cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether the chunk shows something of a step (so the step's `start-step` must precede
    /// it); the message's start and the stream's endings do not.
    fn shows_step_content(&self) -> bool {
        !matches!(
            self,
            UiChunk::Start { .. } | UiChunk::StartStep | UiChunk::MessageMetadata { .. }
        ) && !self.is_terminal()
    }

    /// Whether the chunk ends the stream.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            UiChunk::Finish { .. } | UiChunk::Error { .. } | UiChunk::Abort { .. }
        )
    }
}

/// Folds one turn's envelopes, in `seq` order, into UI message stream chunks.
#[derive(Debug, Clone)]
pub struct UiStreamMapper {
    /// Forced off by the server, whatever the turn says.
    hide_reasoning: bool,
    /// The turn's `send_reasoning`, once `turn_configured` told it.
    send_reasoning: bool,
    /// The facts of the events mapped so far: each tool call's life.
    facts: Facts,
    /// What of each call reached the client.
    sent: Sent,
    /// The finish reason of the latest step.
    finish_reason: FinishReason,
    /// The request mapped (the first one met): its attempts and verdict.
    request: Option<RequestFold>,
    /// A step began and has shown nothing yet: its `start-step` is still held back.
    step_pending: bool,
    finished: bool,
}

impl Default for UiStreamMapper {
    fn default() -> Self {
        Self::new()
    }
}

impl UiStreamMapper {
    /// A mapper that shows reasoning when the turn's configuration says so (the default).
    pub fn new() -> Self {
        Self {
            hide_reasoning: false,
            send_reasoning: true,
            facts: Facts::new(),
            sent: Sent::default(),
            finish_reason: FinishReason::Unknown,
            request: None,
            step_pending: false,
            finished: false,
        }
    }

    /// A mapper that never shows reasoning.
    pub fn without_reasoning() -> Self {
        Self {
            hide_reasoning: true,
            ..Self::new()
        }
    }

    /// Whether the turn has ended (a terminal chunk was produced or the turn finished).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Maps one envelope, appending the chunks it produces to `out`.
    pub fn map_into(&mut self, envelope: &Envelope, out: &mut Vec<UiChunk>) {
        if self.finished {
            return;
        }
        let from = out.len();
        let phases = self.fold(envelope);
        match self.facts.push(envelope) {
            Some(FactChange::Call { call, stage }) => {
                if let Some(call) = self.facts.calls().get(call) {
                    self.sent.call(call, stage, out);
                }
            }
            _ => self.map_event(&envelope.event, phases, out),
        }
        if self.step_pending {
            if let Some(at) = out[from..].iter().position(UiChunk::shows_step_content) {
                out.insert(from + at, UiChunk::StartStep);
                self.step_pending = false;
            }
        }
    }

    /// The stream ends without more events: a failure still awaiting its verdict is final.
    pub fn end(&mut self, out: &mut Vec<UiChunk>) {
        if let Some(request) = &self.request {
            if request.phase() == RequestPhase::AwaitingVerdict && !self.finished {
                let error_text = request.current().and_then(|a| a.error.clone());
                out.push(UiChunk::Error {
                    error_text: error_text.unwrap_or_else(|| "the turn failed".to_owned()),
                });
            }
        }
        self.finished = true;
    }

    /// Folds `envelope` into the request it maps (the first one it meets). When the event is
    /// the request's, returns where the request stood before it and after it.
    fn fold(&mut self, envelope: &Envelope) -> Option<(RequestPhase, RequestPhase)> {
        if self.request.is_none() {
            let request_id = match &envelope.event {
                Event::TurnStarted { request_id, .. }
                | Event::TurnFailed {
                    request_id: Some(request_id),
                    ..
                } => request_id,
                _ => return None,
            };
            self.request = Some(RequestFold::new(request_id.clone()));
        }
        let request = self.request.as_mut()?;
        let before = request.phase();
        request.apply(envelope).then(|| (before, request.phase()))
    }

    fn map_event(
        &mut self,
        event: &Event,
        phases: Option<(RequestPhase, RequestPhase)>,
        out: &mut Vec<UiChunk>,
    ) {
        match event {
            // A continuation extends the client's last assistant message (the AI SDK starts a
            // new message when `start` names another id), so it names none. A retry names its
            // own message, which replaces the failed attempt's.
            Event::TurnStarted {
                message_id,
                continuation,
                ..
            } => {
                self.step_pending = false;
                out.push(UiChunk::Start {
                    message_id: (!continuation).then(|| message_id.clone()),
                })
            }
            Event::TurnConfigured { config } => self.send_reasoning = config.send_reasoning,
            Event::StepStarted { .. } => self.step_pending = true,
            Event::Chunk { part, .. } => self.map_part(part, out),
            Event::MessageMetadataUpdated { metadata, .. } => out.push(UiChunk::MessageMetadata {
                message_metadata: Value::Object(metadata.clone()),
            }),
            Event::StepFinished { record } => {
                self.finish_reason = record.finish_reason;
                out.push(UiChunk::FinishStep);
            }
            // The request's failure, reported once. After its attempt's end it is the verdict
            // (no retry follows); before that end, the end finishes the stream.
            Event::TurnFailed { error, .. } => {
                let Some((before, after)) = phases else {
                    return;
                };
                if matches!(before, RequestPhase::AwaitingEnd | RequestPhase::Over) {
                    return;
                }
                out.push(UiChunk::Error {
                    error_text: error.clone(),
                });
                self.finished = after == RequestPhase::Over;
            }
            Event::TurnFinished { status, error, .. } => {
                self.step_pending = false;
                match status {
                    TurnStatus::Completed => out.push(UiChunk::Finish {
                        finish_reason: finish_reason_name(self.finish_reason),
                    }),
                    TurnStatus::Aborted => out.push(UiChunk::Abort {
                        reason: error.clone(),
                    }),
                    // Held until the verdict: overflow recovery may retry the request.
                    TurnStatus::Error
                        if phases.map(|(_, after)| after)
                            == Some(RequestPhase::AwaitingVerdict) =>
                    {
                        return;
                    }
                    // Reported already: the failure came before this end.
                    TurnStatus::Error => {}
                    // A running status on a finish event means nothing to a client, nor does
                    // a status only readers show.
                    TurnStatus::Running | TurnStatus::Interrupted => return,
                }
                self.finished = true;
            }
            _ => {}
        }
    }

    /// Maps one envelope to its chunks.
    pub fn map(&mut self, envelope: &Envelope) -> Vec<UiChunk> {
        let mut out = Vec::new();
        self.map_into(envelope, &mut out);
        out
    }

    fn map_part(&mut self, part: &StreamPart, out: &mut Vec<UiChunk>) {
        if part.is_reasoning() && (self.hide_reasoning || !self.send_reasoning) {
            return;
        }
        let chunk = match part {
            StreamPart::TextStart { id } => UiChunk::TextStart { id: id.clone() },
            StreamPart::TextDelta { id, text } => UiChunk::TextDelta {
                id: id.clone(),
                delta: text.clone(),
            },
            StreamPart::TextEnd { id } => UiChunk::TextEnd { id: id.clone() },
            StreamPart::ReasoningStart { id } => UiChunk::ReasoningStart { id: id.clone() },
            StreamPart::ReasoningDelta { id, text } => UiChunk::ReasoningDelta {
                id: id.clone(),
                delta: text.clone(),
            },
            StreamPart::ReasoningEnd { id } => UiChunk::ReasoningEnd { id: id.clone() },
            StreamPart::Source {
                source: Source::Url { id, url, title },
            } => UiChunk::SourceUrl {
                source_id: id.clone(),
                url: url.clone(),
                title: title.clone(),
            },
            StreamPart::Source {
                source:
                    Source::Document {
                        id,
                        media_type,
                        title,
                        filename,
                    },
            } => UiChunk::SourceDocument {
                source_id: id.clone(),
                media_type: media_type.clone(),
                title: title.clone(),
                filename: filename.clone(),
            },
            StreamPart::File { media_type, data } => UiChunk::File {
                url: file_url(media_type, data),
                media_type: media_type.clone(),
            },
            StreamPart::ToolInputStart { call_id, tool_name } => UiChunk::ToolInputStart {
                tool_call_id: call_id.clone(),
                tool_name: tool_name.clone(),
            },
            StreamPart::ToolInputDelta { call_id, delta } => UiChunk::ToolInputDelta {
                tool_call_id: call_id.clone(),
                input_text_delta: delta.clone(),
            },
            StreamPart::ToolCall {
                call_id,
                tool_name,
                input,
            } => {
                if !self.sent.inputs.insert(call_id.clone()) {
                    return;
                }
                UiChunk::ToolInputAvailable {
                    tool_call_id: call_id.clone(),
                    tool_name: tool_name.clone(),
                    input: parse_input(input),
                }
            }
            StreamPart::ToolResult {
                call_id,
                output,
                preliminary,
                ..
            } => {
                if *preliminary {
                    UiChunk::ToolOutputAvailable {
                        tool_call_id: call_id.clone(),
                        output: output.clone(),
                        preliminary: Some(true),
                    }
                } else {
                    return self
                        .sent
                        .output(call_id, true, Some(output.clone()), None, "", out);
                }
            }
            StreamPart::ToolError { call_id, error, .. } => {
                return self
                    .sent
                    .output(call_id, false, None, Some(error.clone()), "", out);
            }
            // The error reaches the client once, from the turn's end; the rest is not shown.
            StreamPart::ToolInputEnd { .. }
            | StreamPart::Raw { .. }
            | StreamPart::Error { .. }
            | StreamPart::Finish { .. }
            | StreamPart::StreamStart { .. }
            | StreamPart::ResponseMetadata { .. } => return,
        };
        out.push(chunk);
    }
}

/// What of each tool call reached the client: its input once, its final output once.
#[derive(Debug, Clone, Default)]
struct Sent {
    /// Calls whose input reached the client as `tool-input-available`.
    inputs: HashSet<String>,
    /// Calls whose final output (or error) reached the client.
    outputs: HashSet<String>,
}

impl Sent {
    /// The chunks of a call that reached `stage`: its input when it started, the request
    /// when a person is asked, and its outcome — denied (a person said no), an output, an
    /// error — when it ended.
    fn call(&mut self, call: &ToolCallFact, stage: CallStage, out: &mut Vec<UiChunk>) {
        let id = &call.call_id;
        match (stage, &call.outcome) {
            (CallStage::Started, _) if self.inputs.insert(id.clone()) => {
                out.push(UiChunk::ToolInputAvailable {
                    tool_call_id: id.clone(),
                    tool_name: call.tool.clone(),
                    input: call.input.clone().unwrap_or(Value::Null),
                });
            }
            (CallStage::ApprovalRequested, _) => {
                if let Some(approval) = &call.approval {
                    out.push(UiChunk::ToolApprovalRequest {
                        approval_id: approval.approval_id.clone(),
                        tool_call_id: id.clone(),
                    });
                }
            }
            (CallStage::Finished, Some(_))
                if call.action() == Some(DecisionAction::Denied)
                    && self.outputs.insert(id.clone()) =>
            {
                out.push(UiChunk::ToolOutputDenied {
                    tool_call_id: id.clone(),
                });
            }
            (CallStage::Finished | CallStage::ClientAnswered | CallStage::Repaired, Some(o)) => {
                let (success, default_error) = match o {
                    CallOutcome::Finished { success, .. } => (*success, "the tool failed"),
                    CallOutcome::ClientAnswered { state, .. } => (
                        *state == ToolPartState::OutputAvailable,
                        "Tool execution denied by user",
                    ),
                    _ => (false, ""),
                };
                let (output, error) = (o.output().cloned(), o.error().cloned());
                self.output(id, success, output, error, default_error, out);
            }
            _ => {}
        }
    }

    /// A call's final output or error, sent once.
    fn output(
        &mut self,
        call_id: &str,
        success: bool,
        output: Option<Value>,
        error: Option<String>,
        default_error: &str,
        out: &mut Vec<UiChunk>,
    ) {
        if !self.outputs.insert(call_id.to_owned()) {
            return;
        }
        out.push(if success {
            UiChunk::ToolOutputAvailable {
                tool_call_id: call_id.to_owned(),
                output: output.unwrap_or(Value::Null),
                preliminary: None,
            }
        } else {
            UiChunk::ToolOutputError {
                tool_call_id: call_id.to_owned(),
                error_text: error.unwrap_or_else(|| default_error.to_owned()),
            }
        });
    }
}

/// The tool input as JSON when it parses, else the raw text (kept as evidence).
fn parse_input(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// A file part's URL: the data itself when it already is a URL, else a base64 data URL.
fn file_url(media_type: &str, data: &str) -> String {
    if data.starts_with("data:") || data.contains("://") {
        data.to_owned()
    } else {
        format!("data:{media_type};base64,{data}")
    }
}

/// The AI SDK's name for a finish reason; `unknown` has none, so it is left out.
fn finish_reason_name(reason: FinishReason) -> Option<String> {
    match reason {
        FinishReason::Unknown => None,
        other => Some(other.as_str().to_owned()),
    }
}

#[cfg(test)]
mod tests;
