//! The GenAI fields the turn loop records on its live `tracing` spans once it knows them: a
//! model call's response and usage, a turn attempt's usage, a tool call's decision. One place
//! names them (as the GenAI semantic conventions v0.1.0 do), so the live spans carry what a
//! trace re-exported from the log carries; the spans declare each field empty when they open.

use mull_core::{DecisionAction, StepReport, Usage};

/// A `chat` span's response fields: finish reason, response id and model, and usage.
pub(crate) fn record_step(span: &tracing::Span, record: &StepReport) {
    span.record(
        "gen_ai.response.finish_reasons",
        record.finish_reason.as_str(),
    );
    let response = |key: &str| record.response.get(key).and_then(|v| v.as_str());
    if let Some(id) = response("id") {
        span.record("gen_ai.response.id", id);
    }
    let model = response("model_id")
        .filter(|m| !m.is_empty())
        .unwrap_or(record.model_id.as_str());
    if !model.is_empty() {
        span.record("gen_ai.response.model", model);
    }
    let cache_write = mull_core::price::cache_write_tokens(record.provider_metadata.as_ref());
    record_usage(span, &record.usage, cache_write);
}

/// Usage fields; a count the provider did not report is left unset, never 0.
pub(crate) fn record_usage(span: &tracing::Span, usage: &Usage, cache_write: Option<u64>) {
    let fields = [
        ("gen_ai.usage.input_tokens", usage.input_tokens),
        ("gen_ai.usage.output_tokens", usage.output_tokens),
        (
            "gen_ai.usage.cache_read.input_tokens",
            usage.cached_input_tokens,
        ),
        ("gen_ai.usage.cache_write.input_tokens", cache_write),
        (
            "gen_ai.usage.reasoning.output_tokens",
            usage.reasoning_tokens,
        ),
    ];
    for (field, count) in fields {
        if let Some(n) = count {
            span.record(field, i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

/// An `execute_tool` span's decision; a call blocked by a hook or denied by a person gets an
/// error status that says so (the model still sees the reason as the tool's output).
pub(crate) fn record_decision(span: &tracing::Span, action: DecisionAction, reason: Option<&str>) {
    span.record("mull.tool.decision", action.as_str());
    if let Some(reason) = reason {
        span.record("mull.tool.decision_reason", reason);
    }
    let refused = match action {
        DecisionAction::Block => Some(("tool_blocked", "blocked")),
        DecisionAction::Denied => Some(("tool_denied", "denied")),
        _ => None,
    };
    if let Some((error_type, verb)) = refused {
        span.record("error.type", error_type);
        let description = match reason {
            Some(reason) => format!("{verb}: {reason}"),
            None => verb.to_owned(),
        };
        span.record("otel.status_description", description.as_str());
    }
}

/// The `execute_tool` span of a call a person answered, in the turn that acts on the answer:
/// who answered and how, beside the decision recorded on it next.
pub(crate) fn approved_call_span(
    pending: &mull_store::PendingApproval,
    answer: &mull_store::ApprovalAnswer,
) -> tracing::Span {
    let answered_by = if answer.expired { "expiry" } else { "person" };
    tracing::info_span!(
        "execute_tool",
        otel.name = %format!("execute_tool {}", pending.tool),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %pending.tool,
        gen_ai.tool.call.id = %pending.call_id,
        gen_ai.tool.type = "function",
        mull.approval.id = %pending.approval_id,
        mull.approval.approved = answer.approved,
        mull.approval.answered_by = answered_by,
        mull.tool.decision = tracing::field::Empty,
        mull.tool.decision_reason = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    )
}
