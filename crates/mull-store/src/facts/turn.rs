//! A turn attempt's facts and its steps': when each began, was configured, streamed and ended,
//! with the usage and the text the model produced.

use mull_core::{
    EntryPath, ErrorStage, Event, EventRef, FinishReason, StreamPart, TurnStatus, Usage,
};
use serde::Serialize;
use serde_json::Value;

use super::change::{FactChange, StepStage, TurnStage};
use super::{Facts, Stamp};

/// One turn attempt (overflow recovery runs a request again under a new turn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnFact {
    pub turn_id: Option<String>,
    /// Its `turn_started`; `None` when the envelopes pushed began inside the turn (a tail
    /// opened mid-turn): an event filed under a turn never started begins its facts.
    pub start: Option<TurnStart>,
    /// Its `turn_configured`, with the provider and model it runs with.
    pub configured: Option<Stamp>,
    pub provider: Option<String>,
    pub model_id: Option<String>,
    /// Its steps, in the order they began.
    pub steps: Vec<StepFact>,
    /// The finished steps' usage summed; the `turn_finished` total once the turn ended.
    pub usage: Usage,
    /// What the sub-agents its calls ran used (`subagent_finished`).
    pub subagent_usage: Usage,
    /// Hooks that failed inside it.
    pub hook_failures: u32,
    /// Its `turn_failed`, when it failed.
    pub failure: Option<FailureFact>,
    /// Its `turn_finished`.
    pub end: Option<TurnEnd>,
}

/// A turn's `turn_started`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnStart {
    pub at: Stamp,
    pub request_id: String,
    /// The assistant message the turn writes.
    pub message_id: String,
    pub entry: EntryPath,
    pub continuation: bool,
    /// 0 for the first attempt.
    pub attempt: u32,
}

/// A turn's `turn_failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureFact {
    pub at: Stamp,
    pub stage: ErrorStage,
    pub error: String,
    /// The failure came from a model call.
    pub model_error: bool,
}

/// A turn's `turn_finished`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnEnd {
    pub at: Stamp,
    pub status: TurnStatus,
    pub error: Option<String>,
    /// The steps the turn counted.
    pub steps: u32,
    /// Its `on_chat_response` is owed until a `chat_response_delivered` (see
    /// `Event::TurnFinished`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub response_owed: bool,
}

/// One step: one model call (sent again after a retryable failure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepFact {
    pub step: u32,
    /// Its `step_started` (none when the log skipped it).
    pub started: Option<Stamp>,
    /// Its `step_configured`, with the model the call uses.
    pub configured: Option<Stamp>,
    pub model_id: Option<String>,
    /// Model calls that failed in a retryable way and were sent again.
    pub retries: u32,
    /// Its stream parts as shown: how many, the first and the last.
    pub chunks: u64,
    pub first_chunk: Option<Stamp>,
    pub last_chunk: Option<Stamp>,
    /// How many of them were text deltas, reasoning deltas and in-band errors: a reader
    /// following the stream part by part tells from these what the last one showed.
    pub text_deltas: u64,
    pub reasoning_deltas: u64,
    pub errors: u64,
    /// The text and reasoning it streamed, blocks joined.
    pub text: String,
    pub reasoning: String,
    /// Its `step_finished`.
    pub end: Option<StepEnd>,
}

/// A step's `step_finished`: what the provider reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepEnd {
    pub at: Stamp,
    /// The model that answered.
    pub model_id: String,
    pub usage: Usage,
    pub finish_reason: FinishReason,
    pub provider_metadata: Option<Value>,
}

impl TurnFact {
    fn new(turn_id: Option<&str>, start: Option<TurnStart>) -> TurnFact {
        TurnFact {
            turn_id: turn_id.map(str::to_owned),
            start,
            configured: None,
            provider: None,
            model_id: None,
            steps: Vec::new(),
            usage: Usage::default(),
            subagent_usage: Usage::default(),
            hook_failures: 0,
            failure: None,
            end: None,
        }
    }

    /// The request the turn runs, when its start was pushed.
    pub fn request_id(&self) -> Option<&str> {
        self.start.as_ref().map(|s| s.request_id.as_str())
    }

    /// The turn's step `step` (the latest with that number).
    pub fn step(&self, step: u32) -> Option<&StepFact> {
        self.steps.iter().rev().find(|s| s.step == step)
    }

    /// Its status: running until its `turn_finished`.
    pub fn status(&self) -> TurnStatus {
        self.end
            .as_ref()
            .map_or(TurnStatus::Running, |end| end.status)
    }

    /// The step whose model call was configured and never finished (cut short by a cancel,
    /// a crash or a stream error): its model.
    pub fn unfinished_call(&self) -> Option<&str> {
        self.steps
            .iter()
            .rev()
            .find(|s| s.configured.is_some())
            .filter(|s| s.end.is_none())
            .and_then(|s| s.model_id.as_deref())
    }
}

impl StepFact {
    fn new(step: u32) -> StepFact {
        StepFact {
            step,
            started: None,
            configured: None,
            model_id: None,
            retries: 0,
            chunks: 0,
            first_chunk: None,
            last_chunk: None,
            text_deltas: 0,
            reasoning_deltas: 0,
            errors: 0,
            text: String::new(),
            reasoning: String::new(),
            end: None,
        }
    }
}

