//! A turn's events turned into a readable timeline: text deltas coalesced into text, reasoning
//! folded into one line, every fact about a tool call gathered on one row, and stalls between
//! events made visible.
//!
//! The builder is incremental (`push` one envelope at a time) so the same code serves a page
//! loaded from the log, events arriving live, and a replay cursor moving forward. A tool
//! call's row is drawn from the store's [`Facts`] fold of the same envelopes: the builder
//! reads the call's fact at the stage an envelope moved it to, not the event.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mull_core::{
    wire_name, DecisionAction, Envelope, Event, FinishReason, StreamPart, TurnStatus, Usage,
};
use mull_store::facts::{CallOutcome, CallStage, FactChange, Facts, ToolCallFact};
use mull_store::tool_usage::{tool_usage, CallFacts, ToolUsage};
use mull_store::ApprovalAnswer;

/// A gap between two events at least this long is shown, and splits coalesced text.
pub const STALL_MS: i64 = 1000;

/// One row of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The first event folded into this row.
    pub first_seq: u64,
    /// The last event folded into this row.
    pub last_seq: u64,
    /// How many events the row stands for.
    pub events: usize,
    /// When the row's first event happened.
    pub at: DateTime<Utc>,
    /// Silence before the row's first event, when it reached [`STALL_MS`].
    pub gap_ms: Option<i64>,
    /// What the row shows.
    pub kind: ItemKind,
}

/// What a timeline row stands for.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemKind {
    /// The turn began.
    TurnStarted { entry: String, attempt: u32 },
    /// The turn's configuration was decided.
    Configured { model_id: String, tools: usize },
    /// A step began.
    StepStarted { step: u32 },
    /// A step ended.
    StepFinished {
        step: u32,
        finish_reason: FinishReason,
        usage: Usage,
    },
    /// Text the model streamed (deltas joined); `open` while the block streams.
    Text { text: String, open: bool },
    /// The model's reasoning, folded to one line.
    Reasoning { text: String, open: bool },
    /// A tool call with everything known about it.
    Tool(ToolRow),
    /// A model call is retried.
    Retry { attempt: u32, error: String },
    /// Something failed: a stream error, a failed turn, a failed hook.
    Error { what: String, message: String },
    /// History was compacted: `replaced` messages now read as one summary (or were shortened).
    Compacted {
        replaced: usize,
        reason: String,
        shortened: bool,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// Messages were taken back out of the conversation (an answer being regenerated, and
    /// what followed it), by the request named.
    Retracted {
        messages: usize,
        request_id: Option<String>,
    },
    /// The assistant message was saved.
    MessageSaved { parts: usize },
    /// The turn ended.
    TurnFinished {
        status: TurnStatus,
        error: Option<String>,
    },
    /// Any other event, summarised by kind.
    Other { kind: String },
}

/// Everything known about one tool call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolRow {
    pub call_id: String,
    pub tool: String,
    /// The input, as JSON text.
    pub input: String,
    pub decision: Option<DecisionAction>,
    pub reason: Option<String>,
    pub duration_ms: Option<u64>,
    /// `Some(true)` once it succeeded, `Some(false)` once it failed.
    pub success: Option<bool>,
    pub error: Option<String>,
    /// The output (or the start of it), as JSON text.
    pub output: Option<String>,
    /// A client tool waiting for the client.
    pub client: bool,
    /// The sub-agent session the call runs (an agent tool's call), to drill into.
    pub subagent: Option<String>,
    /// The call asked a person's approval: since when, and the answer once given (boxed:
    /// few calls ask).
    pub approval: Option<Box<ToolApproval>>,
}

/// A tool call's approval request as the timeline shows it: waiting (for a person, not
/// running), or answered — by whom and when, so an approved call does not read as one that
/// ran unattended.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolApproval {
    /// The request's id and time: none when only the answer is known (the turn that ran an
    /// approved call holds no request; the session's tool calls give the answer).
    pub approval_id: Option<String>,
    pub requested_at: Option<DateTime<Utc>>,
    /// The answer (or expiry), once in the log.
    pub answer: Option<ApprovalAnswer>,
}

