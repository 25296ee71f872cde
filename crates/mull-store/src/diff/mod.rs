//! Diff: two runs of a conversation compared turn by turn, step by step and tool call by tool
//! call, not event by event.
//!
//! Two runs of one conversation (two sessions of a log, one session in two logs, a session and
//! its fork, two JSONL fixtures) rarely line up by seq: one streams its text in more chunks,
//! retries a model call, or was forked in the middle of a turn. So each run is first folded
//! into a [`Run`] — its turns in order, each turn's steps in order, each step's tool calls in
//! order — and the two are aligned by those ordinals: turn 2 with turn 2, its step 0 with step
//! 0, the step's first tool call with the first. Ids (turn, request, call) are not compared:
//! a re-run makes new ones.
//!
//! What is compared, per aligned item ([`Aspect`] names the kind of each difference): the
//! turn's input (user text, entry path) and configuration, each step's configuration, text,
//! reasoning, finish reason and usage, each tool call's input, decision (action, reason,
//! effective input, the output a block or substitute gave) and outcome, errors (failed turns,
//! failed hooks, stream errors, retries), the turn's status and usage, and timing: time to the
//! first chunk, step and turn durations, the longest gap between two chunks, tool durations.
//! An event's fields are compared as serde writes them (named as in the log), all but the ids,
//! times and repeats a diff leaves out (`fields.rs` lists them, with why), so a field added to
//! an event is compared with no edit here.
//!
//! The **first divergence** is the earliest difference that is not timing, in the order the
//! first run wrote its events, named exactly: turn, step, tool call, event, field and the seq
//! of the event on each side. Timing differences are reported but never called the first
//! divergence: two live runs never take the same time.
//!
//! [`diff_runs`] is a pure function of two runs; [`RunDiff::table`] renders a readable table,
//! and `RunDiff` serializes as JSON. A dashboard shows two turns side by side by building each
//! [`Run`] from one turn's events.

mod compare;
mod fields;
mod fold;
mod render;

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

pub use fold::{CallRun, Facts, Run, StepRun, Timing, TurnRun};

/// The kind of a difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Aspect {
    /// A turn, step or tool call one run has and the other does not.
    Structure,
    /// What started the turn: the user's text, the entry path, continuation, attempt.
    Input,
    /// What `before_turn` / `before_step` decided: model, system prompt, tools, settings.
    Config,
    /// A tool call's decision: action (allow / rewrite / block / substitute …), reason,
    /// effective input, the output it gave instead of running.
    Decision,
    /// Which tool the model called and with what input.
    ToolInput,
    /// A tool call's outcome: success, output, error.
    ToolOutput,
    /// The text a step streamed.
    Text,
    /// The reasoning a step streamed.
    Reasoning,
    /// Why a step stopped.
    FinishReason,
    /// A failed turn, a failed hook, a stream error, a retried model call, a turn's error.
    Error,
    /// Token counts.
    Usage,
    /// How a turn ended: status and step count.
    Status,
    /// Durations and gaps, in milliseconds.
    Timing,
}

impl Aspect {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Aspect::Structure => "structure",
            Aspect::Input => "input",
            Aspect::Config => "config",
            Aspect::Decision => "decision",
            Aspect::ToolInput => "tool_input",
            Aspect::ToolOutput => "tool_output",
            Aspect::Text => "text",
            Aspect::Reasoning => "reasoning",
            Aspect::FinishReason => "finish_reason",
            Aspect::Error => "error",
            Aspect::Usage => "usage",
            Aspect::Status => "status",
            Aspect::Timing => "timing",
        }
    }
}

/// One thing that differs between two aligned runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    pub aspect: Aspect,
    /// The turn, counted from 1 in each run.
    pub turn: usize,
    /// The step (as the turn numbers it), when the difference is inside one.
    pub step: Option<u32>,
    /// The tool call, counted from 1 within its step, when the difference is about one.
    pub call: Option<usize>,
    /// The tool's name (the first run's, else the second's).
    pub tool: Option<String>,
    /// The event the compared field comes from (`tool_decided`, `chunk`, `step_finished` …).
    pub event: String,
    /// The field of that event (`action`, `text`, `usage.output_tokens`, `duration_ms` …).
    pub field: String,
    /// The value in the first run (`null` when it has none).
    pub a: Value,
    /// The value in the second run.
    pub b: Value,
    /// The seq of the event in each run, when there is one.
    pub a_seq: Option<u64>,
    pub b_seq: Option<u64>,
    /// More about where, e.g. `"first differs at char 14"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// (turn, position in the first run): the order differences are listed in.
    #[serde(skip)]
    order: (usize, usize),
}

impl Difference {
    /// Where it is, as a person reads it: `turn 2, step 0, call 1 (delete_file), tool_decided.action`.
    pub fn location(&self) -> String {
        let mut out = format!("turn {}", self.turn);
        if let Some(step) = self.step {
            out.push_str(&format!(", step {step}"));
        }
        if let Some(call) = self.call {
            out.push_str(&format!(", call {call}"));
            if let Some(tool) = &self.tool {
                out.push_str(&format!(" ({tool})"));
            }
        }
        out.push_str(&format!(", {}.{}", self.event, self.field));
        out
    }
}

/// A run as a report names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunInfo {
    pub label: String,
    pub session_id: String,
    pub turns: usize,
    pub events: usize,
}

