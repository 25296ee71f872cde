//! A model that serves the output a real model produced in a recorded mull log, so a session
//! recorded once against a provider becomes a deterministic regression test.
//!
//! **What is read.** The log's envelopes, in `seq` order, from any source (a store reader's
//! pages, a JSONL fixture …). A step runs from its `step_started` to the event that ends it, per
//! session and turn. Its request hash is the one `step_configured` recorded when the model call
//! started (older logs: `StepRecord.request["hash"]` of its `step_finished`), the
//! [`ModelRequest::canonical_hash`] of what was sent. Its parts are the `chunk` events in
//! between, taking the `original` of a `part_transformed` event (and skipping the chunks it
//! accounts for) when a stream transform changed a part — older logs: a chunk's own
//! `original` — and leaving out the parts the engine adds itself (`tool-result`, `tool-error`). Each `model_retried`
//! event is a failed attempt: its parts are discarded and the attempt is kept as a retry.
//!
//! **How a step ended** decides what follows its parts when it is served:
//! - `step_finished`: the stream ends there.
//! - the turn finished `aborted` first (the step was cancelled mid-call): the stream stays open
//!   after the recorded parts, so the ending comes from outside, as it did when recording —
//!   re-execution replay re-issues the recorded cancellation at the same point.
//! - the turn finished `error` first: the stream fails with the model's error as its
//!   `turn_failed` kept it (kind, status, body, retry delay), or, in logs without it, with the
//!   recorded message (an in-band error part among the parts ends the step before that, as it
//!   did).
//! - the log ends inside the step: the stream fails saying so.
//!
//! **What is served.** `stream(request)` hashes the request and serves the first not yet
//! served step recorded under that hash (first in, first out for repeated requests): first its
//! failed attempts, one retryable error per call (with the recorded delay as `retry_after`, so
//! a retry waits as long as it did), then one recorded part per stream item, so chunk
//! boundaries are the recorded ones.
//!
//! **A miss fails loudly**: an `InvalidRequest` [`ModelError`] whose message names the hash and
//! shows a field-by-field diff of the request against the nearest recorded one (the step whose
//! recorded fields differ least). Step records keep a [`RequestSummary`]; the request is
//! summarised the same way and compared with it — a changed setting or tool list shows as is, a
//! changed message or system prompt as a changed digest at its index, followed by the actual
//! text there. For a step that never finished, the fields `step_configured` recorded are
//! compared; for logs from before the summary, the whole recorded request. Only fields the
//! recording kept are compared. A miss is never retried or papered over.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use mull_core::fingerprint::digest;
use mull_core::{
    Envelope, Event, LanguageModel, ModelError, ModelErrorKind, ModelRequest, ModelStream,
    RequestSummary, StreamPart, TurnStatus,
};
use serde_json::{json, Value};

/// How many differing fields a miss message lists before it stops.
const MAX_DIFF_LINES: usize = 12;
/// How many characters of a differing value a miss message shows.
const MAX_VALUE_CHARS: usize = 120;

/// Why a log cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// A `step_finished` event has no request hash to match calls against.
    #[error("step_finished at seq {seq} (session {session_id}, step {step}) has no request hash in record.request[\"hash\"] nor in its step_configured")]
    MissingHash {
        seq: u64,
        session_id: String,
        step: u32,
    },
    /// The log holds no model step at all.
    #[error("the log holds no model step to replay")]
    NoSteps,
}

/// One failed attempt of a step's model call that was retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRetry {
    /// The error the attempt met, as recorded.
    pub error: String,
    /// How long the engine waited before the next attempt.
    pub delay_ms: u64,
}

/// How a recorded step ended, which is how its served stream ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEnding {
    /// `step_finished`: the stream ends after the parts.
    Finished,
    /// The turn was cancelled during the step: the stream stays open after the parts.
    Cancelled,
    /// The turn failed during the step: the stream fails with this error after the parts (the
    /// model's own error when the log kept it, else the failure's message).
    Failed { error: ModelError },
    /// The log ends inside the step.
    Cut,
}

