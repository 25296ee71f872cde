//! Tool calls that wait for a person, inside a turn: parking a call whose approval was asked,
//! and acting on the answers when the next turn starts, before its context is assembled (see
//! [`crate::approval`] for the answers themselves). An answered call runs through the same
//! path as a live one ([`super::decided`]).
//!
//! ```text
//! turn 1: … before_tool_call → tool_approval_requested (flushed) → step ends → turn finishes
//! (nothing waits: no task, socket or memory)
//! answer: tool_approval_answered (an input event, flushed)
//! turn 2: turn_started (flushed) → per answered call: tool_decided (durable before it runs) →
//!         execute once, or the denial as the output → tool_call_finished → after_tool_call
//!         → context → steps
//! ```
//!
//! The outcome goes onto the tool part of the message that asked (the projection's
//! [`approvals`](mull_store::approvals) fold); the continuation's own message holds only what
//! its steps say. A crash after `tool_decided` leaves the call decided without an outcome:
//! recovery repairs it as interrupted and it never runs again.

use std::sync::Arc;

use mull_core::{to_model_messages, Event, UIPart};
use mull_store::PendingApproval;
use serde_json::Value;

use super::decided::DecidedCall;
use super::run::{StepParts, ToolEnd, TurnRun};
use crate::approval::decision::decide;
use crate::error::EngineError;
use crate::tool::{ToolEntry, ToolSet};

/// What a call asking for approval hands to [`TurnRun::park_for_approval`].
pub(super) struct ApprovalAsk<'a> {
    pub step: u32,
    pub call_id: &'a str,
    pub tool_name: &'a str,
    /// The input the call runs with once approved.
    pub input: Value,
    pub reason: Option<String>,
}

impl TurnRun<'_> {
    /// Parks a call: `tool_approval_requested`, made durable before the request can leave the
    /// process (the output gate), then the step ends after its other calls and the turn
    /// finishes waiting, as for a client tool.
    pub(super) async fn park_for_approval(
        &mut self,
        ask: ApprovalAsk<'_>,
        parts: &mut StepParts,
    ) -> Result<ToolEnd, EngineError> {
        let approval_id = self.parts.options.ids.next_id("approval");
        let expires_at = self.parts.options.approval_expiry.map(|after| {
            let after = chrono::Duration::from_std(after).unwrap_or(chrono::TimeDelta::MAX);
            let now = self.parts.recorder.clock().now();
            now.checked_add_signed(after).unwrap_or(now)
        });
        self.append(Event::ToolApprovalRequested {
            step: ask.step,
            call_id: ask.call_id.to_owned(),
            tool: ask.tool_name.to_owned(),
            approval_id,
            input: ask.input,
            reason: ask.reason,
            expires_at,
        })?;
        self.parts.recorder.flush().await?;
        parts.waits_for_client = true;
        Ok(ToolEnd::Done)
    }

    /// Acts on every answered approval before the turn assembles its context: expired requests
    /// become denials first, then each answered call is decided (flushed), run once or denied,
    /// and its outcome recorded and observed by `after_tool_call`.
    pub(super) async fn act_on_approvals(&mut self, tools: &ToolSet) -> Result<(), EngineError> {
        let expiry = self.parts.options.approval_expiry;
        crate::approval::expire_due(self.parts.recorder, expiry).await?;
        let due: Vec<PendingApproval> = self
            .parts
            .recorder
            .read(|s| s.approvals_to_act_on().cloned().collect());
        for pending in due {
            self.act_on(&pending, tools).await?;
        }
        Ok(())
    }

    /// Decides one answered call from its answer and runs it as a decided call — gated,
    /// executed once (or its denial shown), its outcome observed by `after_tool_call` — on the
    /// message that asked, whose step its turn already saved (so no part of it is shown here).
    async fn act_on(
        &mut self,
        pending: &PendingApproval,
        tools: &ToolSet,
    ) -> Result<(), EngineError> {
        let Some(answer) = &pending.answer else {
            return Ok(());
        };
        let (model_input, messages) = self.parts.recorder.read(|s| {
            let asked = s
                .messages
                .iter()
                .flat_map(|m| m.parts.iter())
                .find_map(|p| match p {
                    UIPart::Tool(t) if t.call_id == pending.call_id => Some(t.input.clone()),
                    _ => None,
                });
            (asked, to_model_messages(&s.messages))
        });
        let model_input = model_input.unwrap_or_else(|| pending.input.clone());
        let tool = match tools.get(&pending.tool) {
            Some(ToolEntry::Server(tool)) => Some(Arc::clone(tool)),
            _ => None,
        };
        let decided = decide(pending, answer, &model_input, tool.is_some());
        let dynamic = tool.as_ref().is_some_and(|t| t.is_dynamic());
        let span = crate::otel_fields::approved_call_span(pending, answer);
        let call = DecidedCall {
            step: pending.step,
            call_id: &pending.call_id,
            tool_name: &pending.tool,
            tool,
            model_input: &model_input,
            effective_input: pending.input.clone(),
            action: decided.action,
            reason: decided.reason,
            skip_output: decided.output,
            dynamic,
            messages: &messages,
            // No stall timeout: the turn's own (its `before_turn` may change it) is not known
            // before its context is assembled, and the call was already waited for by a person.
            stall_ms: 0,
            span: &span,
        };
        // An abort cuts the call off with its outcome recorded; the turn ends aborted after.
        self.run_decided(call, None).await.map(|_| ())
    }
}
