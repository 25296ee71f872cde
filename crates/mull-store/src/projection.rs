//! Projections: the state of a session as a fold over its events.
//!
//! [`SessionState::apply`] takes one envelope at a time, so the live engine keeps a state
//! current as it appends, and opening a session rebuilds the same state from the log.
//! Applying is cheap (no per-event allocation beyond what the state keeps).

use chrono::{DateTime, Utc};
use mull_core::{
    DecisionAction, EntryPath, Envelope, ErrorStage, Event, Role, Source, StreamPart,
    SubmissionStatus, ToolPart, ToolPartState, TurnStatus, UIMessage, UIPart, Usage,
};
use serde::Serialize;
use serde_json::Value;

/// Per-turn tool statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolStats {
    /// Decisions, from `tool_decided`.
    pub allowed: u32,
    pub rewritten: u32,
    pub blocked: u32,
    pub substituted: u32,
    pub invalid: u32,
    pub hook_failed: u32,
    /// Outcomes, from `tool_call_finished`.
    pub calls: u32,
    pub failures: u32,
    pub total_duration_ms: u64,
    pub max_duration_ms: u64,
}

/// One turn attempt, as lists and dashboards show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnSummary {
    pub turn_id: Option<String>,
    pub request_id: String,
    /// The assistant message the turn writes.
    pub message_id: String,
    pub entry: EntryPath,
    pub continuation: bool,
    pub attempt: u32,
    pub status: TurnStatus,
    /// The model the turn was configured with.
    pub model_id: Option<String>,
    pub error: Option<String>,
    pub error_stage: Option<ErrorStage>,
    /// Steps counted from `step_finished`, replaced by `turn_finished`'s count.
    pub steps: u32,
    /// Usage summed from `step_finished`, replaced by `turn_finished`'s total.
    pub usage: Usage,
    pub tools: ToolStats,
    pub hook_failures: u32,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<u64>,
    /// The turn's `turn_started` event.
    pub first_seq: u64,
}

/// A client-side tool call waiting for the client's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingClientCall {
    pub call_id: String,
    pub tool: String,
    pub input: Value,
    pub step: u32,
    pub turn_id: Option<String>,
}

/// Where a durable submission is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmissionPhase {
    Accepted,
    Applied,
    Finished,
}

/// A durable submission and its progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Submission {
    pub submission_id: String,
    pub idempotency_key: Option<String>,
    pub messages: Vec<UIMessage>,
    pub phase: SubmissionPhase,
    /// The request its turn ran under, once applied.
    pub request_id: Option<String>,
    /// How it ended, once finished.
    pub status: Option<SubmissionStatus>,
    pub error: Option<String>,
}

/// Everything known about one session, folded from its events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionState {
    pub session_id: String,
    /// The conversation, compaction applied.
    pub messages: Vec<UIMessage>,
    /// The assistant message the running turn is building from its chunks.
    pub draft: Option<UIMessage>,
    pub turns: Vec<TurnSummary>,
    pub pending_client_calls: Vec<PendingClientCall>,
    pub submissions: Vec<Submission>,
    /// Usage of every finished step of the session.
    pub usage: Usage,
    /// The last event applied (0 before any).
    pub last_seq: u64,
    /// Events of kinds this build does not know: counted, otherwise ignored.
    pub unknown_events: u64,
    /// Open text and reasoning blocks of the draft: (block id, part index).
    #[serde(skip)]
    open_blocks: Vec<(String, usize)>,
}

impl SessionState {
    /// The state of a session before any event.
    pub fn new(session_id: impl Into<String>) -> SessionState {
        SessionState {
            session_id: session_id.into(),
            messages: Vec::new(),
            draft: None,
            turns: Vec::new(),
            pending_client_calls: Vec::new(),
            submissions: Vec::new(),
            usage: Usage::default(),
            last_seq: 0,
            unknown_events: 0,
            open_blocks: Vec::new(),
        }
    }

