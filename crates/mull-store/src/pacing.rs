//! A turn's pacing: when its first chunk came, the silences between chunks, where tools ran
//! and how many tokens each step produced — what a stall diagnosis needs, folded from the
//! turn's events one at a time (a page read from the log, then the tail).

use chrono::{DateTime, Utc};
use mull_core::Envelope;
use serde::Serialize;

use crate::facts::{CallOutcome, CallStage, FactChange, Facts, StepStage};

/// A silence between two chunks at least this long is a stall.
pub const STALL_MS: u64 = 1000;

/// A chunk and the silence before it, in milliseconds from the turn's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChunkGap {
    pub at_ms: u64,
    /// Since the previous chunk (since the step began, for a step's first chunk).
    pub gap_ms: u64,
    pub step: u32,
}

/// A stretch of time, in milliseconds from the turn's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Span {
    pub start_ms: u64,
    pub end_ms: u64,
    /// The tool (for a tool span) or the step number (for a model span).
    pub label: String,
}

impl Span {
    pub fn duration_ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.start_ms)
    }
}

/// One finished step's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepTokens {
    pub step: u32,
    pub input: u64,
    pub output: u64,
}

/// The pacing of one turn, as far as its events have been applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TurnPacing {
    /// The first event applied: the turn's clock zero.
    pub started_at: Option<DateTime<Utc>>,
    /// From the turn's start to its first chunk.
    pub first_chunk_ms: Option<u64>,
    /// Every chunk with the silence before it.
    pub chunks: Vec<ChunkGap>,
    /// Model calls: from `step_started` to the step's last chunk.
    pub model: Vec<Span>,
    /// Tool executions that ran (a blocked or substituted call takes no time).
    pub tools: Vec<Span>,
    pub steps: Vec<StepTokens>,
    /// The last event applied, its time from the start.
    pub last_ms: u64,
    last_seq: u64,
    last_chunk_ms: Option<u64>,
    /// The facts the pacing is read from, when it folds the events itself
    /// ([`TurnPacing::apply`]).
    #[serde(skip)]
    facts: Facts,
}

impl TurnPacing {
    /// Nothing applied yet.
    pub fn new() -> TurnPacing {
        TurnPacing::default()
    }

    fn offset(&self, at: DateTime<Utc>) -> u64 {
        self.started_at
            .map(|t0| (at - t0).num_milliseconds().max(0) as u64)
            .unwrap_or(0)
    }

    /// Folds one event of the turn in; events at or before the last applied seq are ignored.
    pub fn apply(&mut self, env: &Envelope) {
        let Some(at_ms) = self.admit(env) else {
            return;
        };
        let mut facts = std::mem::take(&mut self.facts);
        if let Some(change) = facts.push(env) {
            self.changed(&facts, change, at_ms);
        }
        self.facts = facts;
    }

    /// Follows one event of the turn that `facts` (a fold kept by the caller, of the session or
    /// the turn) has just taken in and answered `change` for, so the turn's events are not
    /// folded twice; events at or before the last applied seq are ignored.
    pub(crate) fn follow(&mut self, env: &Envelope, facts: &Facts, change: Option<FactChange>) {
        let Some(at_ms) = self.admit(env) else {
            return;
        };
        if let Some(change) = change {
            self.changed(facts, change, at_ms);
        }
    }

    /// The event's time from the turn's start, unless it was applied already.
    fn admit(&mut self, env: &Envelope) -> Option<u64> {
        if self.last_seq >= env.seq {
            return None;
        }
        self.last_seq = env.seq;
        self.started_at.get_or_insert(env.at);
        let at_ms = self.offset(env.at);
        self.last_ms = self.last_ms.max(at_ms);
        Some(at_ms)
    }

