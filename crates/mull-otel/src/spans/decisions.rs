//! Decisions on spans: what `before_tool_call` decided (or a person answered) on tool spans,
//! and a budget that stopped a turn on the turn's span — as attributes and as events a trace
//! viewer shows on the timeline, and an error status for a call that did not run because it
//! was blocked or denied.

use chrono::{DateTime, Utc};
use mull_core::{BudgetLimits, BudgetMeasure, BudgetScope, DecisionAction, ModelCallKind};

use mull_store::facts::{AnswerFact, AnsweredBy};

use super::{AttrValue, LogSpan, SpanEvent};

/// What `before_tool_call` (or a person's denial) decided, on the call's span: the decision as
/// attributes and as an event a trace viewer shows on the timeline, and for a call that did not
/// run because it was blocked or denied, an error status saying so.
pub(super) fn decision_attributes(
    span: &mut LogSpan,
    action: DecisionAction,
    reason: Option<&str>,
    at: DateTime<Utc>,
) {
    span.set("mull.tool.decision", action.as_str());
    let mut attributes = vec![("mull.tool.decision", action.as_str().into())];
    if let Some(reason) = reason {
        span.set("mull.tool.decision_reason", reason);
        attributes.push(("mull.tool.decision_reason", reason.into()));
    }
    span.events.push(SpanEvent {
        name: "mull.tool.decided",
        at,
        attributes,
    });
    let refused = match action {
        DecisionAction::Block => Some(("tool_blocked", "blocked")),
        DecisionAction::Denied => Some(("tool_denied", "denied")),
        _ => None,
    };
    if let Some((error_type, verb)) = refused {
        span.set("error.type", error_type);
        span.error = Some(match reason {
            Some(reason) => format!("{verb}: {reason}"),
            None => verb.to_owned(),
        });
    }
}

/// Who answered an approval request and how, on the span of the call it was asked for.
pub(super) fn answer_attributes(span: &mut LogSpan, approval_id: &str, answer: &AnswerFact) {
    let by = match answer.by {
        AnsweredBy::Expiry => "expiry",
        _ => "person",
    };
    span.set("mull.approval.id", approval_id);
    span.set("mull.approval.approved", answer.approved);
    span.set("mull.approval.answered_by", by);
    let mut attributes = vec![
        ("mull.approval.id", approval_id.into()),
        ("mull.approval.approved", answer.approved.into()),
        ("mull.approval.answered_by", by.into()),
    ];
    if let Some(reason) = &answer.reason {
        attributes.push(("mull.approval.reason", reason.as_str().into()));
    }
    span.events.push(SpanEvent {
        name: "mull.approval.answered",
        at: answer.at.at,
        attributes,
    });
}

/// What a `budget_exceeded` said: the limit used up and the call that was not made.
pub(super) struct BudgetStop<'a> {
    pub scope: BudgetScope,
    pub measure: BudgetMeasure,
    pub limit: f64,
    pub spent: f64,
    pub remaining: &'a BudgetLimits,
    pub call: ModelCallKind,
    pub step: Option<u32>,
}

/// A budget that stopped a turn, on the turn's span (and as an event on the span of the step
/// whose call it refused, when that is open): which limit, its size, what was spent and the
/// call not made. The turn's error status (`error.type` `budget`) comes with its
/// `turn_failed`.
pub(super) fn budget_attributes(
    turn: &mut LogSpan,
    step: Option<&mut LogSpan>,
    stop: &BudgetStop<'_>,
    at: DateTime<Utc>,
) {
    let scope = mull_core::wire_name(&stop.scope);
    let measure = mull_core::wire_name(&stop.measure);
    let call = mull_core::wire_name(&stop.call);
    turn.set("mull.budget.scope", scope.as_str());
    turn.set("mull.budget.measure", measure.as_str());
    turn.set("mull.budget.limit", stop.limit);
    turn.set("mull.budget.spent", stop.spent);
    let mut attributes = vec![
        ("mull.budget.scope", scope.into()),
        ("mull.budget.measure", measure.into()),
        ("mull.budget.limit", stop.limit.into()),
        ("mull.budget.spent", stop.spent.into()),
        ("mull.budget.call", call.into()),
    ];
    if let Some(step) = stop.step {
        attributes.push(("mull.step", step.into()));
    }
    let remaining = [
        (
            "mull.budget.remaining.tokens",
            stop.remaining.tokens.map(AttrValue::from),
        ),
        (
            "mull.budget.remaining.dollars",
            stop.remaining.dollars.map(AttrValue::from),
        ),
        (
            "mull.budget.remaining.calls",
            stop.remaining.calls.map(AttrValue::from),
        ),
    ];
    attributes.extend(remaining.into_iter().filter_map(|(k, v)| Some((k, v?))));
    let event = SpanEvent {
        name: "mull.budget.exceeded",
        at,
        attributes,
    };
    if let Some(step) = step {
        step.events.push(event.clone());
    }
    turn.events.push(event);
}
