//! A model that serves the output a real model produced in a recorded mull log, so a session
//! recorded once against a provider becomes a deterministic regression test.
//!
//! **What is read.** The log's envelopes, in `seq` order, from any source (a store reader's
//! pages, a JSONL fixture …). For each step, the parts the model emitted are the `chunk` events
//! between the step's `step_started` and its `step_finished` (per session and turn), taking a
//! chunk's `original` part when a stream transform changed it, and leaving out the parts the
//! engine adds itself (`tool-result`, `tool-error`). A `model_retried` event discards the parts
//! of the failed attempt. The step's request hash is `StepRecord.request["hash"]`, the
//! [`ModelRequest::canonical_hash`] the engine records.
//!
//! **What is served.** `stream(request)` hashes the request and serves the first not yet
//! served step recorded under that hash (first in, first out for repeated requests), one
//! recorded part per stream item, so chunk boundaries are the recorded ones.
//!
//! **A miss fails loudly**: an `InvalidRequest` [`ModelError`] whose message names the hash and
//! shows a field-by-field diff of the request (as JSON) against the nearest recorded request
//! metadata (the step whose recorded fields differ least), so a changed prompt or tool list is
//! visible at a glance. Only the fields the engine recorded next to the hash are compared; a
//! recording that keeps nothing but the hash still names the nearest step. A miss is never
//! retried or papered over.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use mull_core::{
    Envelope, Event, LanguageModel, ModelError, ModelErrorKind, ModelRequest, ModelStream,
    StreamPart,
};
use serde_json::Value;

/// How many differing fields a miss message lists before it stops.
const MAX_DIFF_LINES: usize = 12;
/// How many characters of a differing value a miss message shows.
const MAX_VALUE_CHARS: usize = 120;

/// Why a log cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// A `step_finished` event has no request hash to match calls against.
    #[error("step_finished at seq {seq} (session {session_id}, step {step}) has no request hash in record.request[\"hash\"]")]
    MissingHash {
        seq: u64,
        session_id: String,
        step: u32,
    },
    /// The log holds no finished step at all.
    #[error("the log holds no finished model step to replay")]
    NoSteps,
}

/// One model step as recorded: its request hash and metadata, and the parts the model emitted.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedStep {
    /// `seq` of the step's `step_finished` event.
    pub seq: u64,
    pub session_id: String,
    pub turn_id: Option<String>,
    pub step: u32,
    /// The recorded [`ModelRequest::canonical_hash`].
    pub request_hash: String,
    /// The recorded request metadata (`StepRecord.request`), used to explain misses.
    pub request: Value,
    /// The parts the model emitted, in order.
    pub parts: Vec<StreamPart>,
}

/// Reads the recorded model steps out of a log's envelopes (see the module docs for the rules).
pub fn recorded_steps(
    envelopes: impl IntoIterator<Item = Envelope>,
) -> Result<Vec<RecordedStep>, ReplayError> {
    let mut open: HashMap<(String, Option<String>), (u32, Vec<StreamPart>)> = HashMap::new();
    let mut steps = Vec::new();
    for envelope in envelopes {
        let key = (envelope.session_id.clone(), envelope.turn_id.clone());
        match envelope.event {
            Event::StepStarted { step } => {
                open.insert(key, (step, Vec::new()));
            }
            Event::ModelRetried { step, .. } => {
                if let Some((open_step, parts)) = open.get_mut(&key) {
                    if *open_step == step {
                        parts.clear();
                    }
                }
            }
            Event::Chunk {
                step,
                part,
                original,
            } => {
                let emitted = original.unwrap_or(part);
                if !is_model_part(&emitted) {
                    continue;
                }
                if let Some((open_step, parts)) = open.get_mut(&key) {
                    if *open_step == step {
                        parts.push(emitted);
                    }
                }
            }
            Event::StepFinished { record } => {
                let parts = match open.remove(&key) {
                    Some((step, parts)) if step == record.step => parts,
                    _ => Vec::new(),
                };
                let Some(hash) = record.request.get("hash").and_then(Value::as_str) else {
                    return Err(ReplayError::MissingHash {
                        seq: envelope.seq,
                        session_id: envelope.session_id,
                        step: record.step,
                    });
                };
                steps.push(RecordedStep {
                    seq: envelope.seq,
                    session_id: envelope.session_id,
                    turn_id: envelope.turn_id,
                    step: record.step,
                    request_hash: hash.to_owned(),
                    request: record.request.clone(),
                    parts,
                });
            }
            _ => {}
        }
    }
    Ok(steps)
}

/// Whether a model (rather than the engine) emits this kind of part.
fn is_model_part(part: &StreamPart) -> bool {
    !matches!(
        part,
        StreamPart::ToolResult { .. } | StreamPart::ToolError { .. }
    )
}

/// A [`LanguageModel`] that serves recorded steps by request hash.
#[derive(Debug)]
pub struct ReplayModel {
    model_id: String,
    /// Every recorded step, in log order, for explaining misses.
    recorded: Vec<RecordedStep>,
    /// Indexes into `recorded` not yet served, per request hash, oldest first.
    unserved: Mutex<BTreeMap<String, VecDeque<usize>>>,
}

