//! A run folded for comparison: its turns, each turn's steps, each step's tool calls, and the
//! facts of each, with the event every fact came from.
//!
//! A [`Run`] is built from one session's events in order (a session and its fork prefix, one
//! turn, or a JSONL fixture's session). It keeps only what a diff compares, so building it is
//! one pass with no per-chunk allocation beyond the text the chunks carry.

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, StreamPart};
use serde_json::Value;

use super::fields;

use crate::pacing::TurnPacing;

/// One event's contribution to a run: which event it was, where it stands, and the compared
/// fields it carried (name → value), read through serde (see `fields`).
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// The event's kind (`tool_decided`, `step_finished` …).
    pub event: String,
    /// Its seq in the log it was read from.
    pub seq: u64,
    /// Its position among the run's events (0 = the first), which orders differences.
    pub pos: usize,
    pub fields: Vec<(String, Value)>,
}

impl Facts {
    /// The value of the compared field `name`, when the event carried it.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// One tool call of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRun {
    pub call_id: String,
    pub tool: String,
    /// `tool_call_started`: the tool and the model's input.
    pub started: Facts,
    /// `tool_decided`: action, reason, effective input, the output a block or substitute gave.
    pub decided: Option<Facts>,
    /// `tool_call_finished` or `client_tool_result`: success, output, error.
    pub finished: Option<Facts>,
    /// As the outcome recorded it.
    pub duration_ms: Option<u64>,
}

/// One step of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRun {
    pub step: u32,
    /// `step_configured`: model, tools, tool choice, system, message count, overrides.
    pub configured: Option<Facts>,
    /// The text the step streamed, and where each delta ended in it: (end offset, seq, pos).
    pub text: String,
    pub text_chunks: Vec<(usize, u64, usize)>,
    pub reasoning: String,
    pub reasoning_chunks: Vec<(usize, u64, usize)>,
    pub calls: Vec<CallRun>,
    /// Errors the stream reported and retries of the model call.
    pub errors: Vec<Facts>,
    /// `step_finished`: finish reason and usage.
    pub finished: Option<Facts>,
    pub timing: Timing,
    /// The first event of the step, for ordering a step one side lacks.
    pub pos: usize,
    pub seq: u64,
}

impl StepRun {
    /// A step begun by `env` (its start, or its first event when the start was not seen).
    fn new(step: u32, env: &Envelope, pos: usize) -> StepRun {
        StepRun {
            step,
            configured: None,
            text: String::new(),
            text_chunks: Vec::new(),
            reasoning: String::new(),
            reasoning_chunks: Vec::new(),
            calls: Vec::new(),
            errors: Vec::new(),
            finished: None,
            timing: Timing {
                started_at: Some(env.at),
                ..Timing::default()
            },
            pos,
            seq: env.seq,
        }
    }
}

/// When an item (a turn, a step) started and ended, from the events' clock readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timing {
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl Timing {
    /// From the start to the end, in milliseconds.
    pub fn duration_ms(&self) -> Option<u64> {
        Some(
            (self.finished_at? - self.started_at?)
                .num_milliseconds()
                .max(0) as u64,
        )
    }
}

/// One turn attempt (one `turn_started`).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRun {
    pub turn_id: Option<String>,
    pub request_id: String,
    /// `turn_started` with the text of the user messages saved for it: entry, continuation,
    /// attempt, user text.
    pub started: Facts,
    /// `turn_configured`: the merged TurnConfig, field by field.
    pub configured: Option<Facts>,
    pub steps: Vec<StepRun>,
    /// `hook_failed` events of the turn.
    pub hook_failures: Vec<Facts>,
    /// `turn_failed`: stage, error.
    pub failed: Option<Facts>,
    /// `turn_finished`: status, error, steps, usage.
    pub finished: Option<Facts>,
    pub timing: Timing,
    /// The turn's pacing (first chunk, the silences between chunks), the fold the dashboard
    /// draws, so both show the same numbers.
    pub pacing: TurnPacing,
}