impl Facts {
    /// Folds a turn or step event in; `None` for any other event, or one outside any turn.
    pub(super) fn push_turn(&mut self, e: &EventRef<'_>) -> Option<FactChange> {
        let at = Stamp::of(e);
        if let Event::TurnStarted {
            request_id,
            message_id,
            entry,
            continuation,
            attempt,
            ..
        } = e.event
        {
            let start = TurnStart {
                at,
                request_id: request_id.clone(),
                message_id: message_id.clone(),
                entry: *entry,
                continuation: *continuation,
                attempt: *attempt,
            };
            self.turns.push(TurnFact::new(e.turn_id, Some(start)));
            let turn = self.turns.len() - 1;
            return Some(turn_change(turn, TurnStage::Started));
        }
        if !Self::turn_event(e.event) {
            return None;
        }
        let turn = self.turn_index(e)?;
        let fact = &mut self.turns[turn];
        let stage = match e.event {
            Event::TurnConfigured { config } => {
                fact.configured = Some(at);
                fact.provider = Some(config.provider.clone());
                fact.model_id = Some(config.model_id.clone());
                TurnStage::Configured
            }
            Event::HookFailed { .. } => {
                fact.hook_failures += 1;
                TurnStage::HookFailed
            }
            Event::SubagentFinished { usage, .. } => {
                fact.subagent_usage.add(usage);
                TurnStage::SubagentFinished
            }
            Event::TurnFailed {
                stage,
                error,
                model_error,
                ..
            } => {
                fact.failure = Some(FailureFact {
                    at,
                    stage: *stage,
                    error: error.clone(),
                    model_error: model_error.is_some(),
                });
                TurnStage::Failed
            }
            Event::TurnFinished {
                status,
                error,
                steps,
                usage,
                response_owed,
                ..
            } => {
                fact.usage = usage.clone();
                fact.end = Some(TurnEnd {
                    at,
                    status: *status,
                    error: error.clone(),
                    steps: *steps,
                    response_owed: *response_owed,
                });
                TurnStage::Finished
            }
            _ => return self.push_step(turn, e),
        };
        Some(turn_change(turn, stage))
    }

    fn push_step(&mut self, turn: usize, e: &EventRef<'_>) -> Option<FactChange> {
        let at = Stamp::of(e);
        let step_number = match e.event {
            Event::StepStarted { step }
            | Event::StepConfigured { step, .. }
            | Event::ModelRetried { step, .. }
            | Event::Chunk { step, .. } => *step,
            Event::StepFinished { record } => record.step,
            _ => return None,
        };
        let fact = &mut self.turns[turn];
        let step = match fact.steps.iter().rposition(|s| s.step == step_number) {
            Some(index) if !matches!(e.event, Event::StepStarted { .. }) => index,
            _ => {
                fact.steps.push(StepFact::new(step_number));
                fact.steps.len() - 1
            }
        };
        let fact_step = &mut fact.steps[step];
        let stage = match e.event {
            Event::StepStarted { .. } => {
                fact_step.started = Some(at);
                StepStage::Started
            }
            Event::StepConfigured { model_id, .. } => {
                fact_step.configured = Some(at);
                fact_step.model_id = Some(model_id.clone());
                StepStage::Configured
            }
            Event::ModelRetried { .. } => {
                fact_step.retries += 1;
                StepStage::Retried
            }
            Event::StepFinished { record } => {
                fact.usage.add(&record.usage);
                fact_step.end = Some(StepEnd {
                    at,
                    model_id: record.model_id.clone(),
                    usage: record.usage.clone(),
                    finish_reason: record.finish_reason,
                    provider_metadata: record.provider_metadata.clone(),
                });
                StepStage::Finished
            }
            Event::Chunk { part, .. } => {
                fact_step.chunks += 1;
                fact_step.first_chunk.get_or_insert(at);
                fact_step.last_chunk = Some(at);
                let preliminary = match part {
                    StreamPart::TextDelta { text, .. } => {
                        fact_step.text_deltas += 1;
                        fact_step.text.push_str(text);
                        None
                    }
                    StreamPart::ReasoningDelta { text, .. } => {
                        fact_step.reasoning_deltas += 1;
                        fact_step.reasoning.push_str(text);
                        None
                    }
                    StreamPart::Error { .. } => {
                        fact_step.errors += 1;
                        None
                    }
                    StreamPart::ToolResult {
                        call_id,
                        output,
                        preliminary: true,
                        ..
                    } => self.push_preliminary(at, call_id, output),
                    _ => None,
                };
                return Some(FactChange::Chunk {
                    turn,
                    step,
                    preliminary,
                });
            }
            _ => return None,
        };
        Some(FactChange::Step { turn, step, stage })
    }

    /// The turn an event belongs to: the latest with its turn id (begun here when it was
    /// never started), else the latest.
    fn turn_index(&mut self, e: &EventRef<'_>) -> Option<usize> {
        let Some(id) = e.turn_id else {
            return self.turns.len().checked_sub(1);
        };
        match self
            .turns
            .iter()
            .rposition(|t| t.turn_id.as_deref() == Some(id))
        {
            Some(index) => Some(index),
            None => {
                self.turns.push(TurnFact::new(Some(id), None));
                Some(self.turns.len() - 1)
            }
        }
    }
}

impl Facts {
    /// Whether the event tells something about a turn or one of its steps.
    fn turn_event(event: &Event) -> bool {
        matches!(
            event,
            Event::TurnConfigured { .. }
                | Event::HookFailed { .. }
                | Event::SubagentFinished { .. }
                | Event::TurnFailed { .. }
                | Event::TurnFinished { .. }
                | Event::StepStarted { .. }
                | Event::StepConfigured { .. }
                | Event::ModelRetried { .. }
                | Event::Chunk { .. }
                | Event::StepFinished { .. }
        )
    }
}

fn turn_change(turn: usize, stage: TurnStage) -> FactChange {
    FactChange::Turn { turn, stage }
}