impl ReplayModel {
    /// A model serving the steps recorded in `envelopes`; its model id is the first step's.
    pub fn from_envelopes(
        envelopes: impl IntoIterator<Item = Envelope>,
    ) -> Result<Self, ReplayError> {
        let envelopes: Vec<Envelope> = envelopes.into_iter().collect();
        let model_id = envelopes
            .iter()
            .find_map(|e| match &e.event {
                Event::StepFinished { record } => Some(record.model_id.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let recorded = recorded_steps(envelopes)?;
        if recorded.is_empty() {
            return Err(ReplayError::NoSteps);
        }
        Ok(Self::from_steps(model_id, recorded))
    }

    /// A model serving `steps` under `model_id`.
    pub fn from_steps(model_id: impl Into<String>, steps: Vec<RecordedStep>) -> Self {
        let mut unserved: BTreeMap<String, VecDeque<usize>> = BTreeMap::new();
        for (i, step) in steps.iter().enumerate() {
            unserved
                .entry(step.request_hash.clone())
                .or_default()
                .push_back(i);
        }
        Self {
            model_id: model_id.into(),
            recorded: steps,
            unserved: Mutex::new(unserved),
        }
    }

    /// How many recorded steps have not been served yet.
    pub fn remaining(&self) -> usize {
        self.lock().values().map(VecDeque::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, VecDeque<usize>>> {
        self.unserved
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn miss(&self, request: &ModelRequest, hash: &str, exhausted: bool) -> ModelError {
        let actual = serde_json::to_value(ModelRequest {
            settings: request.settings.redacted(),
            ..request.clone()
        })
        .unwrap_or(Value::Null);
        let mut message = if exhausted {
            format!(
                "replay: every recorded step for request {hash} has already been served ({} recorded steps in all)",
                self.recorded.len()
            )
        } else {
            format!(
                "replay: no recorded step matches request {hash} ({} recorded steps)",
                self.recorded.len()
            )
        };
        let nearest = self
            .recorded
            .iter()
            .map(|step| {
                (
                    diff(
                        &recorded_fields(&step.request),
                        &comparable(&step.request, &actual),
                    ),
                    step,
                )
            })
            .min_by_key(|(lines, _)| lines.len());
        if let Some((lines, step)) = nearest {
            message.push_str(&format!(
                "\nnearest recorded request: seq {}, session {}, step {} (hash {}); recorded → actual:",
                step.seq, step.session_id, step.step, step.request_hash
            ));
            for line in lines.iter().take(MAX_DIFF_LINES) {
                message.push_str("\n  ");
                message.push_str(line);
            }
            if lines.len() > MAX_DIFF_LINES {
                message.push_str(&format!(
                    "\n  … and {} more differences",
                    lines.len() - MAX_DIFF_LINES
                ));
            }
        }
        ModelError::new(ModelErrorKind::InvalidRequest, message)
    }
}

#[async_trait]
impl LanguageModel for ReplayModel {
    fn provider(&self) -> &str {
        "replay"
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let hash = request.canonical_hash();
        let next = {
            let mut unserved = self.lock();
            match unserved.get_mut(&hash) {
                Some(queue) => queue.pop_front().ok_or(true),
                None => Err(false),
            }
        };
        match next.map(|i| self.recorded.get(i)) {
            Ok(Some(step)) => {
                let parts: Vec<Result<StreamPart, ModelError>> =
                    step.parts.iter().cloned().map(Ok).collect();
                Ok(Box::pin(futures::stream::iter(parts)))
            }
            Ok(None) => Err(self.miss(&request, &hash, false)),
            Err(exhausted) => Err(self.miss(&request, &hash, exhausted)),
        }
    }
}

/// The recorded request metadata without its hash: the fields a diff can compare.
fn recorded_fields(recorded: &Value) -> Value {
    let mut fields = recorded.clone();
    if let Value::Object(map) = &mut fields {
        map.remove("hash");
    }
    fields
}

/// The actual request reduced to the top-level fields the recording kept, so that fields the
/// engine did not record are not reported as differences.
fn comparable(recorded: &Value, actual: &Value) -> Value {
    match (recorded, actual) {
        (Value::Object(kept), Value::Object(all)) => Value::Object(
            all.iter()
                .filter(|(key, _)| kept.contains_key(*key) && key.as_str() != "hash")
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ),
        _ => actual.clone(),
    }
}

/// The differences between a recorded request's metadata and the actual request, one line per
/// differing JSON path: `path: recorded ≠ actual`. Paths only one side has are shown with
/// `(absent)` on the other.
fn diff(recorded: &Value, actual: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    diff_into("", recorded, actual, &mut lines);
    lines
}

fn diff_into(path: &str, recorded: &Value, actual: &Value, out: &mut Vec<String>) {
    match (recorded, actual) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff_into(&sub, x, y, out),
                    (Some(x), None) => out.push(format!("{sub}: {} ≠ (absent)", shown(x))),
                    (None, Some(y)) => out.push(format!("{sub}: (absent) ≠ {}", shown(y))),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let sub = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => diff_into(&sub, x, y, out),
                    (Some(x), None) => out.push(format!("{sub}: {} ≠ (absent)", shown(x))),
                    (None, Some(y)) => out.push(format!("{sub}: (absent) ≠ {}", shown(y))),
                    (None, None) => {}
                }
            }
        }
        (a, b) if a == b => {}
        (a, b) => {
            let at = if path.is_empty() { "(request)" } else { path };
            out.push(format!("{at}: {} ≠ {}", shown(a), shown(b)));
        }
    }
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= MAX_VALUE_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_names_paths_and_absent_sides() {
        let lines = diff(
            &json!({"hash": "a", "system": "x", "messages": [{"t": 1}]}),
            &json!({"hash": "b", "messages": [{"t": 1}, {"t": 2}], "tools": []}),
        );
        assert_eq!(
            lines,
            vec![
                r#"hash: "a" ≠ "b""#,
                r#"messages[1]: (absent) ≠ {"t":2}"#,
                r#"system: "x" ≠ (absent)"#,
                "tools: (absent) ≠ []",
            ]
        );
    }

    #[test]
    fn long_values_are_cut() {
        let long = Value::String("y".repeat(500));
        assert!(shown(&long).chars().count() <= MAX_VALUE_CHARS + 1);
    }
}
