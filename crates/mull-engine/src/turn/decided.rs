//! A decided tool call, run once: the one path for a live call the hook allowed, rewrote,
//! blocked or substituted and for a call a person answered. Its decision is recorded, made
//! durable before anything it allows runs (the output gate), the tool executed (or skipped),
//! and the outcome recorded and handed to `after_tool_call` through the hooks' one dispatcher.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use mull_core::{DecisionAction, ErrorStage, Event, ModelMessage, StreamPart};
use serde_json::Value;
use tracing::Instrument;

use super::run::{Executed, Outcome, StepParts, ToolEnd, TurnRun, ABORTED_TOOL_CALL};
use crate::config::ResolvedTurn;
use crate::error::EngineError;
use crate::guard::panic_text;
use crate::hooks::{CallFacts, Observed};
use crate::tool::{Tool, ToolExecution, ToolOutput};

/// A call with its decision, ready to run.
pub(super) struct DecidedCall<'a> {
    pub step: u32,
    pub call_id: &'a str,
    pub tool_name: &'a str,
    /// The tool, when it is still there to run.
    pub tool: Option<Arc<dyn Tool>>,
    /// The input the model emitted.
    pub model_input: &'a Value,
    /// The input the call runs with (a hook's rewrite, or what a person approved).
    pub effective_input: Value,
    pub action: DecisionAction,
    pub reason: Option<String>,
    /// What a call that runs nothing shows as its output (a block's text, a substitute, a
    /// denial).
    pub skip_output: Option<Value>,
    pub dynamic: bool,
    /// The conversation as the model saw it for the call's step.
    pub messages: &'a [ModelMessage],
    /// How long the tool may stay silent (0: no limit).
    pub stall_ms: u64,
    /// The call's `execute_tool` span.
    pub span: &'a tracing::Span,
}

/// Where a call's parts are shown: the live step's chunks and record. An approved call has
/// none — its step was saved by the turn that asked, so its preliminary values and result
/// chunk would belong to a message already closed.
pub(super) type Shown<'r, 'p> = Option<(&'r ResolvedTurn, &'p mut StepParts)>;