/// One model step as recorded: its request hash and metadata, and what the model emitted.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedStep {
    /// `seq` of the event that ended the step (`step_finished`, the turn's ending, or the last
    /// event of the step when the log ends inside it).
    pub seq: u64,
    pub session_id: String,
    pub turn_id: Option<String>,
    pub step: u32,
    /// The recorded [`ModelRequest::canonical_hash`].
    pub request_hash: String,
    /// The recorded request metadata, used to explain misses: `StepRecord.request` of a
    /// finished step (a [`RequestSummary`]), the `step_configured` fields of one that was cut
    /// short.
    pub request: Value,
    /// Attempts that failed and were retried before the one that counted.
    pub retries: Vec<RecordedRetry>,
    /// The parts the model emitted, in order.
    pub parts: Vec<StreamPart>,
    pub ending: StepEnding,
}

/// A step being read: everything but its ending.
struct OpenStep {
    step: u32,
    hash: Option<String>,
    configured: Value,
    retries: Vec<RecordedRetry>,
    parts: Vec<StreamPart>,
    last_seq: u64,
    /// How many of the next chunk events a `part_transformed` event accounts for.
    transformed: u32,
}

impl OpenStep {
    fn close(
        self,
        seq: u64,
        key: (String, Option<String>),
        request: Value,
        ending: StepEnding,
    ) -> Option<RecordedStep> {
        let hash = self.hash?;
        Some(RecordedStep {
            seq,
            session_id: key.0,
            turn_id: key.1,
            step: self.step,
            request_hash: hash,
            request,
            retries: self.retries,
            parts: self.parts,
            ending,
        })
    }
}

