//! A session's state and the records it is made of (turns, client calls, submissions,
//! sub-agent links), before any event is folded in.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use mull_core::{EntryPath, ErrorStage, SubmissionStatus, TurnStatus, UIMessage, Usage};
use serde::Serialize;
use serde_json::Value;

use crate::approvals::PendingApproval;
use crate::facts::Facts;

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
    /// Its end marked `on_chat_response` owed and no `chat_response_delivered` of its request
    /// followed yet: what a reopen redelivers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub response_owed: bool,
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
    pub(super) open_blocks: Vec<(String, usize)>,
    /// The facts of the session's lifecycle events (no chunks), the tool calls are read from.
    #[serde(skip)]
    pub(super) facts: Facts,
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
            facts: Facts::new(),
        }
    }

    /// What the session's events say happened: its turns, steps and tool calls, folded once.
    /// The state folds lifecycle events into them; stream parts go to the draft instead.
    pub fn facts(&self) -> &Facts {
        &self.facts
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

    /// The turn an event belongs to: the latest with the envelope's turn id, else the latest.
    pub(super) fn turn_mut(&mut self, turn_id: Option<&str>) -> Option<&mut TurnSummary> {
        match turn_id {
            Some(id) => self
                .turns
                .iter_mut()
                .rev()
                .find(|t| t.turn_id.as_deref() == Some(id)),
            None => self.turns.last_mut(),
        }
    }

    pub(super) fn submission_mut(&mut self, submission_id: &str) -> Option<&mut Submission> {
        self.submissions
            .iter_mut()
            .rev()
            .find(|s| s.submission_id == submission_id)
    }
}