impl ToolRow {
    /// Whether the call waits for a person's answer (asked, not answered, not decided).
    pub fn waits_for_approval(&self) -> bool {
        self.decision.is_none()
            && self.success.is_none()
            && self.approval.as_ref().is_some_and(|a| a.answer.is_none())
    }
}

impl Item {
    /// Whether the row shows a failure (drawn in red).
    pub fn is_error(&self) -> bool {
        match &self.kind {
            ItemKind::Error { .. } => true,
            ItemKind::TurnFinished { status, .. } => {
                matches!(status, TurnStatus::Error | TurnStatus::Aborted)
            }
            ItemKind::Tool(t) => t.success == Some(false),
            _ => false,
        }
    }

    /// The row's event kind, as the filter matches it.
    pub fn kind_name(&self) -> &str {
        match &self.kind {
            ItemKind::TurnStarted { .. } => "turn_started",
            ItemKind::Configured { .. } => "turn_configured",
            ItemKind::StepStarted { .. } => "step_started",
            ItemKind::StepFinished { .. } => "step_finished",
            ItemKind::Text { .. } => "text",
            ItemKind::Reasoning { .. } => "reasoning",
            ItemKind::Tool(_) => "tool",
            ItemKind::Retry { .. } => "model_retried",
            ItemKind::Error { .. } => "error",
            ItemKind::Compacted { .. } => "compaction_applied",
            ItemKind::Retracted { .. } => "messages_retracted",
            ItemKind::MessageSaved { .. } => "assistant_message_saved",
            ItemKind::TurnFinished { .. } => "turn_finished",
            ItemKind::Other { kind } => kind,
        }
    }

    /// The words the text filter searches.
    pub fn search_text(&self) -> String {
        match &self.kind {
            ItemKind::Text { text, .. } | ItemKind::Reasoning { text, .. } => text.clone(),
            ItemKind::Tool(t) => format!(
                "{} {} {} {}",
                t.tool,
                t.input,
                t.error.as_deref().unwrap_or(""),
                t.output.as_deref().unwrap_or("")
            ),
            ItemKind::Error { what, message } => format!("{what} {message}"),
            ItemKind::TurnFinished { status, error } => {
                format!("{} {}", status.as_str(), error.as_deref().unwrap_or(""))
            }
            ItemKind::Retry { error, .. } => error.clone(),
            ItemKind::Compacted { reason, .. } => format!("compacted {reason}"),
            ItemKind::Retracted { request_id, .. } => {
                format!("retracted {}", request_id.as_deref().unwrap_or(""))
            }
            ItemKind::Configured { model_id, .. } => model_id.clone(),
            _ => String::new(),
        }
    }
}

/// Builds timeline rows from a turn's envelopes, one at a time, in seq order.
#[derive(Debug, Default, Clone)]
pub struct TimelineBuilder {
    items: Vec<Item>,
    /// Open text / reasoning blocks by block id → row index.
    open_blocks: HashMap<String, usize>,
    /// Tool calls by call id → row index.
    tools: HashMap<String, usize>,
    /// The facts of the envelopes pushed: each tool call's life.
    facts: Facts,
    last_at: Option<DateTime<Utc>>,
    last_seq: Option<u64>,
    first_at: Option<DateTime<Utc>>,
}

/// Keeps long payloads on screen to a readable size.
const OUTPUT_PREVIEW_CHARS: usize = 200;

fn preview(value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() > OUTPUT_PREVIEW_CHARS {
        let mut cut: String = text.chars().take(OUTPUT_PREVIEW_CHARS).collect();
        cut.push('…');
        cut
    } else {
        text
    }
}

