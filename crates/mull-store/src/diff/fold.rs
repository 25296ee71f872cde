//! A run folded for comparison: its turns, each turn's steps, each step's tool calls, and the
//! facts of each, with the event every fact came from.
//!
//! A [`Run`] is built from one session's events in order (a session and its fork prefix, one
//! turn, or a JSONL fixture's session) in one pass: the session's facts place each event (the
//! turn, step or call it changed, the text or reasoning a chunk added), and the run keeps only
//! what a diff compares, each event's fields read through serde.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event};
use serde_json::Value;

use super::fields;

use crate::facts::{
    CallOutcome, CallStage, FactChange, Facts as SessionFacts, StepStage, TurnStage,
};
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

/// Folds a run's events: the session's facts place each one (its turn, step or tool call) and
/// tell what a stream part showed; the fold keeps what a diff compares.
#[derive(Default)]
struct Fold {
    turns: Vec<TurnRun>,
    first_user_text: Option<String>,
    /// User text saved since the last turn started.
    pending_user_text: String,
    facts: SessionFacts,
    /// Facts turn index → its run turn, for the turns started here.
    turn_runs: Vec<Option<usize>>,
    /// Facts call index → (turn, step, call) of its run call, for the calls placed.
    call_runs: Vec<Option<(usize, usize, usize)>>,
    /// How far each facts step's stream was read, by (turn, step) index.
    seen: HashMap<(usize, usize), Seen>,
}

/// A facts step's stream as far as the run has read it.
#[derive(Default, Clone, Copy)]
struct Seen {
    text: usize,
    text_deltas: u64,
    reasoning: usize,
    reasoning_deltas: u64,
    errors: u64,
}

impl Fold {
    fn apply(&mut self, pos: usize, env: &Envelope) {
        self.user_text(env);
        let change = self.facts.push(env);
        if let Some(change) = change {
            self.place(pos, env, change);
        }
        if let Some(turn) = self.turn_index(env) {
            self.turns[turn].pacing.follow(env, &self.facts, change);
        }
    }