/// A session's events folded into turns, steps and tool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// How the run is named in a report (`demo.db@sess_1`).
    pub label: String,
    pub session_id: String,
    pub turns: Vec<TurnRun>,
    /// The text of the first user message, which tells whether two runs are of one
    /// conversation.
    pub first_user_text: Option<String>,
    /// How many events were folded.
    pub events: usize,
    /// The sessions this run was forked from, nearest first (empty for a run that is no fork).
    pub lineage: Vec<String>,
}

impl Run {
    /// Folds `events` (one session's, in seq order) into a run named `label`. Events of turns
    /// that never started here (a fork's prefix cut inside a turn keeps its turn's start) and
    /// events outside any turn only add what they carry: user messages.
    pub fn from_events(label: impl Into<String>, events: &[Envelope]) -> Run {
        let mut fold = Fold::default();
        for (pos, env) in events.iter().enumerate() {
            fold.apply(pos, env);
        }
        Run {
            label: label.into(),
            session_id: events
                .first()
                .map(|e| e.session_id.clone())
                .unwrap_or_default(),
            turns: fold.turns,
            first_user_text: fold.first_user_text,
            events: events.len(),
            lineage: Vec::new(),
        }
    }

    /// The run cut down to its turn `turn` (counted from 1), or `None` when it has no such
    /// turn: what comparing two chosen turns needs.
    pub fn only_turn(&self, turn: usize) -> Option<Run> {
        let kept = self.turns.get(turn.checked_sub(1)?)?.clone();
        Some(Run {
            turns: vec![kept],
            ..self.clone()
        })
    }
}

#[derive(Default)]
struct Fold {
    turns: Vec<TurnRun>,
    first_user_text: Option<String>,
    /// User text saved since the last turn started.
    pending_user_text: String,
}

impl Fold {
    fn apply(&mut self, pos: usize, env: &Envelope) {
        self.fold(pos, env);
        if let Some(turn) = self.turn(env) {
            turn.pacing.apply(env);
        }
    }

