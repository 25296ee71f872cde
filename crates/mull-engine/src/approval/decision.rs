//! What an answer decides for the call it answers: the decision the continuation records for it
//! (`tool_decided`) before the call runs — or shows the model its denial — through the same path
//! as a live call.

use mull_core::DecisionAction;
use mull_store::{ApprovalAnswer, PendingApproval};
use serde_json::Value;

/// An answered call's decision, as its `tool_decided` event records it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decided {
    pub action: DecisionAction,
    pub reason: Option<String>,
    /// For a denial, what the model sees in place of the tool's output.
    pub output: Option<Value>,
}

/// Decides `pending`, answered by `answer`: an approval runs the call (a rewrite when the input
/// it was asked with is not the model's), unless its tool is gone; a denial (or an expiry)
/// shows the model the person's reason, or a sentence saying what happened.
pub(crate) fn decide(
    pending: &PendingApproval,
    answer: &ApprovalAnswer,
    model_input: &Value,
    tool_available: bool,
) -> Decided {
    let name = &pending.tool;
    match (tool_available, answer.approved) {
        (true, true) if pending.input == *model_input => Decided {
            action: DecisionAction::Allow,
            reason: None,
            output: None,
        },
        (true, true) => Decided {
            action: DecisionAction::Rewrite,
            reason: None,
            output: None,
        },
        (false, true) => Decided {
            action: DecisionAction::Invalid,
            reason: Some(format!(
                "Tool {name:?} was approved but is no longer available."
            )),
            output: None,
        },
        (_, false) => {
            let text = answer.reason.clone().unwrap_or_else(|| {
                if answer.expired {
                    format!("The approval request for tool \"{name}\" expired unanswered.")
                } else {
                    format!("Tool \"{name}\" was denied by the user.")
                }
            });
            Decided {
                action: DecisionAction::Denied,
                reason: Some(text.clone()),
                output: Some(Value::String(text)),
            }
        }
    }
}
