//! One tool call of the model's: validated, decided by `before_tool_call`, then run as a
//! decided call ([`super::decided`]) — or parked for a person's approval ([`super::parked`]).

use mull_core::{DecisionAction, Event, ModelMessage};
use serde_json::Value;

use super::decided::DecidedCall;
use super::parked::ApprovalAsk;
use super::run::{Outcome, PendingCall, StepParts, ToolEnd, TurnRun};
use crate::config::ResolvedTurn;
use crate::context::{ToolCallContext, ToolCallDecision};
use crate::error::EngineError;
use crate::tool::{validate_input, Tool, ToolEntry};

impl TurnRun<'_> {
    /// Handles one tool call: validate, decide, then run it as decided (or park it).
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
        let is_client = matches!(entry, Some(ToolEntry::Client(_)));
        self.append(Event::ToolCallStarted {
            step,
            call_id: call_id.clone(),
            tool: tool_name.clone(),
            input: model_input.clone(),
            client: is_client,
            dynamic,
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
        let exec_span = execute_tool_span(&call_id, &tool_name);
        if self.parts.options.capture_content {
            exec_span.record(
                "gen_ai.tool.call.arguments",
                tracing::field::display(&model_input),
            );
        }
        let tool = match (tool, checked) {
            (Some(tool), Ok(())) => tool,
            (_, Err(reason)) => {
                let call = InvalidCall {
                    step,
                    call_id: &call_id,
                    tool_name: &tool_name,
                    model_input: &model_input,
                    dynamic,
                    messages,
                };
                self.record_invalid(resolved, call, reason, parts).await?;
                return Ok(ToolEnd::Done);
            }
            (None, Ok(())) => return Ok(ToolEnd::Done),
        };
        let decided = self
            .before_tool_call(ToolCallContext {
                tool_call_id: call_id.clone(),
                tool_name: tool_name.clone(),
                input: model_input.clone(),
                dynamic,
                provider_metadata: None,
                step_number: step,
                messages: messages.to_vec(),
                abort: self.spec.signal.clone(),
            })
            .await?;
        if let Some((input, reason)) = approval_asked(&decided, &*tool, &model_input) {
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
        let (action, effective_input, reason, skip_output) =
            decision(decided, &tool_name, &model_input);
        let call = DecidedCall {
            step,
            call_id: &call_id,
            tool_name: &tool_name,
            tool: Some(tool),
            model_input: &model_input,
            effective_input,
            action,
            reason,
            skip_output,
            dynamic,
            messages,
            stall_ms: resolved.stall_timeout_ms,
            span: &exec_span,
        };
        self.run_decided(call, Some((resolved, parts))).await
    }
}

/// A call that failed validation, as [`TurnRun::record_invalid`] records it.
struct InvalidCall<'a> {
    step: u32,
    call_id: &'a str,
    tool_name: &'a str,
    model_input: &'a Value,
    dynamic: bool,
    messages: &'a [ModelMessage],
}

impl TurnRun<'_> {
    /// Asks `before_tool_call`: the agent's hook decides (its failure is `Err`), then each
    /// subscribed extension is offered the call.
    async fn before_tool_call(
        &mut self,
        ctx: ToolCallContext,
    ) -> Result<Result<Option<ToolCallDecision>, String>, EngineError> {
        let hooks = self.parts.hooks;
        let decided = hooks
            .guard_hook(
                self.tid(),
                crate::outside::HookPoint::BeforeToolCall(&ctx),
                hooks.agent().before_tool_call(&ctx),
            )
            .await?;
        hooks
            .extensions()
            .before_tool_call(self.tid(), &ctx)
            .await?;
        Ok(decided)
    }

    /// Records a call that failed validation (an unknown tool, input against the schema): its
    /// `invalid` decision and its failed outcome. No gate: an invalid call runs nothing, and no
    /// `after_tool_call`: no `before_tool_call` decided it.
    async fn record_invalid(
        &mut self,
        resolved: &ResolvedTurn,
        call: InvalidCall<'_>,
        reason: String,
        parts: &mut StepParts,
    ) -> Result<(), EngineError> {
        self.append(Event::ToolDecided {
            step: call.step,
            call_id: call.call_id.to_owned(),
            tool: call.tool_name.to_owned(),
            action: DecisionAction::Invalid,
            model_input: call.model_input.clone(),
            effective_input: call.model_input.clone(),
            reason: Some(reason.clone()),
            output: None,
        })?;
        let outcome = Outcome {
            step: call.step,
            call_id: call.call_id,
            tool_name: call.tool_name,
            model_input: call.model_input,
            effective_input: call.model_input,
            decision: DecisionAction::Invalid,
            dynamic: call.dynamic,
            messages: call.messages,
            result: Err(reason),
            duration_ms: 0,
            run_hook: false,
        };
        self.record_outcome(outcome, Some((resolved, parts))).await
    }
}

/// A call's `execute_tool` span, its decision and content fields empty until known.
fn execute_tool_span(call_id: &str, tool_name: &str) -> tracing::Span {
    tracing::info_span!(
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
    )
}

/// Whether a call that would run waits for a person: when the hook or the tool's rule asks.
/// The input it would run with, and the hook's reason.
fn approval_asked(
    decided: &Result<Option<ToolCallDecision>, String>,
    tool: &dyn Tool,
    model_input: &Value,
) -> Option<(Value, Option<String>)> {
    match decided {
        Ok(Some(ToolCallDecision::RequireApproval { reason })) => {
            Some((model_input.clone(), reason.clone()))
        }
        Ok(None | Some(ToolCallDecision::Allow)) if tool.needs_approval(model_input) => {
            Some((model_input.clone(), None))
        }
        Ok(Some(ToolCallDecision::AllowWithInput(input))) if tool.needs_approval(input) => {
            Some((input.clone(), None))
        }
        _ => None,
    }
}

/// The decision `before_tool_call` made (or its failure), as `tool_decided` records it: the
/// action, the input the call runs with, the reason, and what a skipped call shows.
fn decision(
    decided: Result<Option<ToolCallDecision>, String>,
    tool_name: &str,
    model_input: &Value,
) -> (DecisionAction, Value, Option<String>, Option<Value>) {
    match decided {
        // (An approval request was parked before.)
        Ok(
            None | Some(ToolCallDecision::Allow) | Some(ToolCallDecision::RequireApproval { .. }),
        ) => (DecisionAction::Allow, model_input.clone(), None, None),
        Ok(Some(ToolCallDecision::AllowWithInput(input))) => {
            (DecisionAction::Rewrite, input, None, None)
        }
        Ok(Some(ToolCallDecision::Block { reason })) => {
            let text = reason
                .unwrap_or_else(|| format!("Tool \"{tool_name}\" was blocked by beforeToolCall."));
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
    }
}