    fn fold(&mut self, pos: usize, env: &Envelope) {
        let facts = |fields: Vec<(String, Value)>| Facts {
            event: env.kind().to_owned(),
            seq: env.seq,
            pos,
            fields,
        };
        let compared = || {
            let kind = env.kind();
            fields::compared(
                kind,
                serde_json::to_value(&env.event).unwrap_or(Value::Null),
            )
        };
        match &env.event {
            Event::UserMessagesSaved { messages, .. }
            | Event::SubmissionAccepted { messages, .. } => {
                for message in messages {
                    let text = message.plain_text();
                    if self.first_user_text.is_none() {
                        self.first_user_text = Some(text.clone());
                    }
                    if !self.pending_user_text.is_empty() {
                        self.pending_user_text.push('\n');
                    }
                    self.pending_user_text.push_str(&text);
                }
            }
            Event::TurnStarted { request_id, .. } => {
                let user_text = std::mem::take(&mut self.pending_user_text);
                let mut fields = compared();
                fields.push(("user_text".to_owned(), Value::String(user_text)));
                self.turns.push(TurnRun {
                    turn_id: env.turn_id.clone(),
                    request_id: request_id.clone(),
                    started: facts(fields),
                    configured: None,
                    steps: Vec::new(),
                    hook_failures: Vec::new(),
                    failed: None,
                    finished: None,
                    timing: Timing {
                        started_at: Some(env.at),
                        ..Timing::default()
                    },
                    pacing: TurnPacing::new(),
                });
            }
            Event::StepStarted { step } => {
                if let Some(turn) = self.turn(env) {
                    turn.steps.push(StepRun::new(*step, env, pos));
                }
            }
            Event::Chunk { step, part, .. } => {
                if let Some(s) = self.step(env, *step, pos) {
                    match part {
                        StreamPart::TextDelta { text, .. } => {
                            s.text.push_str(text);
                            s.text_chunks.push((s.text.len(), env.seq, pos));
                        }
                        StreamPart::ReasoningDelta { text, .. } => {
                            s.reasoning.push_str(text);
                            s.reasoning_chunks.push((s.reasoning.len(), env.seq, pos));
                        }
                        StreamPart::Error { .. } => {
                            let part = serde_json::to_value(part).unwrap_or(Value::Null);
                            s.errors.push(facts(fields::compared(env.kind(), part)));
                        }
                        _ => {}
                    }
                }
            }
            Event::ToolCallStarted {
                step,
                call_id,
                tool,
                ..
            } => {
                if let Some(s) = self.step(env, *step, pos) {
                    s.calls.push(CallRun {
                        call_id: call_id.clone(),
                        tool: tool.clone(),
                        started: facts(compared()),
                        decided: None,
                        finished: None,
                        duration_ms: None,
                    });
                }
            }
            Event::TurnConfigured { .. } => {
                let fields = compared();
                if let Some(turn) = self.turn(env) {
                    turn.configured = Some(facts(fields));
                }
            }
            Event::StepConfigured { step, .. } => {
                let fields = compared();
                if let Some(s) = self.step(env, *step, pos) {
                    s.configured = Some(facts(fields));
                }
            }
            Event::ModelRetried { step, .. } => {
                let fields = compared();
                if let Some(s) = self.step(env, *step, pos) {
                    s.errors.push(facts(fields));
                }
            }
            Event::ToolDecided { step, call_id, .. } => {
                let fields = compared();
                if let Some(call) = self.call(env, *step, call_id) {
                    call.decided = Some(facts(fields));
                }
            }
            Event::ToolCallFinished {
                step,
                call_id,
                duration_ms,
                ..
            } => {
                let fields = compared();
                if let Some(call) = self.call(env, *step, call_id) {
                    call.finished = Some(facts(fields));
                    call.duration_ms = Some(*duration_ms);
                }
            }
            Event::ClientToolResult { call_id, .. } => {
                let fields = compared();
                let call = self
                    .turns
                    .iter_mut()
                    .rev()
                    .flat_map(|t| t.steps.iter_mut().rev())
                    .flat_map(|s| s.calls.iter_mut())
                    .find(|c| c.call_id == *call_id);
                if let Some(call) = call {
                    call.finished = Some(facts(fields));
                }
            }
            Event::StepFinished { record } => {
                let fields = compared();
                if let Some(s) = self.step(env, record.step, pos) {
                    s.finished = Some(facts(fields));
                    s.timing.finished_at = Some(env.at);
                }
            }
            Event::HookFailed { .. } => {
                let fields = compared();
                if let Some(turn) = self.turn(env) {
                    turn.hook_failures.push(facts(fields));
                }
            }
            Event::TurnFailed { .. } => {
                let fields = compared();
                if let Some(turn) = self.turn(env) {
                    turn.failed = Some(facts(fields));
                }
            }
            Event::TurnFinished { .. } => {
                let fields = compared();
                if let Some(turn) = self.turn(env) {
                    turn.finished = Some(facts(fields));
                    turn.timing.finished_at = Some(env.at);
                }
            }
            _ => {}
        }
    }

    /// The turn an event belongs to: the newest with its turn id.
    fn turn(&mut self, env: &Envelope) -> Option<&mut TurnRun> {
        let id = env.turn_id.as_deref()?;
        self.turns
            .iter_mut()
            .rev()
            .find(|t| t.turn_id.as_deref() == Some(id))
    }

    /// The newest step numbered `step` of the event's turn, begun here when its start was not
    /// seen.
    fn step(&mut self, env: &Envelope, step: u32, pos: usize) -> Option<&mut StepRun> {
        let turn = self.turn(env)?;
        if turn.steps.last().is_none_or(|s| s.step != step) {
            turn.steps.push(StepRun::new(step, env, pos));
        }
        turn.steps.last_mut()
    }

    fn call(&mut self, env: &Envelope, step: u32, call_id: &str) -> Option<&mut CallRun> {
        let turn = self.turn(env)?;
        turn.steps
            .iter_mut()
            .rev()
            .filter(|s| s.step == step)
            .flat_map(|s| s.calls.iter_mut().rev())
            .find(|c| c.call_id == call_id)
    }
}
