//! Picking events of one kind out of a session's events.

use mull::core::{DecisionAction, ErrorStage, Event, HookName, StreamPart};

/// One `hook_failed` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    pub hook: HookName,
    /// `agent`, or the extension's name.
    pub source: String,
    pub error: String,
    pub panicked: bool,
    pub timed_out: bool,
}

/// Every `hook_failed` event, in order.
pub fn hook_failures<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<HookFailure> {
    events
        .into_iter()
        .filter_map(|e| match e {
            Event::HookFailed {
                hook,
                source,
                error,
                panicked,
                timed_out,
            } => Some(HookFailure {
                hook: *hook,
                source: source.clone(),
                error: error.clone(),
                panicked: *panicked,
                timed_out: *timed_out,
            }),
            _ => None,
        })
        .collect()
}

/// The stage of the first `turn_failed` event.
pub fn first_failed_stage(events: &[Event]) -> Option<ErrorStage> {
    events.iter().find_map(|e| match e {
        Event::TurnFailed { stage, .. } => Some(*stage),
        _ => None,
    })
}

/// The action of the first `tool_decided` event.
pub fn first_decision(events: &[Event]) -> Option<DecisionAction> {
    events.iter().find_map(|e| match e {
        Event::ToolDecided { action, .. } => Some(*action),
        _ => None,
    })
}

/// Success and error text (empty when none) of the first `tool_call_finished` event.
pub fn first_tool_finish(events: &[Event]) -> Option<(bool, String)> {
    events.iter().find_map(|e| match e {
        Event::ToolCallFinished { success, error, .. } => {
            Some((*success, error.clone().unwrap_or_default()))
        }
        _ => None,
    })
}

/// The text the model streamed, from every text-delta chunk in order.
pub fn streamed_text(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Chunk {
                part: StreamPart::TextDelta { text, .. },
                ..
            } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
