//! A run folded for comparison: its turns, each turn's steps, each step's tool calls, and the
//! facts of each, with the event every fact came from.
//!
//! A [`Run`] is built from one session's events in order (a session and its fork prefix, one
//! turn, or a JSONL fixture's session). It keeps only what a diff compares, so building it is
//! one pass with no per-chunk allocation beyond the text the chunks carry.

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, StreamPart, Usage};
use serde_json::{json, Value};

use crate::pacing::TurnPacing;

/// One event's contribution to a run: which event it was, where it stands, and the compared
/// fields it carried (name → value).
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// The event's kind (`tool_decided`, `step_finished` …).
    pub event: &'static str,
    /// Its seq in the log it was read from.
    pub seq: u64,
    /// Its position among the run's events (0 = the first), which orders differences.
    pub pos: usize,
    pub fields: Vec<(&'static str, Value)>,
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

/// A usage record as compared fields, one per count.
fn usage_fields(usage: &Usage) -> [(&'static str, Value); 5] {
    [
        ("usage.input_tokens", json!(usage.input_tokens)),
        ("usage.output_tokens", json!(usage.output_tokens)),
        ("usage.total_tokens", json!(usage.total_tokens)),
        ("usage.reasoning_tokens", json!(usage.reasoning_tokens)),
        (
            "usage.cached_input_tokens",
            json!(usage.cached_input_tokens),
        ),
    ]
}

impl Fold {
    fn apply(&mut self, pos: usize, env: &Envelope) {
        self.fold(pos, env);
        if let Some(turn) = self.turn(env) {
            turn.pacing.apply(env);
        }
    }

    fn fold(&mut self, pos: usize, env: &Envelope) {
        let facts = |event: &'static str, fields: Vec<(&'static str, Value)>| Facts {
            event,
            seq: env.seq,
            pos,
            fields,
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
            Event::TurnStarted {
                request_id,
                entry,
                continuation,
                attempt,
                ..
            } => {
                let user_text = std::mem::take(&mut self.pending_user_text);
                self.turns.push(TurnRun {
                    turn_id: env.turn_id.clone(),
                    request_id: request_id.clone(),
                    started: facts(
                        "turn_started",
                        vec![
                            ("entry", json!(entry)),
                            ("continuation", json!(continuation)),
                            ("attempt", json!(attempt)),
                            ("user_text", json!(user_text)),
                        ],
                    ),
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
            Event::TurnConfigured { config } => {
                if let Some(turn) = self.turn(env) {
                    let fields = match serde_json::to_value(config) {
                        Ok(Value::Object(map)) => map
                            .into_iter()
                            .filter_map(|(k, v)| config_field(&k).map(|k| (k, v)))
                            .collect(),
                        _ => Vec::new(),
                    };
                    turn.configured = Some(facts("turn_configured", fields));
                }
            }
            Event::StepStarted { step } => {
                if let Some(turn) = self.turn(env) {
                    turn.steps.push(StepRun {
                        step: *step,
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
                    });
                }
            }
            Event::StepConfigured {
                step,
                model_id,
                active_tools,
                tool_choice,
                system,
                message_count,
                overrides,
                ..
            } => {
                if let Some(s) = self.step(env, *step, pos) {
                    s.configured = Some(facts(
                        "step_configured",
                        vec![
                            ("model_id", json!(model_id)),
                            ("active_tools", json!(active_tools)),
                            ("tool_choice", json!(tool_choice)),
                            ("system", json!(system)),
                            ("message_count", json!(message_count)),
                            ("overrides", json!(overrides)),
                        ],
                    ));
                }
            }
            Event::ModelRetried {
                step,
                attempt,
                error,
                ..
            } => {
                if let Some(s) = self.step(env, *step, pos) {
                    s.errors.push(facts(
                        "model_retried",
                        vec![("attempt", json!(attempt)), ("error", json!(error))],
                    ));
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
                        StreamPart::Error { message } => {
                            s.errors
                                .push(facts("chunk", vec![("error", json!(message))]));
                        }
                        _ => {}
                    }
                }
            }
            Event::ToolCallStarted {
                step,
                call_id,
                tool,
                input,
                client,
            } => {
                if let Some(s) = self.step(env, *step, pos) {
                    s.calls.push(CallRun {
                        call_id: call_id.clone(),
                        tool: tool.clone(),
                        started: facts(
                            "tool_call_started",
                            vec![
                                ("tool", json!(tool)),
                                ("input", input.clone()),
                                ("client", json!(client)),
                            ],
                        ),
                        decided: None,
                        finished: None,
                        duration_ms: None,
                    });
                }
            }
            Event::ToolDecided {
                step,
                call_id,
                action,
                effective_input,
                reason,
                output,
                ..
            } => {
                if let Some(call) = self.call(env, *step, call_id) {
                    call.decided = Some(facts(
                        "tool_decided",
                        vec![
                            ("action", json!(action)),
                            ("reason", json!(reason)),
                            ("effective_input", effective_input.clone()),
                            ("output", json!(output)),
                        ],
                    ));
                }
            }
            Event::ToolCallFinished {
                step,
                call_id,
                success,
                output,
                error,
                duration_ms,
                ..
            } => {
                if let Some(call) = self.call(env, *step, call_id) {
                    call.finished = Some(facts(
                        "tool_call_finished",
                        vec![
                            ("success", json!(success)),
                            ("output", json!(output)),
                            ("error", json!(error)),
                        ],
                    ));
                    call.duration_ms = Some(*duration_ms);
                }
            }
            Event::ClientToolResult {
                call_id,
                state,
                output,
                error,
                ..
            } => {
                let call = self
                    .turns
                    .iter_mut()
                    .rev()
                    .flat_map(|t| t.steps.iter_mut().rev())
                    .flat_map(|s| s.calls.iter_mut())
                    .find(|c| c.call_id == *call_id);
                if let Some(call) = call {
                    call.finished = Some(facts(
                        "client_tool_result",
                        vec![
                            ("state", json!(state)),
                            ("output", json!(output)),
                            ("error", json!(error)),
                        ],
                    ));
                }
            }
            Event::StepFinished { record } => {
                let at = env.at;
                if let Some(s) = self.step(env, record.step, pos) {
                    let mut fields = vec![("finish_reason", json!(record.finish_reason))];
                    fields.extend(usage_fields(&record.usage));
                    s.finished = Some(facts("step_finished", fields));
                    s.timing.finished_at = Some(at);
                }
            }
            Event::HookFailed {
                hook,
                source,
                error,
                ..
            } => {
                if let Some(turn) = self.turn(env) {
                    turn.hook_failures.push(facts(
                        "hook_failed",
                        vec![
                            ("hook", json!(hook)),
                            ("source", json!(source)),
                            ("error", json!(error)),
                        ],
                    ));
                }
            }
            Event::TurnFailed { stage, error, .. } => {
                if let Some(turn) = self.turn(env) {
                    turn.failed = Some(facts(
                        "turn_failed",
                        vec![("stage", json!(stage)), ("error", json!(error))],
                    ));
                }
            }
            Event::TurnFinished {
                status,
                error,
                steps,
                usage,
                ..
            } => {
                let at = env.at;
                if let Some(turn) = self.turn(env) {
                    let mut fields = vec![
                        ("status", json!(status)),
                        ("error", json!(error)),
                        ("steps", json!(steps)),
                    ];
                    fields.extend(usage_fields(usage));
                    turn.finished = Some(facts("turn_finished", fields));
                    turn.timing.finished_at = Some(at);
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
        let (at, seq) = (env.at, env.seq);
        let turn = self.turn(env)?;
        if turn.steps.last().is_none_or(|s| s.step != step) {
            turn.steps.push(StepRun {
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
                    started_at: Some(at),
                    ..Timing::default()
                },
                pos,
                seq,
            });
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

/// The TurnConfig fields a diff compares, by their JSON name (`message_count` follows from
/// the history, which the turns before already compare).
fn config_field(name: &str) -> Option<&'static str> {
    const FIELDS: &[&str] = &[
        "provider",
        "model_id",
        "system",
        "tool_names",
        "active_tools",
        "tool_choice",
        "max_steps",
        "stop_when",
        "send_reasoning",
        "settings",
        "max_retries",
        "timeout_ms",
        "stall_timeout_ms",
        "transforms",
        "output_schema",
        "overrides",
    ];
    FIELDS.iter().copied().find(|f| *f == name)
}
