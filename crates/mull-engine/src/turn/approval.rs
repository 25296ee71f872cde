//! Tool calls that wait for a person, inside a turn: parking a call whose approval was asked,
//! and acting on the answers when the next turn starts.
//!
//! ```text
//! turn 1: … before_tool_call → tool_approval_requested (flushed) → step ends → turn finishes
//! (nothing waits: no task, socket or memory)
//! answer: tool_approval_answered (an input event, flushed)
//! turn 2: turn_started (flushed) → per answered call: tool_decided (flushed) → execute once, or
//!         the denial as a block → tool_call_finished → after_tool_call → context → steps
//! ```
//!
//! The outcome goes onto the tool part of the message that asked (the projection's
//! [`approvals`](mull_store::approvals) fold); the continuation's own message holds only what
//! its steps say. A crash after `tool_decided` leaves the call decided without an outcome:
//! recovery repairs it as interrupted and it never runs again.

use std::panic::AssertUnwindSafe;

use futures::{FutureExt, StreamExt};
use mull_core::{to_model_messages, DecisionAction, Event, UIPart};
use mull_store::PendingApproval;
use serde_json::Value;
use tracing::Instrument;

use super::run::{StepParts, ToolEnd, TurnRun, ABORTED_TOOL_CALL};
use crate::context::ToolCallResultContext;
use crate::error::EngineError;
use crate::guard::{observe, panic_text};
use crate::tool::{Tool, ToolEntry, ToolExecution, ToolOutput, ToolSet};

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
        let approval_id = self.inner.options.ids.next_id("approval");
        let expires_at = self.inner.options.approval_expiry.map(|after| {
            let after = chrono::Duration::from_std(after).unwrap_or(chrono::TimeDelta::MAX);
            let now = self.inner.recorder.clock().now();
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
        self.inner.recorder.flush().await?;
        parts.waits_for_client = true;
        Ok(ToolEnd::Done)
    }

    /// Acts on every answered approval before the turn assembles its context: expired requests
    /// become denials first, then each answered call is decided (flushed), run once or denied,
    /// and its outcome recorded and observed by `after_tool_call`.
    pub(super) async fn act_on_approvals(&mut self, tools: &ToolSet) -> Result<(), EngineError> {
        crate::approval::expire_due(self.inner).await?;
        let due: Vec<PendingApproval> = self
            .inner
            .recorder
            .read(|s| s.approvals_to_act_on().cloned().collect());
        for pending in due {
            self.act_on(&pending, tools).await?;
        }
        Ok(())
    }

    async fn act_on(
        &mut self,
        pending: &PendingApproval,
        tools: &ToolSet,
    ) -> Result<(), EngineError> {
        let Some(answer) = &pending.answer else {
            return Ok(());
        };
        let (model_input, messages) = self.inner.recorder.read(|s| {
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
            Some(ToolEntry::Server(tool)) => Some(std::sync::Arc::clone(tool)),
            _ => None,
        };
        let name = &pending.tool;
        let (action, reason, skip_output) = match (&tool, answer.approved) {
            (Some(_), true) if pending.input == model_input => (DecisionAction::Allow, None, None),
            (Some(_), true) => (DecisionAction::Rewrite, None, None),
            (None, true) => (
                DecisionAction::Invalid,
                Some(format!(
                    "Tool {name:?} was approved but is no longer available."
                )),
                None,
            ),
            (_, false) => {
                let text = answer.reason.clone().unwrap_or_else(|| {
                    if answer.expired {
                        format!("The approval request for tool \"{name}\" expired unanswered.")
                    } else {
                        format!("Tool \"{name}\" was denied by the user.")
                    }
                });
                (
                    DecisionAction::Denied,
                    Some(text.clone()),
                    Some(Value::String(text)),
                )
            }
        };
        let exec_span = crate::otel_fields::approved_call_span(pending, answer);
        crate::otel_fields::record_decision(&exec_span, action, reason.as_deref());
        self.append(Event::ToolDecided {
            step: pending.step,
            call_id: pending.call_id.clone(),
            tool: name.clone(),
            action,
            model_input: model_input.clone(),
            effective_input: pending.input.clone(),
            reason: reason.clone(),
            output: skip_output.clone(),
        })?;
        // The decision is durable before the tool can run: a crash from here on never runs
        // it again.
        self.inner.recorder.flush().await?;
        let (result, duration_ms) = match (tool, action) {
            (Some(tool), DecisionAction::Allow | DecisionAction::Rewrite) => {
                let execution = ToolExecution {
                    call_id: pending.call_id.clone(),
                    tool_name: name.clone(),
                    step_number: pending.step,
                    messages: messages.clone(),
                    context: self.tool_context.clone(),
                    cancel: self.spec.signal.clone(),
                    site: self.inner.call_site(&self.turn_id),
                    served_duration_ms: std::sync::OnceLock::new(),
                };
                let started = self.inner.recorder.clock().timer();
                let result = self
                    .run_approved(&*tool, pending.input.clone(), &execution)
                    .instrument(exec_span.clone())
                    .await;
                let elapsed = self.inner.recorder.clock().timer() - started;
                let duration_ms = match execution.served_duration_ms.get() {
                    Some(served) => *served,
                    None => u64::try_from(elapsed.num_milliseconds()).unwrap_or(0),
                };
                (result, duration_ms)
            }
            (_, DecisionAction::Denied) => (Ok(skip_output.unwrap_or(Value::Null)), 0),
            _ => (Err(reason.unwrap_or_default()), 0),
        };
        let (success, output, error) = match &result {
            Ok(v) => (true, Some(v.clone()), None),
            Err(e) => (false, None, Some(e.clone())),
        };
        self.append(Event::ToolCallFinished {
            step: pending.step,
            call_id: pending.call_id.clone(),
            tool: name.clone(),
            success,
            output: output.clone(),
            error: error.clone(),
            duration_ms,
        })?;
        let ctx = ToolCallResultContext {
            tool_call_id: pending.call_id.clone(),
            tool_name: name.clone(),
            input: model_input,
            effective_input: pending.input.clone(),
            decision: action,
            dynamic: tools
                .get(name)
                .is_some_and(|e| matches!(e, ToolEntry::Server(t) if t.is_dynamic())),
            step_number: pending.step,
            messages,
            duration_ms,
            success,
            output,
            error,
        };
        observe(
            self.inner,
            self.tid(),
            crate::outside::HookPoint::AfterToolCall(&ctx),
            self.inner.agent.after_tool_call(&ctx),
        )
        .await?;
        crate::hooks::extensions::after_tool_call(self.inner, self.tid(), &ctx).await
    }

    /// Runs an approved call to its final value. A streaming tool's preliminary values are not
    /// shown: they would belong to the message that asked, which its turn already saved.
    async fn run_approved(
        &self,
        tool: &dyn Tool,
        input: Value,
        execution: &ToolExecution,
    ) -> Result<Value, String> {
        let signal = &self.spec.signal;
        let started = AssertUnwindSafe(tool.execute(input, execution)).catch_unwind();
        let output = tokio::select! {
            biased;
            _ = signal.cancelled() => return Err(ABORTED_TOOL_CALL.to_owned()),
            output = started => output,
        };
        let mut stream = match output {
            Ok(Ok(ToolOutput::Value(value))) => return Ok(value),
            Ok(Ok(ToolOutput::Stream(stream))) => stream,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(panic) => return Err(format!("the tool panicked: {}", panic_text(&panic))),
        };
        let mut last = None;
        loop {
            let item = tokio::select! {
                biased;
                _ = signal.cancelled() => return Err(ABORTED_TOOL_CALL.to_owned()),
                item = AssertUnwindSafe(stream.next()).catch_unwind() => item,
            };
            match item {
                Ok(None) => break,
                Ok(Some(Ok(value))) => last = Some(value),
                Ok(Some(Err(e))) => return Err(e.to_string()),
                Err(panic) => return Err(format!("the tool panicked: {}", panic_text(&panic))),
            }
        }
        last.ok_or_else(|| {
            format!(
                "streaming tool {:?} ended without producing an output",
                execution.tool_name
            )
        })
    }
}