/// Reads the recorded model steps out of a log's envelopes (see the module docs for the rules).
/// A step cut short in a log older than `step_configured.request_hash` cannot be identified and
/// is left out.
///
/// One pass over the log with one arm per event a step is read from, so the rules in the module
/// docs stay in one place.
pub fn recorded_steps(
    envelopes: impl IntoIterator<Item = Envelope>,
) -> Result<Vec<RecordedStep>, ReplayError> {
    let mut open: HashMap<(String, Option<String>), OpenStep> = HashMap::new();
    let mut steps: Vec<RecordedStep> = Vec::new();
    // Steps closed by a failed turn's end, until its `turn_failed` says what the model gave.
    let mut failed_step: HashMap<(String, Option<String>), usize> = HashMap::new();
    for envelope in envelopes {
        let key = (envelope.session_id.clone(), envelope.turn_id.clone());
        let seq = envelope.seq;
        if let Some(step) = open.get_mut(&key) {
            step.last_seq = seq;
        }
        match envelope.event {
            Event::StepStarted { step } => {
                open.insert(
                    key,
                    OpenStep {
                        step,
                        hash: None,
                        configured: Value::Null,
                        retries: Vec::new(),
                        parts: Vec::new(),
                        last_seq: seq,
                        transformed: 0,
                    },
                );
            }
            Event::StepConfigured {
                step,
                tool_choice,
                system,
                message_count,
                request_hash,
                ..
            } => {
                if let Some(open_step) = open.get_mut(&key).filter(|o| o.step == step) {
                    open_step.configured = json!({
                        "hash": request_hash,
                        "system": system.as_ref().map(digest),
                        "message_count": message_count,
                        "tool_choice": tool_choice,
                    });
                    open_step.hash = request_hash;
                }
            }
            Event::ModelRetried {
                step,
                error,
                delay_ms,
                ..
            } => {
                if let Some(open_step) = open.get_mut(&key).filter(|o| o.step == step) {
                    open_step.parts.clear();
                    open_step.retries.push(RecordedRetry { error, delay_ms });
                }
            }
            Event::PartTransformed {
                step,
                original,
                shown,
            } => {
                if let Some(open_step) = open.get_mut(&key).filter(|o| o.step == step) {
                    // The chunks that follow are what transforms made of it, not the model's.
                    open_step.transformed = shown;
                    if is_model_part(&original) {
                        open_step.parts.push(original);
                    }
                }
            }
            Event::Chunk {
                step,
                part,
                original,
            } => {
                let emitted = original.map_or(part, |o| *o);
                if let Some(open_step) = open.get_mut(&key).filter(|o| o.step == step) {
                    if open_step.transformed > 0 {
                        open_step.transformed -= 1;
                        continue;
                    }
                    if is_model_part(&emitted) {
                        open_step.parts.push(emitted);
                    }
                }
            }
            Event::StepFinished { record } => {
                let mut open_step = match open.remove(&key) {
                    Some(open_step) if open_step.step == record.step => open_step,
                    _ => OpenStep {
                        step: record.step,
                        hash: None,
                        configured: Value::Null,
                        retries: Vec::new(),
                        parts: Vec::new(),
                        last_seq: seq,
                        transformed: 0,
                    },
                };
                let recorded_hash = record.request.get("hash").and_then(Value::as_str);
                if open_step.hash.is_none() {
                    open_step.hash = recorded_hash.map(str::to_owned);
                }
                if open_step.hash.is_none() {
                    return Err(ReplayError::MissingHash {
                        seq,
                        session_id: envelope.session_id,
                        step: record.step,
                    });
                }
                steps.extend(open_step.close(seq, key, record.request, StepEnding::Finished));
            }
            Event::TurnFailed {
                model_error: Some(error),
                ..
            } => {
                // `turn_failed` follows the `turn_finished` that closed the failed step: the
                // step fails with the model's own error rather than the message callers saw.
                if let Some(StepEnding::Failed { error: served }) = failed_step
                    .remove(&key)
                    .and_then(|index| steps.get_mut(index))
                    .map(|step| &mut step.ending)
                {
                    *served = ModelError::from(error);
                }
            }
            Event::TurnFinished { status, error, .. } => {
                let Some(open_step) = open.remove(&key) else {
                    continue;
                };
                let ending = match status {
                    TurnStatus::Aborted => StepEnding::Cancelled,
                    _ => StepEnding::Failed {
                        error: ModelError::new(
                            ModelErrorKind::Other,
                            error.unwrap_or_else(|| "the step failed".to_owned()),
                        ),
                    },
                };
                let failed = matches!(ending, StepEnding::Failed { .. });
                let request = open_step.configured.clone();
                let before = steps.len();
                steps.extend(open_step.close(seq, key.clone(), request, ending));
                if failed && steps.len() > before {
                    failed_step.insert(key, steps.len() - 1);
                }
            }
            _ => {}
        }
    }
    // Steps the log ends inside, in the order they started.
    let mut cut: Vec<_> = open.into_iter().collect();
    cut.sort_by_key(|(_, s)| s.last_seq);
    for (key, open_step) in cut {
        let (seq, request) = (open_step.last_seq, open_step.configured.clone());
        steps.extend(open_step.close(seq, key, request, StepEnding::Cut));
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

/// A not yet served step: its index in `recorded`, and how many of its retries were served.
#[derive(Debug, Clone, Copy)]
struct Unserved {
    index: usize,
    retries_served: usize,
}

/// What a call gets.
enum Serve {
    Retry(RecordedRetry),
    Step(usize),
}

/// A [`LanguageModel`] that serves recorded steps by request hash.
#[derive(Debug)]
pub struct ReplayModel {
    model_id: String,
    /// Every recorded step, in log order, for explaining misses.
    recorded: Vec<RecordedStep>,
    /// Steps not yet served, per request hash, oldest first.
    unserved: Mutex<BTreeMap<String, VecDeque<Unserved>>>,
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
                Event::StepConfigured { model_id, .. } => Some(model_id.clone()),
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
        let mut unserved: BTreeMap<String, VecDeque<Unserved>> = BTreeMap::new();
        for (index, step) in steps.iter().enumerate() {
            unserved
                .entry(step.request_hash.clone())
                .or_default()
                .push_back(Unserved {
                    index,
                    retries_served: 0,
                });
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

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, VecDeque<Unserved>>> {
        self.unserved
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next thing to serve for `hash`: a recorded failed attempt, or the step itself.
    /// `Err(true)` when every step of that hash was served, `Err(false)` when there is none.
    fn next(&self, hash: &str) -> Result<Serve, bool> {
        let mut unserved = self.lock();
        let queue = unserved.get_mut(hash).ok_or(false)?;
        let front = queue.front_mut().ok_or(true)?;
        let step = self.recorded.get(front.index).ok_or(false)?;
        if let Some(retry) = step.retries.get(front.retries_served) {
            front.retries_served += 1;
            return Ok(Serve::Retry(retry.clone()));
        }
        let index = front.index;
        queue.pop_front();
        Ok(Serve::Step(index))
    }

    fn miss(&self, request: &ModelRequest, hash: &str, exhausted: bool) -> ModelError {
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
        let summary = RequestSummary::of(request).to_value();
        let full = serde_json::to_value(ModelRequest {
            settings: request.settings.redacted(),
            ..request.clone()
        })
        .unwrap_or(Value::Null);
        let nearest = self
            .recorded
            .iter()
            .map(|step| {
                let actual = if is_summary(&step.request) {
                    &summary
                } else {
                    &full
                };
                let lines = diff(
                    &recorded_fields(&step.request),
                    &comparable(&step.request, actual),
                );
                (lines, step)
            })
            .min_by_key(|(lines, _)| lines.len());
        if let Some((lines, step)) = nearest {
            message.push_str(&format!(
                "\nnearest recorded request: seq {}, session {}, step {} (hash {}); recorded → actual:",
                step.seq, step.session_id, step.step, step.request_hash
            ));
            let explained = if is_summary(&step.request) {
                explain(lines, request)
            } else {
                lines
            };
            for line in explained.iter().take(MAX_DIFF_LINES) {
                message.push_str("\n  ");
                message.push_str(line);
            }
            if explained.len() > MAX_DIFF_LINES {
                message.push_str(&format!(
                    "\n  … and {} more differences",
                    explained.len() - MAX_DIFF_LINES
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
        let index = match self.next(&hash) {
            Ok(Serve::Step(index)) => index,
            Ok(Serve::Retry(retry)) => {
                return Err(ModelError {
                    retry_after: Some(Duration::from_millis(retry.delay_ms)),
                    ..ModelError::new(ModelErrorKind::Transient, retry.error)
                })
            }
            Err(exhausted) => return Err(self.miss(&request, &hash, exhausted)),
        };
        let Some(step) = self.recorded.get(index) else {
            return Err(self.miss(&request, &hash, false));
        };
        let parts = futures::stream::iter(step.parts.clone().into_iter().map(Ok));
        let stream: ModelStream = match &step.ending {
            StepEnding::Finished => Box::pin(parts),
            StepEnding::Cancelled => Box::pin(parts.chain(futures::stream::pending())),
            StepEnding::Failed { error } => Box::pin(parts.chain(futures::stream::once(
                std::future::ready(Err(error.clone())),
            ))),
            StepEnding::Cut => {
                let error = format!(
                    "replay: the recording ends inside step {} of turn {} (seq {}); it does not say how the step ended",
                    step.step,
                    step.turn_id.as_deref().unwrap_or("-"),
                    step.seq
                );
                Box::pin(parts.chain(futures::stream::once(std::future::ready(Err(
                    ModelError::new(ModelErrorKind::Other, error),
                )))))
            }
        };
        Ok(stream)
    }
}

/// Whether recorded request metadata is in the summary form (a [`RequestSummary`], or the
/// `step_configured` fields of a step cut short) rather than a whole request.
fn is_summary(recorded: &Value) -> bool {
    recorded.get("message_count").is_some()
}

/// The diff lines of a summary comparison, each changed message or system prompt followed by
/// the actual text there (the recording keeps only its digest).
fn explain(lines: Vec<String>, request: &ModelRequest) -> Vec<String> {
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        let detail = if let Some(rest) = line.strip_prefix("messages[") {
            rest.split(']')
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| request.messages.get(i).map(|m| (i, m)))
                .map(|(i, m)| {
                    format!(
                        "  actual messages[{i}]: {}",
                        shown(&serde_json::to_value(m).unwrap_or(Value::Null))
                    )
                })
        } else if line.starts_with("system:") {
            request
                .system
                .as_ref()
                .map(|s| format!("  actual system: {}", shown(&Value::String(s.clone()))))
        } else {
            None
        };
        out.push(line);
        out.extend(detail);
    }
    out
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
