//! Decisions on tool spans: what `before_tool_call` decided (or a person answered), as
//! attributes and as events a trace viewer shows on the timeline, and an error status for a
//! call that did not run because it was blocked or denied.

use chrono::{DateTime, Utc};
use mull_core::DecisionAction;

use super::{LogSpan, SpanEvent};

/// A person's (or the expiry's) answer to an approval request, kept until the turn that acts
/// on it decides the call.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub approval_id: String,
    pub approved: bool,
    pub expired: bool,
    pub reason: Option<String>,
    pub at: DateTime<Utc>,
}

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
pub(super) fn answer_attributes(span: &mut LogSpan, answer: &Answer) {
    let by = if answer.expired { "expiry" } else { "person" };
    span.set("mull.approval.id", answer.approval_id.as_str());
    span.set("mull.approval.approved", answer.approved);
    span.set("mull.approval.answered_by", by);
    let mut attributes = vec![
        ("mull.approval.id", answer.approval_id.as_str().into()),
        ("mull.approval.approved", answer.approved.into()),
        ("mull.approval.answered_by", by.into()),
    ];
    if let Some(reason) = &answer.reason {
        attributes.push(("mull.approval.reason", reason.as_str().into()));
    }
    span.events.push(SpanEvent {
        name: "mull.approval.answered",
        at: answer.at,
        attributes,
    });
}