impl TurnRun<'_> {
    /// Records `call`'s decision (`tool_decided`), waits until it is durable when the call will
    /// run — a crash can never leave an effect without the decision that allowed it — then runs
    /// the tool (or skips it) and records the outcome. Every decided call has an outcome (an
    /// aborted or stalled one too: `after_tool_call` always fires once the decision resolved).
    pub(super) async fn run_decided(
        &mut self,
        call: DecidedCall<'_>,
        mut shown: Shown<'_, '_>,
    ) -> Result<ToolEnd, EngineError> {
        crate::otel_fields::record_decision(call.span, call.action, call.reason.as_deref());
        let decided = self.append(Event::ToolDecided {
            step: call.step,
            call_id: call.call_id.to_owned(),
            tool: call.tool_name.to_owned(),
            action: call.action,
            model_input: call.model_input.clone(),
            effective_input: call.effective_input.clone(),
            reason: call.reason.clone(),
            output: call.skip_output.clone(),
        })?;
        let runs = matches!(call.action, DecisionAction::Allow | DecisionAction::Rewrite);
        // The gate. A blocked, substituted, denied or invalid call runs nothing.
        if runs {
            self.parts.recorder.durable(decided).await?;
        }
        let (result, duration_ms, end) = match (&call.tool, runs) {
            (Some(tool), true) => {
                let tool = Arc::clone(tool);
                self.run_tool(&call, &*tool, shown.as_mut().map(|(r, p)| (*r, &mut **p)))
                    .await?
            }
            (tool, _) => match call.action {
                DecisionAction::Block | DecisionAction::Substitute | DecisionAction::Denied => {
                    let output = call.skip_output.clone().unwrap_or(Value::Null);
                    let streaming = tool.as_ref().is_some_and(|t| t.is_streaming());
                    if let (true, Some((resolved, parts))) = (streaming, shown.as_mut()) {
                        // A streaming tool commits to a stream before the decision is known, so
                        // a skipped call still surfaces its one value as a preliminary result.
                        let part = StreamPart::ToolResult {
                            call_id: call.call_id.to_owned(),
                            tool_name: call.tool_name.to_owned(),
                            output: output.clone(),
                            preliminary: true,
                        };
                        self.emit(resolved, call.step, part, parts).await?;
                    }
                    (Ok(output), 0, ToolEnd::Done)
                }
                _ => (
                    Err(call.reason.clone().unwrap_or_default()),
                    0,
                    ToolEnd::Done,
                ),
            },
        };
        if self.parts.options.capture_content {
            if let Ok(output) = &result {
                call.span
                    .record("gen_ai.tool.call.result", tracing::field::display(output));
            }
        }
        let outcome = Outcome {
            step: call.step,
            call_id: call.call_id,
            tool_name: call.tool_name,
            model_input: call.model_input,
            effective_input: &call.effective_input,
            decision: call.action,
            dynamic: call.dynamic,
            messages: call.messages,
            result,
            duration_ms,
            run_hook: true,
        };
        self.record_outcome(outcome, shown).await?;
        Ok(end)
    }

    /// Runs an allowed call's tool, timed (a tool served from a recording reports the duration
    /// it was recorded with), and says how the run ended.
    async fn run_tool(
        &mut self,
        call: &DecidedCall<'_>,
        tool: &dyn Tool,
        shown: Shown<'_, '_>,
    ) -> Result<(Result<Value, String>, u64, ToolEnd), EngineError> {
        let execution = ToolExecution {
            call_id: call.call_id.to_owned(),
            tool_name: call.tool_name.to_owned(),
            step_number: call.step,
            messages: call.messages.to_vec(),
            context: self.tool_context.clone(),
            cancel: self.spec.signal.clone(),
            site: self.parts.call_site(&self.turn_id),
            served_duration_ms: std::sync::OnceLock::new(),
        };
        let started = self.parts.recorder.clock().timer();
        let run = self
            .execute(
                call.step,
                call.stall_ms,
                tool,
                call.effective_input.clone(),
                &execution,
                shown,
            )
            .instrument(call.span.clone())
            .await?;
        let elapsed = self.parts.recorder.clock().timer() - started;
        let duration_ms = match execution.served_duration_ms.get() {
            Some(served) => *served,
            None => u64::try_from(elapsed.num_milliseconds()).unwrap_or(0),
        };
        let (result, end) = match run {
            Executed::Done(result) => (result, ToolEnd::Done),
            // A call cut off still has an outcome: the model's next turn and the hook see it
            // failed.
            Executed::Aborted => (Err(ABORTED_TOOL_CALL.to_owned()), ToolEnd::Aborted),
            Executed::Stalled(ms) => {
                let text = format!(
                    "the tool {:?} was silent for {ms} ms (the stall timeout)",
                    call.tool_name
                );
                let error = self.error(ErrorStage::Stream, text.clone());
                (Err(text), ToolEnd::Stalled(error))
            }
        };
        Ok((result, duration_ms, end))
    }

    /// Runs execute (scalar or streaming), catching panics; preliminary values become chunks
    /// where the call's parts are shown.
    async fn execute(
        &mut self,
        step: u32,
        stall_ms: u64,
        tool: &dyn Tool,
        input: Value,
        execution: &ToolExecution,
        mut shown: Shown<'_, '_>,
    ) -> Result<Executed, EngineError> {
        // The stall watchdog counts a tool's silence like the model's: a turn that needs a
        // slow tool raises its `chat_stream_stall_timeout_ms` (the seed's knob for that).
        let silent = || async move {
            if stall_ms == 0 {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(std::time::Duration::from_millis(stall_ms)).await
            }
        };
        let started = AssertUnwindSafe(tool.execute(input, execution)).catch_unwind();
        let output = tokio::select! {
            biased;
            _ = self.spec.signal.cancelled() => return Ok(Executed::Aborted),
            output = started => output,
            _ = silent() => return Ok(Executed::Stalled(stall_ms)),
        };
        let output = match output {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return Ok(Executed::Done(Err(e.to_string()))),
            Err(panic) => {
                return Ok(Executed::Done(Err(format!(
                    "the tool panicked: {}",
                    panic_text(&panic)
                ))))
            }
        };
        let mut stream = match output {
            ToolOutput::Value(value) => return Ok(Executed::Done(Ok(value))),
            ToolOutput::Stream(stream) => stream,
        };
        let mut last = None;
        loop {
            let item = tokio::select! {
                biased;
                _ = self.spec.signal.cancelled() => return Ok(Executed::Aborted),
                item = AssertUnwindSafe(stream.next()).catch_unwind() => item,
                _ = silent() => return Ok(Executed::Stalled(stall_ms)),
            };
            match item {
                Ok(None) => break,
                Ok(Some(Ok(value))) => {
                    if let Some((resolved, parts)) = shown.as_mut() {
                        let part = StreamPart::ToolResult {
                            call_id: execution.call_id.clone(),
                            tool_name: execution.tool_name.clone(),
                            output: value.clone(),
                            preliminary: true,
                        };
                        self.emit(resolved, step, part, parts).await?;
                    }
                    last = Some(value);
                }
                Ok(Some(Err(e))) => return Ok(Executed::Done(Err(e.to_string()))),
                Err(panic) => {
                    return Ok(Executed::Done(Err(format!(
                        "the tool panicked: {}",
                        panic_text(&panic)
                    ))))
                }
            }
        }
        Ok(Executed::Done(last.ok_or_else(|| {
            format!(
                "streaming tool {:?} ended without producing an output",
                execution.tool_name
            )
        })))
    }

    /// Records a call's outcome: `tool_call_finished`, `after_tool_call` (through the hooks'
    /// dispatcher), then — where the call's parts are shown — its result as a chunk.
    pub(super) async fn record_outcome(
        &mut self,
        outcome: Outcome<'_>,
        shown: Shown<'_, '_>,
    ) -> Result<(), EngineError> {
        let (success, output, error) = match &outcome.result {
            Ok(v) => (true, Some(v.clone()), None),
            Err(e) => (false, None, Some(e.clone())),
        };
        let finished = Event::ToolCallFinished {
            step: outcome.step,
            call_id: outcome.call_id.to_owned(),
            tool: outcome.tool_name.to_owned(),
            success,
            output,
            error,
            duration_ms: outcome.duration_ms,
        };
        let appended = self.parts.recorder.append(self.tid(), finished)?;
        if outcome.run_hook {
            let facts = CallFacts {
                model_input: outcome.model_input,
                effective_input: outcome.effective_input,
                decision: outcome.decision,
                dynamic: outcome.dynamic,
                messages: outcome.messages,
            };
            if let Some(observed) = Observed::tool_result(&appended.event, facts) {
                self.parts.hooks.dispatch(self.tid(), &observed).await?;
            }
        }
        let Some((resolved, parts)) = shown else {
            return Ok(());
        };
        let part = match outcome.result {
            Ok(output) => StreamPart::ToolResult {
                call_id: outcome.call_id.to_owned(),
                tool_name: outcome.tool_name.to_owned(),
                output,
                preliminary: false,
            },
            Err(error) => StreamPart::ToolError {
                call_id: outcome.call_id.to_owned(),
                tool_name: outcome.tool_name.to_owned(),
                error,
            },
        };
        self.emit(resolved, outcome.step, part, parts).await
    }
}
