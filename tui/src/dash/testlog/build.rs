//! Building a fixture log: the epoch, a builder that numbers events, and one-line makers for the
//! events a turn is made of.

use chrono::{DateTime, Duration, TimeZone, Utc};
use mull_core::{
    DecisionAction, EntryPath, Envelope, Event, FinishReason, StepReport, StreamPart, Usage,
    EVENT_VERSION,
};
use serde_json::json;

/// The fixture epoch every test timestamp counts from.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 1, 9, 30, 0)
        .single()
        .unwrap_or_default()
}

/// Appends envelopes with consecutive seqs and fixed offsets from [`t0`].
pub struct LogBuilder {
    pub events: Vec<Envelope>,
}

impl LogBuilder {
    pub fn new() -> Self {
        Self { events: Vec::new() }
    }

    pub fn push(&mut self, session: &str, turn: Option<&str>, ms: i64, event: Event) {
        let seq = self.events.len() as u64 + 1;
        self.events.push(Envelope {
            seq,
            session_id: session.to_owned(),
            turn_id: turn.map(str::to_owned),
            at: t0() + Duration::milliseconds(ms),
            v: EVENT_VERSION,
            event,
        });
    }
}

pub(super) fn chunk(step: u32, part: StreamPart) -> Event {
    Event::Chunk {
        step,
        part,
        original: None,
    }
}

pub(super) fn usage(input: u64, output: u64, cached: Option<u64>) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        total_tokens: Some(input + output),
        reasoning_tokens: None,
        cached_input_tokens: cached,
    }
}

pub(super) fn step_finished(step: u32, reason: FinishReason, usage: Usage) -> Event {
    Event::StepFinished {
        record: Box::new(StepReport {
            step,
            model_id: "scripted-1".into(),
            finish_reason: reason,
            usage,
            ..StepReport::default()
        }),
    }
}

pub(super) fn turn_started(request: &str, message: &str) -> Event {
    Event::TurnStarted {
        request_id: request.into(),
        message_id: message.into(),
        entry: EntryPath::SaveMessages,
        continuation: false,
        attempt: 0,
        body: json!({}),
    }
}

pub(super) fn text(
    b: &mut LogBuilder,
    s: &str,
    t: &str,
    step: u32,
    ms: i64,
    id: &str,
    deltas: &[(i64, &str)],
) {
    b.push(
        s,
        Some(t),
        ms,
        chunk(step, StreamPart::TextStart { id: id.into() }),
    );
    let mut last = ms;
    for (at, delta) in deltas {
        last = *at;
        b.push(
            s,
            Some(t),
            *at,
            chunk(
                step,
                StreamPart::TextDelta {
                    id: id.into(),
                    text: (*delta).into(),
                },
            ),
        );
    }
    b.push(
        s,
        Some(t),
        last + 10,
        chunk(step, StreamPart::TextEnd { id: id.into() }),
    );
}

pub(super) fn tool_call(
    b: &mut LogBuilder,
    (s, t): (&str, &str),
    ms: i64,
    (call, tool, input): (&str, &str, serde_json::Value),
    action: DecisionAction,
    outcome: Result<serde_json::Value, &str>,
    duration_ms: u64,
) {
    b.push(
        s,
        Some(t),
        ms,
        chunk(
            0,
            StreamPart::ToolCall {
                call_id: call.into(),
                tool_name: tool.into(),
                input: input.to_string(),
            },
        ),
    );
    b.push(
        s,
        Some(t),
        ms + 1,
        Event::ToolCallStarted {
            step: 0,
            call_id: call.into(),
            tool: tool.into(),
            input: input.clone(),
            client: false,
            dynamic: false,
        },
    );
    let reason = (action == DecisionAction::Block).then(|| "destructive tools are off".to_owned());
    b.push(
        s,
        Some(t),
        ms + 2,
        Event::ToolDecided {
            step: 0,
            call_id: call.into(),
            tool: tool.into(),
            action,
            model_input: input.clone(),
            effective_input: input,
            reason,
            output: None,
        },
    );
    let (success, output, error) = match outcome {
        Ok(v) => (true, Some(v), None),
        Err(e) => (false, None, Some(e.to_owned())),
    };
    let part = match (&output, &error) {
        (Some(output), _) => StreamPart::ToolResult {
            call_id: call.into(),
            tool_name: tool.into(),
            output: output.clone(),
            preliminary: false,
        },
        (None, error) => StreamPart::ToolError {
            call_id: call.into(),
            tool_name: tool.into(),
            error: error.clone().unwrap_or_default(),
        },
    };
    b.push(
        s,
        Some(t),
        ms + 2 + duration_ms as i64,
        Event::ToolCallFinished {
            step: 0,
            call_id: call.into(),
            tool: tool.into(),
            success,
            output,
            error,
            duration_ms,
        },
    );
    b.push(s, Some(t), ms + 3 + duration_ms as i64, chunk(0, part));
}