    /// What the fact `change` names, in `facts`, changes in the pacing.
    fn changed(&mut self, facts: &Facts, change: FactChange, at_ms: u64) {
        match change {
            FactChange::Step {
                turn,
                step,
                stage: StepStage::Started,
            } => {
                let step = facts.turns()[turn].steps[step].step;
                self.last_chunk_ms = Some(at_ms);
                self.model.push(Span {
                    start_ms: at_ms,
                    end_ms: at_ms,
                    label: step.to_string(),
                });
            }
            FactChange::Chunk { turn, step, .. } => {
                let step = facts.turns()[turn].steps[step].step;
                let since = self.last_chunk_ms.unwrap_or(0);
                self.chunks.push(ChunkGap {
                    at_ms,
                    gap_ms: at_ms.saturating_sub(since),
                    step,
                });
                self.first_chunk_ms.get_or_insert(at_ms);
                self.last_chunk_ms = Some(at_ms);
                if let Some(span) = self.model.last_mut() {
                    span.end_ms = at_ms;
                }
            }
            FactChange::Call {
                call,
                stage: CallStage::Finished,
            } => {
                let call = &facts.calls()[call];
                let duration_ms = call.outcome.as_ref().and_then(CallOutcome::duration_ms);
                if let Some(duration_ms) = duration_ms.filter(|ms| *ms > 0) {
                    self.tools.push(Span {
                        start_ms: at_ms.saturating_sub(duration_ms),
                        end_ms: at_ms,
                        label: call.tool.clone(),
                    });
                    // The model's next chunk waits on the tool: its silence starts after it.
                    self.last_chunk_ms = Some(at_ms);
                }
            }
            FactChange::Step {
                turn,
                step,
                stage: StepStage::Finished,
            } => {
                let step = &facts.turns()[turn].steps[step];
                let usage = step.end.as_ref().map(|end| &end.usage);
                self.steps.push(StepTokens {
                    step: step.step,
                    input: usage.and_then(|u| u.input_tokens).unwrap_or(0),
                    output: usage.and_then(|u| u.output_tokens).unwrap_or(0),
                });
            }
            _ => {}
        }
    }

    /// The chunks whose silence reached [`STALL_MS`].
    pub fn stalls(&self) -> impl Iterator<Item = &ChunkGap> {
        self.chunks.iter().filter(|c| c.gap_ms >= STALL_MS)
    }

    /// The longest silence before a chunk.
    pub fn longest_gap(&self) -> Option<&ChunkGap> {
        self.chunks.iter().max_by_key(|c| c.gap_ms)
    }

    /// Time spent waiting on the model: its steps' spans less the tool time inside them.
    pub fn model_ms(&self) -> u64 {
        let steps: u64 = self.model.iter().map(Span::duration_ms).sum();
        steps.saturating_sub(self.tool_ms())
    }

    /// Time tools ran, with overlapping calls counted once.
    pub fn tool_ms(&self) -> u64 {
        let mut spans: Vec<(u64, u64)> =
            self.tools.iter().map(|s| (s.start_ms, s.end_ms)).collect();
        spans.sort_unstable();
        let mut total = 0;
        let mut reach = 0;
        for (start, end) in spans {
            let start = start.max(reach);
            if end > start {
                total += end - start;
                reach = end;
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use mull_core::{Event, StreamPart};

    fn env(seq: u64, ms: i64, event: Event) -> Envelope {
        Envelope {
            seq,
            session_id: "s".into(),
            turn_id: Some("t".into()),
            at: Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap()
                + chrono::Duration::milliseconds(ms),
            v: 1,
            event,
        }
    }

    fn chunk(seq: u64, ms: i64) -> Envelope {
        env(
            seq,
            ms,
            Event::Chunk {
                step: 0,
                part: StreamPart::TextDelta {
                    id: "x".into(),
                    text: "a".into(),
                },
                original: None,
            },
        )
    }

    fn tool(seq: u64, ms: i64, duration_ms: u64) -> Envelope {
        env(
            seq,
            ms,
            Event::ToolCallFinished {
                step: 0,
                call_id: format!("c{seq}"),
                tool: "search".into(),
                success: true,
                output: None,
                error: None,
                duration_ms,
            },
        )
    }

    #[test]
    fn gaps_stalls_model_and_tool_time() {
        let mut pacing = TurnPacing::new();
        let events = [
            env(1, 0, Event::StepStarted { step: 0 }),
            chunk(2, 400),
            chunk(3, 450),
            chunk(4, 2050),
            tool(5, 2600, 500),
            tool(6, 2700, 300),
            chunk(7, 2800),
        ];
        for e in events.iter().chain(events.iter()) {
            pacing.apply(e);
        }
        assert_eq!(pacing.first_chunk_ms, Some(400));
        let gaps: Vec<u64> = pacing.chunks.iter().map(|c| c.gap_ms).collect();
        assert_eq!(
            gaps,
            vec![400, 50, 1600, 100],
            "after a tool, silence counts from its end"
        );
        assert_eq!(
            pacing.stalls().map(|c| c.at_ms).collect::<Vec<_>>(),
            vec![2050]
        );
        assert_eq!(pacing.longest_gap().map(|c| c.gap_ms), Some(1600));
        assert_eq!(pacing.tool_ms(), 600, "overlapping calls count once");
        assert_eq!(pacing.model_ms(), 2200);
        assert_eq!(pacing.last_ms, 2800);
    }
}