    /// User messages are no fact of a turn: they are kept for the next turn's input.
    fn user_text(&mut self, env: &Envelope) {
        let (Event::UserMessagesSaved { messages, .. }
        | Event::SubmissionAccepted { messages, .. }) = &env.event
        else {
            return;
        };
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

    /// Places the event where the fact it changed stands in the run.
    fn place(&mut self, pos: usize, env: &Envelope, change: FactChange) {
        let record = |fields: Vec<(String, Value)>| Facts {
            event: env.kind().to_owned(),
            seq: env.seq,
            pos,
            fields,
        };
        let compared = || {
            fields::compared(
                env.kind(),
                serde_json::to_value(&env.event).unwrap_or(Value::Null),
            )
        };
        match change {
            FactChange::Turn { turn, stage } => {
                if stage == TurnStage::Started {
                    return self.turn_started(turn, record(compared()));
                }
                let end = self.facts.turns()[turn].end.as_ref().map(|end| end.at.at);
                let Some(run) = self.turn_run(turn, env) else {
                    return;
                };
                match stage {
                    TurnStage::Configured => run.configured = Some(record(compared())),
                    TurnStage::HookFailed => run.hook_failures.push(record(compared())),
                    TurnStage::Failed => run.failed = Some(record(compared())),
                    TurnStage::Finished => {
                        run.finished = Some(record(compared()));
                        run.timing.finished_at = end;
                    }
                    _ => {}
                }
            }
            FactChange::Step { turn, step, stage } => {
                let fact = &self.facts.turns()[turn].steps[step];
                let (number, end) = (fact.step, fact.end.as_ref().map(|end| end.at.at));
                if stage == StepStage::Started {
                    if let Some(run) = self.turn_run(turn, env) {
                        run.steps.push(StepRun::new(number, env, pos));
                    }
                    return;
                }
                let Some(s) = self.step_run(turn, number, env, pos) else {
                    return;
                };
                match stage {
                    StepStage::Configured => s.configured = Some(record(compared())),
                    StepStage::Retried => s.errors.push(record(compared())),
                    StepStage::Finished => {
                        s.finished = Some(record(compared()));
                        s.timing.finished_at = end;
                    }
                    _ => {}
                }
            }
            FactChange::Chunk { turn, step, .. } => self.chunk(turn, step, env, pos, record),
            FactChange::Call { call, stage } => {
                // Approvals are compared as the turns that ask and act on them.
                if matches!(
                    stage,
                    CallStage::Started
                        | CallStage::Decided
                        | CallStage::Finished
                        | CallStage::ClientAnswered
                ) {
                    self.call_changed(call, stage, env, record(compared()));
                }
            }
        }
    }

    /// A turn started: its run begins, with the user text saved since the last one.
    fn turn_started(&mut self, turn: usize, mut started: Facts) {
        let user_text = std::mem::take(&mut self.pending_user_text);
        started
            .fields
            .push(("user_text".to_owned(), Value::String(user_text)));
        let fact = &self.facts.turns()[turn];
        let Some(start) = &fact.start else {
            return;
        };
        self.turns.push(TurnRun {
            turn_id: fact.turn_id.clone(),
            request_id: start.request_id.clone(),
            started,
            configured: None,
            steps: Vec::new(),
            hook_failures: Vec::new(),
            failed: None,
            finished: None,
            timing: Timing {
                started_at: Some(start.at.at),
                ..Timing::default()
            },
            pacing: TurnPacing::new(),
        });
        if self.turn_runs.len() <= turn {
            self.turn_runs.resize(turn + 1, None);
        }
        self.turn_runs[turn] = Some(self.turns.len() - 1);
    }

    /// A stream part of a step was shown: the text or reasoning it added, read from the step's
    /// facts, or the in-band error it reported (compared as serde writes the part).
    fn chunk(
        &mut self,
        turn: usize,
        step: usize,
        env: &Envelope,
        pos: usize,
        record: impl Fn(Vec<(String, Value)>) -> Facts,
    ) {
        let fact = &self.facts.turns()[turn].steps[step];
        let seen = self.seen.entry((turn, step)).or_default();
        let before = *seen;
        *seen = Seen {
            text: fact.text.len(),
            text_deltas: fact.text_deltas,
            reasoning: fact.reasoning.len(),
            reasoning_deltas: fact.reasoning_deltas,
            errors: fact.errors,
        };
        let number = fact.step;
        let Fold {
            facts,
            turns,
            turn_runs,
            ..
        } = self;
        let Some(s) = step_in(turns, turn_runs, turn, number, env, pos) else {
            return;
        };
        let fact = &facts.turns()[turn].steps[step];
        if fact.text_deltas > before.text_deltas {
            s.text.push_str(&fact.text[before.text..]);
            s.text_chunks.push((s.text.len(), env.seq, pos));
        } else if fact.reasoning_deltas > before.reasoning_deltas {
            s.reasoning.push_str(&fact.reasoning[before.reasoning..]);
            s.reasoning_chunks.push((s.reasoning.len(), env.seq, pos));
        } else if fact.errors > before.errors {
            let part = serde_json::to_value(&env.event)
                .ok()
                .and_then(|mut event| event.get_mut("part").map(Value::take))
                .unwrap_or(Value::Null);
            s.errors.push(record(fields::compared(env.kind(), part)));
        }
    }

    /// A tool call reached `stage`: its start opens its run call in the step that made it; its
    /// decision and outcome go onto it when filed under the turn that made it (an approved
    /// call decided by a later turn is that turn's input, not its call).
    fn call_changed(&mut self, call: usize, stage: CallStage, env: &Envelope, fields: Facts) {
        let fact = &self.facts.calls()[call];
        if stage == CallStage::Started {
            let (Some(number), Some(turn)) = (fact.step, self.turn_index(env)) else {
                return;
            };
            let (call_id, tool, pos) = (fact.call_id.clone(), fact.tool.clone(), fields.pos);
            let run = &mut self.turns[turn];
            let step = run.step_numbered(number, env, pos);
            step.calls.push(CallRun {
                call_id,
                tool,
                started: fields,
                decided: None,
                finished: None,
                duration_ms: None,
            });
            let index = step.calls.len() - 1;
            let at = (turn, run.steps.len() - 1, index);
            if self.call_runs.len() <= call {
                self.call_runs.resize(call + 1, None);
            }
            self.call_runs[call] = Some(at);
            return;
        }
        let duration_ms = fact.outcome.as_ref().and_then(CallOutcome::duration_ms);
        let Some(&Some((turn, step, index))) = self.call_runs.get(call) else {
            return;
        };
        // A client's answer is filed under no turn of its own.
        let filed_with_call =
            stage == CallStage::ClientAnswered || self.turn_index(env) == Some(turn);
        let Some(run) = self
            .turns
            .get_mut(turn)
            .and_then(|t| t.steps.get_mut(step))
            .and_then(|s| s.calls.get_mut(index))
        else {
            return;
        };
        match stage {
            _ if !filed_with_call => {}
            CallStage::Decided => run.decided = Some(fields),
            CallStage::Finished => {
                run.finished = Some(fields);
                run.duration_ms = duration_ms;
            }
            CallStage::ClientAnswered => run.finished = Some(fields),
            _ => {}
        }
    }

    /// The run turn the event is filed under: the newest with its turn id.
    fn turn_index(&self, env: &Envelope) -> Option<usize> {
        let id = env.turn_id.as_deref()?;
        self.turns
            .iter()
            .rposition(|t| t.turn_id.as_deref() == Some(id))
    }

    /// The run of the facts turn at `turn`, for an event filed under a turn.
    fn turn_run(&mut self, turn: usize, env: &Envelope) -> Option<&mut TurnRun> {
        env.turn_id.as_ref()?;
        let index = (*self.turn_runs.get(turn)?)?;
        self.turns.get_mut(index)
    }

    fn step_run(
        &mut self,
        turn: usize,
        step: u32,
        env: &Envelope,
        pos: usize,
    ) -> Option<&mut StepRun> {
        step_in(&mut self.turns, &self.turn_runs, turn, step, env, pos)
    }
}

/// The newest run step numbered `step` of the facts turn at `turn` (see
/// [`TurnRun::step_numbered`]), for an event filed under a turn.
fn step_in<'a>(
    turns: &'a mut [TurnRun],
    turn_runs: &[Option<usize>],
    turn: usize,
    step: u32,
    env: &Envelope,
    pos: usize,
) -> Option<&'a mut StepRun> {
    env.turn_id.as_ref()?;
    let run = turns.get_mut((*turn_runs.get(turn)?)?)?;
    Some(run.step_numbered(step, env, pos))
}

impl TurnRun {
    /// Its newest step numbered `step`, begun by `env` when the last step has another number
    /// (its start was not seen, or the log went back to it).
    fn step_numbered(&mut self, step: u32, env: &Envelope, pos: usize) -> &mut StepRun {
        if self.steps.last().is_none_or(|s| s.step != step) {
            self.steps.push(StepRun::new(step, env, pos));
        }
        let last = self.steps.len() - 1;
        &mut self.steps[last]
    }
}