/// The result of comparing two runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDiff {
    pub a: RunInfo,
    pub b: RunInfo,
    /// The earliest difference that is not timing; `None` when the runs behave alike.
    pub first_divergence: Option<Difference>,
    /// Every difference, in the order the first run wrote the events they come from.
    pub differences: Vec<Difference>,
    /// How many differences of each aspect.
    pub by_aspect: BTreeMap<Aspect, usize>,
}

impl RunDiff {
    /// Whether the two runs behave alike (timing aside).
    pub fn is_same(&self) -> bool {
        self.first_divergence.is_none()
    }
}

/// What to compare.
#[derive(Debug, Clone, Default)]
pub struct DiffOptions {
    /// Compare even when the runs look like different conversations.
    pub allow_unrelated: bool,
    /// Leave timing out.
    pub ignore_timing: bool,
}

/// Why two runs were not compared.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum DiffError {
    /// Neither run is a fork of the other and their first user messages differ: comparing them would report everything as different.
    #[error("{a} and {b} are not runs of one conversation: their first user messages differ ({a_text:?} vs {b_text:?}) and neither is a fork of the other (compare them anyway with allow_unrelated)")]
    Unrelated {
        a: String,
        b: String,
        a_text: Option<String>,
        b_text: Option<String>,
    },
}

/// Reads one session of a log as a run named `label`; a fork's history is resolved (its
/// origin's prefix, then its own events), so a session and its fork align from turn 1.
pub fn read_run(
    reader: &dyn crate::ReadLog,
    session_id: &str,
    label: impl Into<String>,
) -> Result<Run, crate::StoreError> {
    let events = reader.session_history(session_id)?;
    let mut run = Run::from_events(label, &events);
    run.session_id = session_id.to_owned();
    run.lineage = reader.lineage(session_id)?;
    Ok(run)
}

/// Compares two runs; see the module docs for how they are aligned and what is compared.
pub fn diff_runs(a: &Run, b: &Run, options: &DiffOptions) -> Result<RunDiff, DiffError> {
    if !options.allow_unrelated && !compare::related(a, b) {
        return Err(DiffError::Unrelated {
            a: a.label.clone(),
            b: b.label.clone(),
            a_text: a.first_user_text.clone(),
            b_text: b.first_user_text.clone(),
        });
    }
    let mut differences = compare::runs(a, b);
    if options.ignore_timing {
        differences.retain(|d| d.aspect != Aspect::Timing);
    }
    differences.sort_by_key(|d| d.order);
    let first_divergence = differences
        .iter()
        .find(|d| d.aspect != Aspect::Timing)
        .cloned();
    let mut by_aspect = BTreeMap::new();
    for d in &differences {
        *by_aspect.entry(d.aspect).or_insert(0) += 1;
    }
    let info = |run: &Run| RunInfo {
        label: run.label.clone(),
        session_id: run.session_id.clone(),
        turns: run.turns.len(),
        events: run.events,
    };
    Ok(RunDiff {
        a: info(a),
        b: info(b),
        first_divergence,
        differences,
        by_aspect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use mull_core::{EntryPath, Envelope, Event, StreamPart, UIMessage};

    /// One turn of one step that streams `deltas`.
    fn run(label: &str, deltas: &[&str]) -> Run {
        let mut events = vec![
            Event::UserMessagesSaved {
                request_id: None,
                messages: vec![UIMessage::user("u_1", "hi")],
            },
            Event::TurnStarted {
                request_id: "req_1".into(),
                message_id: "msg_1".into(),
                entry: EntryPath::Chat,
                continuation: false,
                attempt: 0,
                body: Value::Null,
            },
            Event::StepStarted { step: 0 },
        ];
        for text in deltas {
            events.push(Event::Chunk {
                step: 0,
                part: StreamPart::TextDelta {
                    id: "t".into(),
                    text: (*text).into(),
                },
                original: None,
            });
        }
        let envelopes: Vec<Envelope> = events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Envelope {
                seq: 100 + i as u64,
                session_id: label.into(),
                turn_id: Some("turn_1".into()),
                at: DateTime::from_timestamp_micros(1_000 * i as i64).unwrap_or_default(),
                v: 1,
                event,
            })
            .collect();
        Run::from_events(label, &envelopes)
    }

    #[test]
    fn text_divergence_names_the_character_and_the_chunk_on_each_side() {
        let a = run("a", &["Hello, ", "world."]);
        let b = run("b", &["Hello, ", "there", "."]);
        let diff = diff_runs(&a, &b, &DiffOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let first = diff
            .first_divergence
            .unwrap_or_else(|| panic!("no divergence"));
        assert_eq!(first.aspect, Aspect::Text);
        assert_eq!(first.note.as_deref(), Some("first differs at char 7"));
        // seqs 100.. : user messages, turn start, step start, then the chunks.
        assert_eq!((first.a_seq, first.b_seq), (Some(104), Some(104)));
        assert_eq!(first.location(), "turn 1, step 0, chunk.text");
    }

    #[test]
    fn a_step_only_one_side_has_is_a_structural_difference() {
        let a = run("a", &["same"]);
        let mut b = run("b", &["same"]);
        b.turns[0].steps.clear();
        let diff = diff_runs(&a, &b, &DiffOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let first = diff
            .first_divergence
            .unwrap_or_else(|| panic!("no divergence"));
        assert_eq!(
            (first.aspect, first.field.as_str()),
            (Aspect::Structure, "step")
        );
    }
}