    /// Folds one event in. Events of other sessions are ignored.
    pub fn apply(&mut self, env: &Envelope) {
        if env.session_id != self.session_id {
            return;
        }
        self.last_seq = env.seq;
        match &env.event {
            Event::Chunk { part, .. } => self.apply_chunk(part),
            Event::UserMessagesSaved { messages, .. } => {
                for message in messages {
                    upsert(&mut self.messages, message);
                }
            }
            Event::TurnStarted {
                request_id,
                message_id,
                entry,
                continuation,
                attempt,
                ..
            } => {
                self.turns.push(TurnSummary {
                    turn_id: env.turn_id.clone(),
                    request_id: request_id.clone(),
                    message_id: message_id.clone(),
                    entry: *entry,
                    continuation: *continuation,
                    attempt: *attempt,
                    status: TurnStatus::Running,
                    model_id: None,
                    error: None,
                    error_stage: None,
                    steps: 0,
                    usage: Usage::default(),
                    tools: ToolStats::default(),
                    hook_failures: 0,
                    started_at: env.at,
                    finished_at: None,
                    duration_ms: None,
                    first_seq: env.seq,
                });
                self.draft = Some(UIMessage {
                    id: message_id.clone(),
                    role: Role::Assistant,
                    metadata: None,
                    parts: Vec::new(),
                });
                self.open_blocks.clear();
            }
            Event::TurnConfigured { config } => {
                if let Some(turn) = self.turn_mut(env) {
                    turn.model_id = Some(config.model_id.clone());
                }
            }
            Event::StepStarted { .. } => {
                if let Some(draft) = &mut self.draft {
                    draft.parts.push(UIPart::StepStart);
                }
            }
            Event::ToolCallStarted {
                step,
                call_id,
                tool,
                input,
                client,
            } => {
                if *client {
                    self.pending_client_calls.push(PendingClientCall {
                        call_id: call_id.clone(),
                        tool: tool.clone(),
                        input: input.clone(),
                        step: *step,
                        turn_id: env.turn_id.clone(),
                    });
                }
            }
            Event::ToolDecided { action, .. } => {
                if let Some(turn) = self.turn_mut(env) {
                    let stats = &mut turn.tools;
                    match action {
                        DecisionAction::Allow => stats.allowed += 1,
                        DecisionAction::Rewrite => stats.rewritten += 1,
                        DecisionAction::Block => stats.blocked += 1,
                        DecisionAction::Substitute => stats.substituted += 1,
                        DecisionAction::Invalid => stats.invalid += 1,
                        DecisionAction::HookFailed => stats.hook_failed += 1,
                    }
                }
            }
            Event::ToolCallFinished {
                success,
                duration_ms,
                ..
            } => {
                if let Some(turn) = self.turn_mut(env) {
                    let stats = &mut turn.tools;
                    stats.calls += 1;
                    if !success {
                        stats.failures += 1;
                    }
                    stats.total_duration_ms += duration_ms;
                    stats.max_duration_ms = stats.max_duration_ms.max(*duration_ms);
                }
            }
            Event::ClientToolResult {
                call_id,
                state,
                output,
                error,
                ..
            } => {
                if let Some(part) = find_tool_part(&mut self.messages, None, call_id) {
                    part.state = *state;
                    if output.is_some() {
                        part.output = output.clone();
                    }
                    if error.is_some() {
                        part.error_text = error.clone();
                    }
                    part.preliminary = false;
                }
                self.pending_client_calls.retain(|c| c.call_id != *call_id);
            }
            Event::ToolCallRepaired {
                message_id,
                call_id,
                error_text,
                ..
            } => {
                if let Some(part) = find_tool_part(&mut self.messages, Some(message_id), call_id) {
                    part.state = ToolPartState::OutputError;
                    part.error_text = Some(error_text.clone());
                    part.preliminary = false;
                }
                self.pending_client_calls.retain(|c| c.call_id != *call_id);
            }
            Event::StepFinished { record } => {
                self.usage.add(&record.usage);
                if let Some(turn) = self.turn_mut(env) {
                    turn.steps += 1;
                    turn.usage.add(&record.usage);
                }
            }
            Event::AssistantMessageSaved { message, .. } => {
                upsert(&mut self.messages, message);
                self.draft = None;
                self.open_blocks.clear();
            }
            Event::TurnFinished {
                status,
                error,
                steps,
                usage,
                ..
            } => {
                let at = env.at;
                if let Some(turn) = self.turn_mut(env) {
                    turn.status = *status;
                    if error.is_some() {
                        turn.error = error.clone();
                    }
                    turn.steps = *steps;
                    turn.usage = usage.clone();
                    turn.finished_at = Some(at);
                    turn.duration_ms =
                        Some((at - turn.started_at).num_milliseconds().max(0) as u64);
                }
                self.draft = None;
                self.open_blocks.clear();
            }
            Event::TurnFailed { stage, error, .. } => {
                if let Some(turn) = self.turn_mut(env) {
                    turn.error = Some(error.clone());
                    turn.error_stage = Some(*stage);
                }
            }
            Event::HookFailed { .. } => {
                if let Some(turn) = self.turn_mut(env) {
                    turn.hook_failures += 1;
                }
            }
            Event::CompactionApplied {
                replaced_ids,
                summary,
                ..
            } => self.compact(replaced_ids, summary.as_ref()),
            Event::SubmissionAccepted {
                submission_id,
                idempotency_key,
                messages,
                ..
            } => self.submissions.push(Submission {
                submission_id: submission_id.clone(),
                idempotency_key: idempotency_key.clone(),
                messages: messages.clone(),
                phase: SubmissionPhase::Accepted,
                request_id: None,
                status: None,
                error: None,
            }),
            Event::SubmissionApplied {
                submission_id,
                request_id,
            } => {
                if let Some(sub) = self.submission_mut(submission_id) {
                    sub.phase = SubmissionPhase::Applied;
                    sub.request_id = Some(request_id.clone());
                }
            }
            Event::SubmissionFinished {
                submission_id,
                request_id,
                status,
                error,
            } => {
                if let Some(sub) = self.submission_mut(submission_id) {
                    sub.phase = SubmissionPhase::Finished;
                    sub.status = Some(*status);
                    sub.error = error.clone();
                    if request_id.is_some() {
                        sub.request_id = request_id.clone();
                    }
                }
            }
            Event::Unknown(_) => self.unknown_events += 1,
            Event::SessionOpened { .. }
            | Event::StepConfigured { .. }
            | Event::ModelRetried { .. }
            | Event::CancellationRequested { .. } => {}
        }
    }