impl TimelineBuilder {
    /// An empty timeline.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a timeline from a slice of envelopes.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Envelope>) -> Self {
        let mut builder = Self::new();
        for env in events {
            builder.push(env);
        }
        builder
    }

    /// The rows so far.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The seq of the last event pushed.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// When the first event pushed happened (the turn's clock zero).
    pub fn first_at(&self) -> Option<DateTime<Utc>> {
        self.first_at
    }

    fn new_item(&mut self, env: &Envelope, gap_ms: Option<i64>, kind: ItemKind) -> usize {
        self.items.push(Item {
            first_seq: env.seq,
            last_seq: env.seq,
            events: 1,
            at: env.at,
            gap_ms,
            kind,
        });
        self.items.len() - 1
    }

    fn touch(&mut self, index: usize, env: &Envelope) {
        if let Some(item) = self.items.get_mut(index) {
            item.last_seq = env.seq;
            item.events += 1;
        }
    }

    /// Folds one envelope into the timeline. Events already pushed (by seq) are ignored, so
    /// overlapping pages are harmless.
    /// One arm per kind of event the timeline shows: the one place its rows are made.
    pub fn push(&mut self, env: &Envelope) {
        if self.last_seq.is_some_and(|last| env.seq <= last) {
            return;
        }
        let gap_ms = self
            .last_at
            .map(|prev| (env.at - prev).num_milliseconds())
            .filter(|gap| *gap >= STALL_MS);
        self.last_at = Some(env.at);
        self.last_seq = Some(env.seq);
        self.first_at.get_or_insert(env.at);

        if let Some(FactChange::Call { call, stage }) = self.facts.push(env) {
            if let Some(call) = self.facts.calls().get(call).cloned() {
                if self.call_row(env, gap_ms, &call, stage) {
                    return;
                }
            }
        }
        match &env.event {
            Event::TurnStarted { entry, attempt, .. } => {
                let entry = wire_name(entry);
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::TurnStarted {
                        entry,
                        attempt: *attempt,
                    },
                );
            }
            Event::TurnConfigured { config } => {
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Configured {
                        model_id: config.model_id.clone(),
                        tools: config.tool_names.len(),
                    },
                );
            }
            Event::StepStarted { step } => {
                self.new_item(env, gap_ms, ItemKind::StepStarted { step: *step });
            }
            Event::StepFinished { record } => {
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::StepFinished {
                        step: record.step,
                        finish_reason: record.finish_reason,
                        usage: record.usage.clone(),
                    },
                );
            }
            Event::Chunk { part, .. } => self.push_part(env, gap_ms, part),
            Event::SubagentStarted {
                call_id,
                tool,
                child_session_id,
                ..
            } => {
                let index = self.tool_row(env, gap_ms, call_id, tool);
                if let Some(ItemKind::Tool(row)) = self.items.get_mut(index).map(|i| &mut i.kind) {
                    row.subagent = Some(child_session_id.clone());
                }
            }
            // An approval event the facts left unchanged (a later answer) still counts on its
            // call's row.
            Event::ToolApprovalRequested { call_id, tool, .. }
            | Event::ToolApprovalAnswered { call_id, tool, .. } => {
                self.tool_row(env, gap_ms, call_id, tool);
            }
            Event::ModelRetried { attempt, error, .. } => {
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Retry {
                        attempt: *attempt,
                        error: error.clone(),
                    },
                );
            }
            Event::BudgetExceeded {
                scope,
                measure,
                limit,
                spent,
                step,
                ..
            } => {
                // Short enough for a narrow pane: the limit, the spend, the call refused.
                let amount = |x: f64| match measure {
                    mull_core::BudgetMeasure::Dollars => format!("${x:.4}"),
                    _ => format!("{x:.0}"),
                };
                let call = match step {
                    Some(step) => format!("step {step} not called"),
                    None => "call not made".to_owned(),
                };
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Error {
                        what: "budget reached".to_owned(),
                        message: format!(
                            "{} {} {} of {} · {call}",
                            wire_name(scope),
                            wire_name(measure),
                            amount(*spent),
                            amount(*limit)
                        ),
                    },
                );
            }
            Event::TurnFailed { stage, error, .. } => {
                let stage = wire_name(stage);
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Error {
                        what: format!("turn failed ({stage})"),
                        message: error.clone(),
                    },
                );
            }
            Event::HookFailed {
                hook,
                source,
                error,
                ..
            } => {
                let hook = wire_name(hook);
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Error {
                        what: format!("hook {hook} failed ({source})"),
                        message: error.clone(),
                    },
                );
            }
            Event::CompactionApplied {
                reason,
                shortened,
                replaced_ids,
                tokens_before,
                tokens_after,
                ..
            } => {
                let reason = wire_name(reason);
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Compacted {
                        replaced: replaced_ids.len(),
                        reason,
                        shortened: *shortened,
                        tokens_before: *tokens_before,
                        tokens_after: *tokens_after,
                    },
                );
            }
            Event::MessagesRetracted {
                request_id,
                message_ids,
            } => {
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Retracted {
                        messages: message_ids.len(),
                        request_id: request_id.clone(),
                    },
                );
            }
            Event::AssistantMessageSaved { message, .. } => {
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::MessageSaved {
                        parts: message.parts.len(),
                    },
                );
            }
            Event::TurnFinished { status, error, .. } => {
                // Blocks an aborted stream left open are over once the turn is.
                for index in std::mem::take(&mut self.open_blocks).into_values() {
                    self.close_block(index);
                }
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::TurnFinished {
                        status: *status,
                        error: error.clone(),
                    },
                );
            }
            other => {
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Other {
                        kind: other.kind().to_owned(),
                    },
                );
            }
        }
    }

    /// Updates a call's row from its fact at `stage`; false for a stage the row does not show.
    /// An approval answered in this turn whose request an earlier turn made shows with its
    /// answer alone (the facts keep it without a request).
    fn call_row(
        &mut self,
        env: &Envelope,
        gap_ms: Option<i64>,
        call: &ToolCallFact,
        stage: CallStage,
    ) -> bool {
        if !matches!(
            stage,
            CallStage::Started
                | CallStage::Decided
                | CallStage::ApprovalRequested
                | CallStage::ApprovalAnswered
                | CallStage::Finished
                | CallStage::ClientAnswered
                | CallStage::Repaired
        ) {
            return false;
        }
        let index = self.tool_row(env, gap_ms, &call.call_id, &call.tool);
        let Some(ItemKind::Tool(row)) = self.items.get_mut(index).map(|i| &mut i.kind) else {
            return true;
        };
        match (stage, &call.outcome) {
            (CallStage::ApprovalRequested | CallStage::ApprovalAnswered, _) => {
                row.approval = call.approval.as_ref().map(|approval| {
                    Box::new(ToolApproval {
                        approval_id: Some(approval.approval_id.clone()),
                        requested_at: approval.request.as_ref().map(|r| r.at.at),
                        answer: approval.answer.as_ref().map(ApprovalAnswer::from),
                    })
                });
            }
            (CallStage::Started, _) => {
                row.input = call.input.as_ref().map(preview).unwrap_or_default();
                row.client = call.client;
            }
            (CallStage::Decided, _) => {
                if let Some(decision) = &call.decision {
                    row.decision = Some(decision.action);
                    row.reason.clone_from(&decision.reason);
                }
            }
            (_, Some(outcome)) => {
                row.success = Some(outcome.success());
                row.error = outcome.error().cloned();
                match outcome {
                    CallOutcome::Finished {
                        output,
                        duration_ms,
                        ..
                    } => {
                        row.duration_ms = Some(*duration_ms);
                        if let Some(output) = output {
                            row.output = Some(preview(output));
                        }
                    }
                    CallOutcome::ClientAnswered { output, .. } => {
                        row.output = output.as_ref().map(preview);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        true
    }

    fn tool_row(
        &mut self,
        env: &Envelope,
        gap_ms: Option<i64>,
        call_id: &str,
        tool: &str,
    ) -> usize {
        if let Some(&index) = self.tools.get(call_id) {
            self.touch(index, env);
            return index;
        }
        let index = self.new_item(
            env,
            gap_ms,
            ItemKind::Tool(ToolRow {
                call_id: call_id.to_owned(),
                tool: tool.to_owned(),
                ..ToolRow::default()
            }),
        );
        self.tools.insert(call_id.to_owned(), index);
        index
    }

    /// Appends streamed text to the block's open row, or starts a row (after a stall, a new row
    /// continues the block so the stall shows where it happened).
    fn block_text(
        &mut self,
        env: &Envelope,
        gap_ms: Option<i64>,
        id: &str,
        text: &str,
        reasoning: bool,
    ) {
        let open = self.open_blocks.get(id).copied();
        match open {
            Some(index) if gap_ms.is_none() => {
                self.touch(index, env);
                if let Some(item) = self.items.get_mut(index) {
                    if let ItemKind::Text { text: t, .. } | ItemKind::Reasoning { text: t, .. } =
                        &mut item.kind
                    {
                        t.push_str(text);
                    }
                }
            }
            _ => {
                if let Some(index) = open {
                    self.close_block(index);
                }
                let kind = if reasoning {
                    ItemKind::Reasoning {
                        text: text.to_owned(),
                        open: true,
                    }
                } else {
                    ItemKind::Text {
                        text: text.to_owned(),
                        open: true,
                    }
                };
                let index = self.new_item(env, gap_ms, kind);
                self.open_blocks.insert(id.to_owned(), index);
            }
        }
    }

    fn close_block(&mut self, index: usize) {
        if let Some(item) = self.items.get_mut(index) {
            if let ItemKind::Text { open, .. } | ItemKind::Reasoning { open, .. } = &mut item.kind {
                *open = false;
            }
        }
    }

    fn push_part(&mut self, env: &Envelope, gap_ms: Option<i64>, part: &StreamPart) {
        match part {
            StreamPart::TextStart { id } => self.block_text(env, gap_ms, id, "", false),
            StreamPart::ReasoningStart { id } => self.block_text(env, gap_ms, id, "", true),
            StreamPart::TextDelta { id, text } => self.block_text(env, gap_ms, id, text, false),
            StreamPart::ReasoningDelta { id, text } => self.block_text(env, gap_ms, id, text, true),
            StreamPart::TextEnd { id } | StreamPart::ReasoningEnd { id } => {
                if let Some(index) = self.open_blocks.remove(id) {
                    self.touch(index, env);
                    self.close_block(index);
                }
            }
            StreamPart::ToolInputStart { call_id, tool_name } => {
                self.tool_row(env, gap_ms, call_id, tool_name);
            }
            StreamPart::ToolInputDelta { call_id, delta } => {
                let index = self.tool_row(env, gap_ms, call_id, "");
                if let Some(ItemKind::Tool(row)) = self.items.get_mut(index).map(|i| &mut i.kind) {
                    row.input.push_str(delta);
                }
            }
            StreamPart::ToolInputEnd { call_id } => {
                self.tool_row(env, gap_ms, call_id, "");
            }
            StreamPart::ToolCall {
                call_id,
                tool_name,
                input,
            } => {
                let index = self.tool_row(env, gap_ms, call_id, tool_name);
                if let Some(ItemKind::Tool(row)) = self.items.get_mut(index).map(|i| &mut i.kind) {
                    row.input.clone_from(input);
                }
            }
            StreamPart::ToolResult {
                call_id,
                tool_name,
                output,
                ..
            } => {
                let index = self.tool_row(env, gap_ms, call_id, tool_name);
                if let Some(ItemKind::Tool(row)) = self.items.get_mut(index).map(|i| &mut i.kind) {
                    row.output = Some(preview(output));
                }
            }
            StreamPart::ToolError {
                call_id,
                tool_name,
                error,
            } => {
                let index = self.tool_row(env, gap_ms, call_id, tool_name);
                if let Some(ItemKind::Tool(row)) = self.items.get_mut(index).map(|i| &mut i.kind) {
                    row.success = Some(false);
                    row.error = Some(error.clone());
                }
            }
            StreamPart::Error { message } => {
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Error {
                        what: "stream error".to_owned(),
                        message: message.clone(),
                    },
                );
            }
            StreamPart::Finish { .. } => {
                // The step_finished event that follows carries the same facts in full.
                if let Some(last) = self.items.len().checked_sub(1) {
                    self.touch(last, env);
                } else {
                    self.new_item(
                        env,
                        gap_ms,
                        ItemKind::Other {
                            kind: "finish".into(),
                        },
                    );
                }
            }
            other => {
                self.new_item(
                    env,
                    gap_ms,
                    ItemKind::Other {
                        kind: format!("chunk {}", other.kind()),
                    },
                );
            }
        }
    }
}

impl<'a> From<&'a ToolRow> for CallFacts<'a> {
    fn from(row: &'a ToolRow) -> Self {
        CallFacts {
            tool: &row.tool,
            decision: row.decision,
            success: row.success,
            duration_ms: row.duration_ms,
        }
    }
}

/// Tool usage over a turn's timeline rows.
pub fn turn_tool_usage(items: &[Item]) -> Vec<ToolUsage> {
    tool_usage(items.iter().filter_map(|item| match &item.kind {
        ItemKind::Tool(row) => Some(CallFacts::from(row)),
        _ => None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dash::testlog::{sample_turn, t0};
    use mull_store::tool_usage::session_tool_usage;
    use mull_store::SessionToolCalls;

    #[test]
    fn deltas_coalesce_into_one_text_row() {
        let timeline = TimelineBuilder::from_events(&sample_turn());
        let texts: Vec<&str> = timeline
            .items()
            .iter()
            .filter_map(|i| match &i.kind {
                ItemKind::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            texts,
            vec![
                "Let me look that up.",
                "Rust 1.95 is out",
                " — released today."
            ]
        );
    }

    #[test]
    fn a_stall_splits_text_and_records_the_gap() {
        let timeline = TimelineBuilder::from_events(&sample_turn());
        let stalled = timeline
            .items()
            .iter()
            .find(|i| matches!(&i.kind, ItemKind::Text { text, .. } if text.starts_with(" —")))
            .expect("the text after the stall has its own row");
        assert_eq!(stalled.gap_ms, Some(2300));
    }

    #[test]
    fn an_answer_whose_request_another_turn_made_shows_on_its_call() {
        // The acting turn's events and the answers, without the requests turn 1 made.
        let events: Vec<Envelope> = crate::dash::testlog::approval_log("s", true)
            .into_iter()
            .filter(|e| {
                e.turn_id.as_deref() == Some("turn_2")
                    || matches!(e.event, Event::ToolApprovalAnswered { .. })
            })
            .collect();
        let timeline = TimelineBuilder::from_events(&events);
        let approval = |call: &str| {
            timeline
                .items()
                .iter()
                .find_map(|i| match &i.kind {
                    ItemKind::Tool(t) if t.call_id == call => t.approval.clone(),
                    _ => None,
                })
                .expect("the call's row shows its approval")
        };
        let booked = approval("call_2");
        assert_eq!(booked.approval_id.as_deref(), Some("approval_2"));
        assert_eq!(
            booked.requested_at, None,
            "the request is not in these events"
        );
        let answer = booked.answer.expect("answered");
        assert!(answer.approved);
        assert_eq!(answer.by.as_deref(), Some("mull dash"));
        let refused = approval("call_1").answer.expect("answered");
        assert!(!refused.approved);
        assert_eq!(refused.reason.as_deref(), Some("Not the Ritz."));
    }

    #[test]
    fn a_tool_call_gathers_its_decision_duration_and_outcome() {
        let timeline = TimelineBuilder::from_events(&sample_turn());
        let tools: Vec<&ToolRow> = timeline
            .items()
            .iter()
            .filter_map(|i| match &i.kind {
                ItemKind::Tool(t) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(tools.len(), 2);
        let first = tools.first().expect("first tool");
        assert_eq!(first.tool, "search");
        assert_eq!(first.decision, Some(DecisionAction::Allow));
        assert_eq!(first.duration_ms, Some(420));
        assert_eq!(first.success, Some(true));
        let second = tools.get(1).expect("second tool");
        assert_eq!(second.decision, Some(DecisionAction::Block));
        assert_eq!(second.success, Some(false));
    }

    #[test]
    fn pushing_an_old_seq_again_changes_nothing() {
        let events = sample_turn();
        let mut timeline = TimelineBuilder::from_events(&events);
        let before = timeline.items().to_vec();
        for env in &events {
            timeline.push(env);
        }
        assert_eq!(timeline.items(), before.as_slice());
        assert_eq!(timeline.first_at(), Some(t0()));
    }

    #[test]
    fn a_turn_counts_the_same_from_its_rows_as_from_its_lifecycle_events() {
        let events = sample_turn();
        let timeline = TimelineBuilder::from_events(&events);
        let mut calls = SessionToolCalls::new("sess_1");
        for env in &events {
            calls.apply(env);
        }
        let from_rows = turn_tool_usage(timeline.items());
        assert_eq!(from_rows, session_tool_usage(&calls));
        let names: Vec<(&str, usize, usize, usize)> = from_rows
            .iter()
            .map(|u| (u.tool.as_str(), u.calls, u.failures, u.blocks))
            .collect();
        assert_eq!(names, vec![("delete_all", 1, 0, 1), ("search", 1, 0, 0)]);
        assert_eq!(from_rows[0].mean_ms(), None);
    }
}
