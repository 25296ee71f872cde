//! Projections: the state of a session as a fold over its events.
//!
//! [`SessionState::apply`] takes one envelope at a time, so the live engine keeps a state
//! current as it appends, and opening a session rebuilds the same state from the log.
//! Applying is cheap (no per-event allocation beyond what the state keeps).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use mull_core::{
    DecisionAction, EntryPath, Envelope, ErrorStage, Event, EventRef, Role, SubmissionStatus,
    ToolPartState, TurnStatus, UIMessage, UIPart, Usage,
};
use serde::Serialize;
use serde_json::Value;

use crate::approvals::{ApprovalAnswer, PendingApproval};

mod approval_fold;
mod draft;
mod tool_calls;

pub(crate) use draft::find_tool_part;
pub use tool_calls::{SessionToolCalls, ToolCallRecord};

/// The error a tool call without a result gets in a fork cut before the result came.
pub const FORKED_TOOL_CALL: &str = "the session was forked before this call finished";

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
    /// Calls a person denied (or whose approval request expired).
    pub denied: u32,
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
    /// Usage summed from `step_finished`, replaced by `turn_finished`'s total: the turn's own
    /// model calls.
    pub usage: Usage,
    /// What the sub-agents this turn's tool calls ran used (`subagent_finished`); see
    /// [`TurnSummary::total_usage`].
    #[serde(skip_serializing_if = "is_zero")]
    pub subagent_usage: Usage,
    pub tools: ToolStats,
    pub hook_failures: u32,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<u64>,
    /// The turn's `turn_started` event.
    pub first_seq: u64,
}

/// Whether a usage counts nothing (a turn that ran no sub-agent).
fn is_zero(usage: &Usage) -> bool {
    *usage == Usage::default()
}

impl TurnSummary {
    /// The turn's own usage and its sub-agents' together: what the turn cost in all.
    pub fn total_usage(&self) -> Usage {
        let mut total = self.usage.clone();
        total.add(&self.subagent_usage);
        total
    }
}

/// A sub-agent's turn a tool call of this session ran (parent side of the link).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubagentRun {
    /// The parent turn the call belongs to.
    pub turn_id: Option<String>,
    pub call_id: String,
    pub tool: String,
    pub agent: String,
    pub child_session_id: String,
    pub depth: u32,
    /// How the child's turn ended; `None` while it runs (or when a crash cut it: the child
    /// session's own turn says how recovery resolved it).
    pub status: Option<TurnStatus>,
    /// The child session's usage, once it ended.
    pub usage: Usage,
}