    /// The turn an event belongs to: the latest with the envelope's turn id, else the latest.
    fn turn_mut(&mut self, env: &Envelope) -> Option<&mut TurnSummary> {
        match &env.turn_id {
            Some(id) => self
                .turns
                .iter_mut()
                .rev()
                .find(|t| t.turn_id.as_deref() == Some(id)),
            None => self.turns.last_mut(),
        }
    }

    fn submission_mut(&mut self, submission_id: &str) -> Option<&mut Submission> {
        self.submissions
            .iter_mut()
            .rev()
            .find(|s| s.submission_id == submission_id)
    }

    /// Removes the replaced messages and puts the summary where the first of them stood (at
    /// the start when none of them is present).
    fn compact(&mut self, replaced_ids: &[String], summary: Option<&UIMessage>) {
        let first = self
            .messages
            .iter()
            .position(|m| replaced_ids.contains(&m.id));
        self.messages.retain(|m| !replaced_ids.contains(&m.id));
        if let Some(summary) = summary {
            let at = first.unwrap_or(0).min(self.messages.len());
            self.messages.insert(at, summary.clone());
        }
    }

    fn apply_chunk(&mut self, part: &StreamPart) {
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
            StreamPart::Source { source } => parts.push(match source {
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
            }),
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
            | StreamPart::Finish { .. } => {}
        }
    }
}

fn open_block(open: &[(String, usize)], id: &str) -> Option<usize> {
    open.iter()
        .rev()
        .find(|(open, _)| open == id)
        .map(|(_, index)| *index)
}

fn new_tool_part(call_id: &str, tool_name: &str, state: ToolPartState, input: Value) -> ToolPart {
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
fn find_tool_part<'a>(
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

/// Replaces the message with the same id in place, or appends it.
fn upsert(messages: &mut Vec<UIMessage>, message: &UIMessage) {
    match messages.iter_mut().find(|m| m.id == message.id) {
        Some(existing) => existing.clone_from(message),
        None => messages.push(message.clone()),
    }
}
