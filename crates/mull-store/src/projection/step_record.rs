//! A finished step as `on_step_finish` sees it, put together from what the log keeps once:
//! the report its `step_finished` carries, the content the draft holds since the step began
//! (its text, reasoning, sources and files, from the chunks), and the tool calls it started
//! with their results (from the facts).

use mull_core::{StepRecord, StepReport, ToolCallRecord, ToolResultRecord, UIMessage, UIPart};
use serde_json::Value;

use super::state::SessionState;
use crate::facts::CallOutcome;

impl SessionState {
    /// The record of step `report.step` of turn `turn_id`, writing message `message_id`, and
    /// its reasoning blocks in order. Read right after the step's `step_finished` was folded
    /// in: its content is the draft's since the step's last start, and its results are the
    /// outcomes its calls have so far, in the order they were recorded.
    pub fn step_record(
        &self,
        turn_id: &str,
        message_id: &str,
        report: StepReport,
    ) -> (StepRecord, Vec<String>) {
        let step = report.step;
        let mut record = StepRecord::from_report(report);
        let mut reasoning = Vec::new();
        if let Some(draft) = self.draft.as_ref().filter(|d| d.id == message_id) {
            reasoning = fill_content(&mut record, last_step_parts(draft));
        }
        if !reasoning.is_empty() {
            record.reasoning_text = Some(reasoning.concat());
        }
        let calls: Vec<_> = self.facts.calls_of_step(turn_id, step).collect();
        record.tool_calls = calls
            .iter()
            .map(|c| ToolCallRecord {
                call_id: c.call_id.clone(),
                tool_name: c.tool.clone(),
                input: c.input.clone().unwrap_or(Value::Null),
                dynamic: c.dynamic,
            })
            .collect();
        let mut results: Vec<_> = calls
            .iter()
            .filter_map(|c| match &c.outcome {
                Some(CallOutcome::Finished {
                    at,
                    success,
                    output,
                    error,
                    ..
                }) => Some((
                    at.seq,
                    ToolResultRecord {
                        call_id: c.call_id.clone(),
                        tool_name: c.tool.clone(),
                        // The input the model emitted, as `after_tool_call` sees it.
                        input: c.input.clone().unwrap_or(Value::Null),
                        success: *success,
                        output: output.clone(),
                        error: error.clone(),
                    },
                )),
                _ => None,
            })
            .collect();
        results.sort_by_key(|(seq, _)| *seq);
        record.tool_results = results.into_iter().map(|(_, r)| r).collect();
        (record, reasoning)
    }
}

/// The parts of `draft` since its last step began.
fn last_step_parts(draft: &UIMessage) -> &[UIPart] {
    let start = draft
        .parts
        .iter()
        .rposition(|p| matches!(p, UIPart::StepStart))
        .unwrap_or(0);
    &draft.parts[start..]
}

/// Sets the record's text, sources and files from a step's parts; hands back its reasoning
/// blocks.
fn fill_content(record: &mut StepRecord, parts: &[UIPart]) -> Vec<String> {
    let mut reasoning = Vec::new();
    for part in parts {
        match part {
            UIPart::Text { text, .. } => record.text.push_str(text),
            UIPart::Reasoning { text, .. } => reasoning.push(text.clone()),
            UIPart::File {
                media_type, url, ..
            } => record.files.push((media_type.clone(), url.clone())),
            part => record.sources.extend(part.source()),
        }
    }
    reasoning
}