/// The session and tool call a sub-agent's session runs for (child side of the link).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubagentParent {
    pub session_id: String,
    pub turn_id: String,
    pub call_id: String,
    /// 1 for the child of a session nobody started, 2 for its child, …
    pub depth: u32,
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
    /// Tool calls parked on a person's approval (see [`crate::approvals`]).
    pub pending_approvals: Vec<PendingApproval>,
    /// Approval requests whose calls have an outcome (kept so a late answer is told apart
    /// from an unknown id).
    pub closed_approvals: Vec<PendingApproval>,
    pub submissions: Vec<Submission>,
    /// Usage of every finished step of the session, and of every sub-agent it ran (folded from
    /// `subagent_finished`, each child's total once).
    pub usage: Usage,
    /// The sub-agent turns this session's tool calls ran, in the order they started.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentRun>,
    /// Set when this session is a sub-agent's: whose tool call it runs for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<SubagentParent>,
    /// The current value of every context block, by name, from `context_block_updated`.
    pub context_blocks: BTreeMap<String, String>,
    /// The last event applied (0 before any).
    pub last_seq: u64,
    /// When the last event applied was written (`None` before any).
    pub last_at: Option<DateTime<Utc>>,
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
            pending_approvals: Vec::new(),
            closed_approvals: Vec::new(),
            submissions: Vec::new(),
            usage: Usage::default(),
            subagents: Vec::new(),
            parent: None,
            context_blocks: BTreeMap::new(),
            last_seq: 0,
            last_at: None,
            unknown_events: 0,
            open_blocks: Vec::new(),
        }
    }

    /// Shows the turns still running as interrupted: what a reader does when no writer has
    /// the log open, since nothing will finish them before the next writer resolves them.
    /// A `turn_finished` folded in later ends such a turn as usual.
    pub fn mark_interrupted(&mut self) {
        for turn in &mut self.turns {
            if turn.status == TurnStatus::Running {
                turn.status = TurnStatus::Interrupted;
            }
        }
    }

    /// Folds one event in. Events of other sessions are ignored.
    pub fn apply(&mut self, env: &Envelope) {
        if env.session_id == self.session_id {
            self.apply_own(EventRef::of(env));
        }
    }

    /// Folds in one event of this session, borrowed in parts: how the engine folds the event
    /// it has just appended, without building an envelope for it.
    pub fn apply_own(&mut self, e: EventRef<'_>) {
        self.last_seq = e.seq;
        self.last_at = Some(e.at);
        match e.event {
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
                    turn_id: e.turn_id.map(str::to_owned),
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
                    subagent_usage: Usage::default(),
                    tools: ToolStats::default(),
                    hook_failures: 0,
                    started_at: e.at,
                    finished_at: None,
                    duration_ms: None,
                    first_seq: e.seq,
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
                if let Some(turn) = self.turn_mut(e.turn_id) {
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
                        turn_id: e.turn_id.map(str::to_owned),
                    });
                }
            }
            Event::ToolDecided {
                action, call_id, ..
            } => {
                self.approval_decided(call_id);
                if let Some(turn) = self.turn_mut(e.turn_id) {
                    let stats = &mut turn.tools;
                    match action {
                        DecisionAction::Allow => stats.allowed += 1,
                        DecisionAction::Rewrite => stats.rewritten += 1,
                        DecisionAction::Block => stats.blocked += 1,
                        DecisionAction::Substitute => stats.substituted += 1,
                        DecisionAction::Invalid => stats.invalid += 1,
                        DecisionAction::HookFailed => stats.hook_failed += 1,
                        DecisionAction::Denied => stats.denied += 1,
                    }
                }
            }
            Event::ToolCallFinished {
                call_id,
                success,
                duration_ms,
                output,
                error,
                ..
            } => {
                self.approval_finished(call_id, None, output.as_ref(), error.as_ref());
                if let Some(turn) = self.turn_mut(e.turn_id) {
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
                    // A streaming tool's preliminary output was progress, not a result.
                    part.state = ToolPartState::OutputError;
                    part.error_text = Some(error_text.clone());
                    part.output = None;
                    part.preliminary = false;
                }
                self.pending_client_calls.retain(|c| c.call_id != *call_id);
                self.approval_repaired(call_id);
            }
            Event::ToolApprovalRequested { .. } => self.approval_requested(&e),
            Event::ToolApprovalAnswered {
                approval_id,
                approved,
                reason,
                expired,
                ..
            } => self.approval_answered(
                approval_id,
                ApprovalAnswer {
                    approved: *approved,
                    reason: reason.clone(),
                    expired: *expired,
                    at: e.at,
                },
            ),
            Event::StepFinished { record } => {
                self.usage.add(&record.usage);
                if let Some(turn) = self.turn_mut(e.turn_id) {
                    turn.steps += 1;
                    turn.usage.add(&record.usage);
                }
            }
            Event::AssistantMessageSaved { message, .. } => {
                upsert(&mut self.messages, message);
                self.approval_parts_after_save(&message.id);
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
                let at = e.at;
                if let Some(turn) = self.turn_mut(e.turn_id) {
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
                if let Some(turn) = self.turn_mut(e.turn_id) {
                    turn.error = Some(error.clone());
                    turn.error_stage = Some(*stage);
                }
            }
            Event::HookFailed { .. } => {
                if let Some(turn) = self.turn_mut(e.turn_id) {
                    turn.hook_failures += 1;
                }
            }
            Event::CompactionApplied {
                replaced_ids,
                summary,
                ..
            } => self.compact(replaced_ids, summary.as_ref()),
            Event::ContextBlockUpdated { block, content, .. } => {
                self.context_blocks.insert(block.clone(), content.clone());
            }
            Event::MessagesRetracted { message_ids, .. } => self.retract(message_ids),
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
            Event::SessionForked { origin_seq, .. } => self.cut_at_fork(*origin_seq, e.at),
            Event::SubagentStarted {
                call_id,
                tool,
                agent,
                child_session_id,
                depth,
                ..
            } => self.subagents.push(SubagentRun {
                turn_id: e.turn_id.map(str::to_owned),
                call_id: call_id.clone(),
                tool: tool.clone(),
                agent: agent.clone(),
                child_session_id: child_session_id.clone(),
                depth: *depth,
                status: None,
                usage: Usage::default(),
            }),
            Event::SubagentFinished {
                child_session_id,
                status,
                usage,
                ..
            } => {
                // The one place a child's usage joins its parent's totals.
                self.usage.add(usage);
                if let Some(turn) = self.turn_mut(e.turn_id) {
                    turn.subagent_usage.add(usage);
                }
                if let Some(run) = self
                    .subagents
                    .iter_mut()
                    .rev()
                    .find(|r| &r.child_session_id == child_session_id)
                {
                    run.status = Some(*status);
                    run.usage = usage.clone();
                }
            }
            Event::SubagentLinked {
                parent_session_id,
                parent_turn_id,
                parent_call_id,
                depth,
            } => {
                self.parent = Some(SubagentParent {
                    session_id: parent_session_id.clone(),
                    turn_id: parent_turn_id.clone(),
                    call_id: parent_call_id.clone(),
                    depth: *depth,
                })
            }
            Event::Unknown(_) => self.unknown_events += 1,
            // An input records what was asked; what it changes is folded from the events it
            // causes (the conversation from `user_messages_saved`).
            Event::SessionOpened { .. }
            | Event::TurnRequested { .. }
            | Event::StepConfigured { .. }
            | Event::ModelRetried { .. }
            | Event::PartTransformed { .. }
            | Event::CancellationRequested { .. } => {}
        }
    }

    /// Closes what a fork point cut, after the origin's prefix was folded: the running turn's
    /// draft becomes the partial assistant message (a tool call in it without a result gets an
    /// error result, as an interrupted call does), the turn ends as aborted, and the origin's
    /// unfinished submissions and awaited client calls stay the origin's.
    fn cut_at_fork(&mut self, origin_seq: u64, at: DateTime<Utc>) {
        if let Some(mut draft) = self.draft.take() {
            for part in &mut draft.parts {
                match part {
                    UIPart::Text { streaming, .. } | UIPart::Reasoning { streaming, .. } => {
                        *streaming = false
                    }
                    UIPart::Tool(tool)
                        if !matches!(
                            tool.state,
                            ToolPartState::OutputAvailable | ToolPartState::OutputError
                        ) || tool.preliminary =>
                    {
                        tool.state = ToolPartState::OutputError;
                        tool.error_text = Some(FORKED_TOOL_CALL.to_owned());
                        tool.output = None;
                        tool.preliminary = false;
                    }
                    _ => {}
                }
            }
            if draft.parts.iter().any(|p| !matches!(p, UIPart::StepStart)) {
                upsert(&mut self.messages, &draft);
            }
        }
        self.open_blocks.clear();
        for turn in &mut self.turns {
            if turn.status == TurnStatus::Running {
                turn.status = TurnStatus::Aborted;
                turn.error = Some(format!("cut by a fork at seq {origin_seq}"));
                turn.finished_at = Some(at);
                turn.duration_ms = Some((at - turn.started_at).num_milliseconds().max(0) as u64);
            }
        }
        for sub in &mut self.submissions {
            if sub.phase != SubmissionPhase::Finished {
                sub.phase = SubmissionPhase::Finished;
                sub.status = Some(SubmissionStatus::Aborted);
                sub.error = Some(format!("cut by a fork at seq {origin_seq}"));
            }
        }
        self.pending_client_calls.clear();
        self.pending_approvals.clear();
    }

    /// The turn an event belongs to: the latest with the envelope's turn id, else the latest.
    fn turn_mut(&mut self, turn_id: Option<&str>) -> Option<&mut TurnSummary> {
        match turn_id {
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

    /// Takes retracted messages out of the conversation. Client tool calls those messages
    /// asked for are no longer awaited: nothing is left to answer them into.
    fn retract(&mut self, message_ids: &[String]) {
        let retracted_calls: Vec<String> = self
            .messages
            .iter()
            .filter(|m| message_ids.contains(&m.id))
            .flat_map(|m| m.parts.iter())
            .filter_map(|p| match p {
                UIPart::Tool(tool) => Some(tool.call_id.clone()),
                _ => None,
            })
            .collect();
        self.pending_client_calls
            .retain(|c| !retracted_calls.contains(&c.call_id));
        self.pending_approvals
            .retain(|p| !retracted_calls.contains(&p.call_id));
        self.messages.retain(|m| !message_ids.contains(&m.id));
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
}

/// Replaces the message with the same id in place, or appends it.
fn upsert(messages: &mut Vec<UIMessage>, message: &UIMessage) {
    match messages.iter_mut().find(|m| m.id == message.id) {
        Some(existing) => existing.clone_from(message),
        None => messages.push(message.clone()),
    }
}

#[cfg(test)]
mod tests;
