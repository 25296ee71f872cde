//! One tool call: validated, decided by `before_tool_call` (the decision flushed before
//! anything it allows), executed or skipped, its outcome recorded and observed — or parked for
//! a person's approval (see [`super::approval`]).

use std::panic::AssertUnwindSafe;

use futures::{FutureExt, StreamExt};
use mull_core::{DecisionAction, ErrorStage, Event, StreamPart, ToolCallRecord, ToolResultRecord};
use serde_json::Value;
use tracing::Instrument;

use super::approval::ApprovalAsk;
use super::run::{
    Executed, ExecutionRef, Outcome, PendingCall, StepParts, ToolEnd, TurnRun, ABORTED_TOOL_CALL,
};
use crate::config::ResolvedTurn;
use crate::context::{ToolCallContext, ToolCallDecision};
use crate::error::EngineError;
use crate::guard::{guard_hook, panic_text};
use crate::hooks::{dispatch, CallFacts, Observed};
use crate::tool::{validate_input, ToolEntry, ToolExecution, ToolOutput};

impl TurnRun<'_> {
    /// Handles one tool call: validate, decide, record the decision (flushed), execute or
    /// skip, record the outcome, `after_tool_call`, then the result chunk.
    pub(super) async fn tool_call(
        &mut self,
        resolved: &ResolvedTurn,
        call: PendingCall<'_>,
        parts: &mut StepParts,
    ) -> Result<ToolEnd, EngineError> {
        let PendingCall {
            step,
            call_id,
            tool_name,
            input_text,
            active,
            messages,
        } = call;
        let parsed: Result<Value, String> = serde_json::from_str(&input_text)
            .map_err(|e| format!("Invalid JSON input for tool {tool_name:?}: {e}"));
        let model_input = parsed
            .clone()
            .unwrap_or_else(|_| Value::String(input_text.clone()));
        let available = active.is_none_or(|a| a.iter().any(|n| n == &tool_name));
        let entry = resolved
            .tools
            .get(&tool_name)
            .filter(|_| available)
            .cloned();
        let dynamic = matches!(&entry, Some(ToolEntry::Server(tool)) if tool.is_dynamic());
        parts.tool_calls.push(ToolCallRecord {
            call_id: call_id.clone(),
            tool_name: tool_name.clone(),
            input: model_input.clone(),
            dynamic,
        });
        let is_client = matches!(entry, Some(ToolEntry::Client(_)));
        self.append(Event::ToolCallStarted {
            step,
            call_id: call_id.clone(),
            tool: tool_name.clone(),
            input: model_input.clone(),
            client: is_client,
        })?;
        let tool = match entry {
            Some(ToolEntry::Client(_)) => {
                parts.waits_for_client = true;
                return Ok(ToolEnd::Done);
            }
            Some(ToolEntry::Server(tool)) => Some(tool),
            None => None,
        };
        let checked = match &tool {
            None => Err(format!(
                "Model tried to call unavailable tool {tool_name:?}."
            )),
            Some(tool) => parsed.and_then(|v| validate_input(&tool_name, &tool.input_schema(), &v)),
        };
        let exec_span = tracing::info_span!(
            "execute_tool",
            otel.name = %format!("execute_tool {tool_name}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %tool_name,
            gen_ai.tool.call.id = %call_id,
            gen_ai.tool.type = "function",
            gen_ai.tool.call.arguments = tracing::field::Empty,
            gen_ai.tool.call.result = tracing::field::Empty,
            mull.tool.decision = tracing::field::Empty,
            mull.tool.decision_reason = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        if self.inner.options.capture_content {
            exec_span.record(
                "gen_ai.tool.call.arguments",
                tracing::field::display(&model_input),
            );
        }
        let tool = match (tool, checked) {
            (Some(tool), Ok(())) => tool,
            (_, Err(reason)) => {
                self.append(Event::ToolDecided {
                    step,
                    call_id: call_id.clone(),
                    tool: tool_name.clone(),
                    action: DecisionAction::Invalid,
                    model_input: model_input.clone(),
                    effective_input: model_input.clone(),
                    reason: Some(reason.clone()),
                    output: None,
                })?;
                // No gate: an invalid call runs nothing.
                self.record_outcome(
                    resolved,
                    Outcome {
                        step,
                        call_id: &call_id,
                        tool_name: &tool_name,
                        model_input: &model_input,
                        effective_input: &model_input,
                        decision: DecisionAction::Invalid,
                        messages,
                        result: Err(reason),
                        duration_ms: 0,
                        run_hook: false,
                    },
                    parts,
                )
                .await?;
                return Ok(ToolEnd::Done);
            }
            (None, Ok(())) => return Ok(ToolEnd::Done),
        };
        let ctx = ToolCallContext {
            tool_call_id: call_id.clone(),
            tool_name: tool_name.clone(),
            input: model_input.clone(),
            dynamic,
            provider_metadata: None,
            step_number: step,
            messages: messages.to_vec(),
            abort: self.spec.signal.clone(),
        };
        let decided = guard_hook(
            self.inner,
            self.tid(),
            crate::outside::HookPoint::BeforeToolCall(&ctx),
            self.inner.agent.before_tool_call(&ctx),
        )
        .await?;
        crate::hooks::extensions::before_tool_call(self.inner, self.tid(), &ctx).await?;
        // A call that would run waits for a person when the hook or the tool's rule asks.
        let ask = match &decided {
            Ok(Some(ToolCallDecision::RequireApproval { reason })) => {
                Some((model_input.clone(), reason.clone()))
            }
            Ok(None | Some(ToolCallDecision::Allow)) if tool.needs_approval(&model_input) => {
                Some((model_input.clone(), None))
            }
            Ok(Some(ToolCallDecision::AllowWithInput(input))) if tool.needs_approval(input) => {
                Some((input.clone(), None))
            }
            _ => None,
        };
        if let Some((input, reason)) = ask {
            let ask = ApprovalAsk {
                step,
                call_id: &call_id,
                tool_name: &tool_name,
                input,
                reason,
            };
            exec_span.record("mull.tool.decision", "approval_requested");
            return self.park_for_approval(ask, parts).await;
        }
        let (action, effective_input, reason, skip_output) = match decided {
            // (An approval request was parked above.)
            Ok(
                None
                | Some(ToolCallDecision::Allow)
                | Some(ToolCallDecision::RequireApproval { .. }),
            ) => (DecisionAction::Allow, model_input.clone(), None, None),
            Ok(Some(ToolCallDecision::AllowWithInput(input))) => {
                (DecisionAction::Rewrite, input, None, None)
            }
            Ok(Some(ToolCallDecision::Block { reason })) => {
                let text = reason.unwrap_or_else(|| {
                    format!("Tool \"{tool_name}\" was blocked by beforeToolCall.")
                });
                (
                    DecisionAction::Block,
                    model_input.clone(),
                    Some(text.clone()),
                    Some(Value::String(text)),
                )
            }
            Ok(Some(ToolCallDecision::Substitute { output, input })) => (
                DecisionAction::Substitute,
                input.unwrap_or_else(|| model_input.clone()),
                None,
                Some(output),
            ),
            Err(text) => (
                DecisionAction::HookFailed,
                model_input.clone(),
                Some(format!("before_tool_call failed: {text}")),
                None,
            ),
        };
        crate::otel_fields::record_decision(&exec_span, action, reason.as_deref());
        let decided = self.append(Event::ToolDecided {
            step,
            call_id: call_id.clone(),
            tool: tool_name.clone(),
            action,
            model_input: model_input.clone(),
            effective_input: effective_input.clone(),
            reason: reason.clone(),
            output: skip_output.clone(),
        })?;
        // The gate: a call that will run does so only once its decision is durable, so a crash
        // can never leave an effect without the decision that allowed it. A blocked or
        // substituted call runs nothing.
        if matches!(action, DecisionAction::Allow | DecisionAction::Rewrite) {
            self.inner.recorder.durable(decided).await?;
        }

        // Every decided call has an outcome, recorded once below (an aborted or stalled one
        // too: `after_tool_call` always fires once the decision resolved).
        let (result, duration_ms, end) = match action {
            DecisionAction::Allow | DecisionAction::Rewrite => {
                let execution = ToolExecution {
                    call_id: call_id.clone(),
                    tool_name: tool_name.clone(),
                    step_number: step,
                    messages: messages.to_vec(),
                    context: self.tool_context.clone(),
                    cancel: self.spec.signal.clone(),
                    site: self.inner.call_site(&self.turn_id),
                    served_duration_ms: std::sync::OnceLock::new(),
                };
                let started = self.inner.recorder.clock().timer();
                let run = self
                    .execute(
                        resolved,
                        step,
                        &*tool,
                        effective_input.clone(),
                        &execution,
                        parts,
                    )
                    .instrument(exec_span.clone())
                    .await?;
                let elapsed = self.inner.recorder.clock().timer() - started;
                let duration_ms = match execution.served_duration_ms.get() {
                    Some(served) => *served,
                    None => u64::try_from(elapsed.num_milliseconds()).unwrap_or(0),
                };
                let (result, end) = match run {
                    Executed::Done(result) => (result, ToolEnd::Done),
                    // A call cut off still has an outcome, and `after_tool_call` always fires
                    // once the decision resolved (the seed): the model's next turn and the
                    // hook see it failed.
                    Executed::Aborted => (Err(ABORTED_TOOL_CALL.to_owned()), ToolEnd::Aborted),
                    Executed::Stalled(ms) => {
                        let text = format!(
                            "the tool {tool_name:?} was silent for {ms} ms (the stall timeout)"
                        );
                        let error = self.error(ErrorStage::Stream, text.clone());
                        (Err(text), ToolEnd::Stalled(error))
                    }
                };
                (result, duration_ms, end)
            }
            DecisionAction::Block | DecisionAction::Substitute => {
                let output = skip_output.unwrap_or(Value::Null);
                if tool.is_streaming() {
                    // A streaming tool commits to a stream before the decision is known, so a
                    // skipped call still surfaces its one value as a preliminary result.
                    self.emit(
                        resolved,
                        step,
                        StreamPart::ToolResult {
                            call_id: call_id.clone(),
                            tool_name: tool_name.clone(),
                            output: output.clone(),
                            preliminary: true,
                        },
                        parts,
                    )
                    .await?;
                }
                (Ok(output), 0, ToolEnd::Done)
            }
            DecisionAction::HookFailed | DecisionAction::Invalid | DecisionAction::Denied => {
                (Err(reason.clone().unwrap_or_default()), 0, ToolEnd::Done)
            }
        };
        if self.inner.options.capture_content {
            if let Ok(output) = &result {
                exec_span.record("gen_ai.tool.call.result", tracing::field::display(output));
            }
        }
        self.record_outcome(
            resolved,
            Outcome {
                step,
                call_id: &call_id,
                tool_name: &tool_name,
                model_input: &model_input,
                effective_input: &effective_input,
                decision: action,
                messages,
                result,
                duration_ms,
                run_hook: true,
            },
            parts,
        )
        .await?;
        Ok(end)
    }

    /// Runs execute (scalar or streaming), catching panics; preliminary values become chunks.
    pub(super) async fn execute(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        tool: &dyn crate::tool::Tool,
        input: Value,
        execution: &ExecutionRef,
        parts: &mut StepParts,
    ) -> Result<Executed, EngineError> {
        // The stall watchdog counts a tool's silence like the model's: a turn that needs a
        // slow tool raises its `chat_stream_stall_timeout_ms` (the seed's knob for that).
        let stall_ms = resolved.stall_timeout_ms;
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
                    self.emit(
                        resolved,
                        step,
                        StreamPart::ToolResult {
                            call_id: execution.call_id.clone(),
                            tool_name: execution.tool_name.clone(),
                            output: value.clone(),
                            preliminary: true,
                        },
                        parts,
                    )
                    .await?;
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

    /// Records a call's outcome: `tool_call_finished`, `after_tool_call`, the result chunk.
    pub(super) async fn record_outcome(
        &mut self,
        resolved: &ResolvedTurn,
        outcome: Outcome<'_>,
        parts: &mut StepParts,
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
            output: output.clone(),
            error: error.clone(),
            duration_ms: outcome.duration_ms,
        };
        let appended = self.inner.recorder.append(self.tid(), finished)?;
        parts.tool_results.push(ToolResultRecord {
            call_id: outcome.call_id.to_owned(),
            tool_name: outcome.tool_name.to_owned(),
            input: outcome.effective_input.clone(),
            success,
            output,
            error,
        });
        if outcome.run_hook {
            let dynamic = parts
                .tool_calls
                .iter()
                .any(|c| c.call_id == outcome.call_id && c.dynamic);
            let facts = CallFacts {
                model_input: outcome.model_input,
                effective_input: outcome.effective_input,
                decision: outcome.decision,
                dynamic,
                messages: outcome.messages,
            };
            if let Some(observed) = Observed::tool_result(&appended.event, facts) {
                dispatch(self.inner, self.tid(), &observed).await?;
            }
        }
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
