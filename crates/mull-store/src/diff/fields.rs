//! The fields of an event a diff compares, read through serde: whatever an event serializes
//! is compared, except what [`LEFT_OUT`] names, so a field added to an event shows in diffs
//! with no edit here.
//!
//! Serde is the one schema: a field is named as the log writes it and listed in the order the
//! event declares it (serde_json keeps that order).

use serde_json::{Map, Value};

/// What a diff leaves out of an event, as (event kind, field); `*` is any event. Everything
/// else the event serializes is compared.
const LEFT_OUT: &[(&str, &str)] = &[
    // Ids: a re-run makes new ones.
    ("*", "request_id"),
    ("*", "message_id"),
    ("*", "call_id"),
    ("*", "approval_id"),
    // The step an event belongs to places it; steps are aligned, not compared by number.
    ("*", "step"),
    // Time: a tool's duration is compared as timing, a retry's delay is jitter.
    ("*", "duration_ms"),
    ("*", "delay_ms"),
    // Free-form fields of the caller (a client's chat id …), not the conversation.
    ("turn_started", "body"),
    // Follows from the history, which the turns before already compare.
    ("turn_configured", "message_count"),
    // A digest of what the step's configuration and the history already compare.
    ("step_configured", "request_hash"),
    // What the call's start already carries: the tool and the model's input.
    ("tool_decided", "tool"),
    ("tool_decided", "model_input"),
    ("tool_call_finished", "tool"),
    ("client_tool_result", "tool"),
    // The step record repeats the step's configuration, its stream and its calls, which are
    // compared where they happen; what was sent is a digest of those, and the provider's
    // response metadata (its ids, its clock) differs on every run.
    ("step_finished", "model_id"),
    ("step_finished", "text"),
    ("step_finished", "reasoning_text"),
    ("step_finished", "sources"),
    ("step_finished", "files"),
    ("step_finished", "tool_calls"),
    ("step_finished", "tool_results"),
    ("step_finished", "request"),
    ("step_finished", "response"),
    ("step_finished", "provider_metadata"),
];

/// Fields compared part by part (`usage.input_tokens` …): counts that differ on their own.
const SPLIT: &[&str] = &["usage"];

/// Fields listed first, in this order, when an event has them: what a reader weighs first
/// (a decision's action and its reason before the input it ran with).
const LEAD: &[&str] = &["action", "reason"];

/// Fields renamed so one thing has one name across events: a stream error part's `message`
/// is the step's `error`, as on every other event that reports one.
const RENAMED: &[(&str, &str, &str)] = &[("chunk", "message", "error")];

/// The compared fields of `value`, a serialized event (or a stream part) of kind `kind`: its
/// fields but the `type` tag and what [`LEFT_OUT`] names, an event that only wraps one record
/// (`turn_configured`'s config, `step_finished`'s record) read as that record, [`SPLIT`] fields
/// as their parts.
pub(super) fn compared(kind: &str, value: Value) -> Vec<(String, Value)> {
    let Value::Object(mut map) = value else {
        return Vec::new();
    };
    map.shift_remove("type");
    let map = match unwrap_record(map) {
        Ok(record) => record,
        Err(map) => map,
    };
    let mut fields = Vec::with_capacity(map.len());
    for (name, value) in map {
        if left_out(kind, &name) {
            continue;
        }
        match value {
            Value::Object(parts) if SPLIT.contains(&name.as_str()) => {
                fields.extend(
                    parts
                        .into_iter()
                        .map(|(part, v)| (format!("{name}.{part}"), v)),
                );
            }
            value => fields.push((renamed(kind, name), value)),
        }
    }
    lead_first(&mut fields);
    fields
}

/// The one record an event wraps, or the event's own fields when it is more than a wrapper.
fn unwrap_record(map: Map<String, Value>) -> Result<Map<String, Value>, Map<String, Value>> {
    if map.len() != 1 || !map.values().all(Value::is_object) {
        return Err(map);
    }
    match map.into_iter().next() {
        Some((_, Value::Object(record))) => Ok(record),
        _ => Ok(Map::new()),
    }
}

fn left_out(kind: &str, field: &str) -> bool {
    LEFT_OUT
        .iter()
        .any(|(k, f)| *f == field && (*k == "*" || *k == kind))
}

fn renamed(kind: &str, field: String) -> String {
    RENAMED
        .iter()
        .find(|(k, from, _)| *k == kind && *from == field)
        .map(|(_, _, to)| (*to).to_owned())
        .unwrap_or(field)
}

/// Moves the [`LEAD`] fields to the front, keeping every other field in its order.
fn lead_first(fields: &mut [(String, Value)]) {
    let rank = |name: &str| LEAD.iter().position(|l| *l == name).unwrap_or(LEAD.len());
    fields.sort_by_key(|(name, _)| rank(name));
}

/// The names of both sides' fields, once each, in the order they are listed: the first side's,
/// with a field only the second has placed after the field it follows there (a field serde
/// skips on one side, e.g. an absent count, keeps its place).
pub(super) fn union<'a>(a: &'a [(String, Value)], b: &'a [(String, Value)]) -> Vec<&'a str> {
    let mut names: Vec<&str> = a.iter().map(|(n, _)| n.as_str()).collect();
    let mut after: Option<usize> = None;
    for (name, _) in b {
        match names.iter().position(|n| n == name) {
            Some(i) => after = Some(i),
            None => {
                let at = after.map_or(0, |i| i + 1);
                names.insert(at, name);
                after = Some(at);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::{DecisionAction, Event, Usage};
    use serde_json::json;

    fn names(fields: &[(String, Value)]) -> Vec<&str> {
        fields.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn a_decision_is_compared_without_its_ids_and_what_the_start_carries() {
        let event = Event::ToolDecided {
            step: 0,
            call_id: "c_1".into(),
            tool: "weather".into(),
            action: DecisionAction::Block,
            model_input: json!({"city": "Lisbon"}),
            effective_input: json!({"city": "Lisbon"}),
            reason: Some("policy".into()),
            output: None,
        };
        let value = serde_json::to_value(&event).unwrap_or_default();
        let fields = compared("tool_decided", value);
        assert_eq!(
            names(&fields),
            ["action", "reason", "effective_input", "output"]
        );
        assert_eq!(fields[0].1, json!("block"));
    }

    #[test]
    fn a_wrapped_record_is_read_as_the_record_and_usage_part_by_part() {
        let event = Event::TurnFinished {
            request_id: "r".into(),
            status: mull_core::TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage {
                input_tokens: Some(3),
                output_tokens: Some(4),
                ..Usage::default()
            },
            response_owed: false,
        };
        let value = serde_json::to_value(&event).unwrap_or_default();
        assert_eq!(
            names(&compared("turn_finished", value)),
            [
                "status",
                "error",
                "steps",
                "usage.input_tokens",
                "usage.output_tokens"
            ]
        );
        let record = json!({"type": "step_finished", "record": {"step": 0, "text": "hi", "finish_reason": "stop"}});
        assert_eq!(names(&compared("step_finished", record)), ["finish_reason"]);
    }

    #[test]
    fn a_field_only_one_side_has_keeps_its_place() {
        let side = |names: &[&str]| -> Vec<(String, Value)> {
            names
                .iter()
                .map(|n| ((*n).to_owned(), Value::Null))
                .collect()
        };
        let (a, b) = (side(&["x", "z"]), side(&["x", "y", "z", "w"]));
        assert_eq!(union(&a, &b), ["x", "y", "z", "w"]);
        assert_eq!(union(&b, &a), ["x", "y", "z", "w"]);
    }
}
