//! The clock and ids a replay serves from the recording.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use chrono::{DateTime, Duration as TimeDelta, Utc};
use mull_core::{Clock, Envelope, Event, IdSource};

use super::lock;

/// One reading the engine will take of the clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reading {
    at: DateTime<Utc>,
    /// Whether the reading stamps an appended event (else it times a tool).
    stamps_event: bool,
}

/// A clock that replays a recording's readings in order: one per recorded event (its `at`),
/// and, around each executed tool call, a start and an end reading `duration_ms` apart. Past
/// the end it keeps answering the last reading.
///
/// It also counts how many event stamps it has handed out, which is how many events the
/// replay has appended: the replay uses that to re-issue inputs at the recorded point.
#[derive(Debug)]
pub struct RecordedClock {
    readings: Vec<Reading>,
    /// `stamped[i]`: event stamps among the first `i` readings.
    stamped: Vec<usize>,
    next: AtomicUsize,
}

impl RecordedClock {
    pub(super) fn new(envelopes: &[Envelope]) -> RecordedClock {
        let mut readings = Vec::with_capacity(envelopes.len());
        let stamp = |at| Reading {
            at,
            stamps_event: true,
        };
        let timing = |at| Reading {
            at,
            stamps_event: false,
        };
        // Executed calls whose end reading is still to come, by (turn, call id).
        let mut running: HashMap<(Option<&str>, &str), usize> = HashMap::new();
        for (i, envelope) in envelopes.iter().enumerate() {
            match &envelope.event {
                Event::ToolDecided {
                    call_id, action, ..
                } if action.executes() => {
                    readings.push(stamp(envelope.at));
                    let finished =
                        finished_after(envelopes, i, envelope.turn_id.as_deref(), call_id);
                    let started = finished
                        .map(|(at, duration_ms)| {
                            at - TimeDelta::milliseconds(i64::try_from(duration_ms).unwrap_or(0))
                        })
                        .unwrap_or(envelope.at);
                    readings.push(timing(started));
                    running.insert((envelope.turn_id.as_deref(), call_id), i);
                }
                Event::ToolCallFinished { call_id, .. } => {
                    if running
                        .remove(&(envelope.turn_id.as_deref(), call_id.as_str()))
                        .is_some()
                    {
                        readings.push(timing(envelope.at));
                    }
                    readings.push(stamp(envelope.at));
                }
                _ => readings.push(stamp(envelope.at)),
            }
        }
        let mut stamped = Vec::with_capacity(readings.len() + 1);
        let mut count = 0;
        stamped.push(0);
        for reading in &readings {
            count += usize::from(reading.stamps_event);
            stamped.push(count);
        }
        RecordedClock {
            readings,
            stamped,
            next: AtomicUsize::new(0),
        }
    }

    /// How many events have been stamped so far (readings past the recording count as events).
    pub fn events_stamped(&self) -> usize {
        let taken = self.next.load(Ordering::SeqCst);
        match self.stamped.get(taken) {
            Some(n) => *n,
            None => self.stamped.last().copied().unwrap_or(0) + (taken - self.readings.len()),
        }
    }
}

/// The `at` and `duration_ms` of the first `tool_call_finished` of `call_id` in `turn` after
/// position `from`.
pub(super) fn finished_after(
    envelopes: &[Envelope],
    from: usize,
    turn: Option<&str>,
    call: &str,
) -> Option<(DateTime<Utc>, u64)> {
    envelopes[from..].iter().find_map(|e| match &e.event {
        Event::ToolCallFinished {
            call_id,
            duration_ms,
            ..
        } if call_id == call && e.turn_id.as_deref() == turn => Some((e.at, *duration_ms)),
        _ => None,
    })
}

impl Clock for RecordedClock {
    fn now(&self) -> DateTime<Utc> {
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        self.readings
            .get(i)
            .or(self.readings.last())
            .map(|r| r.at)
            .unwrap_or_default()
    }
}

/// An id source that hands out a recording's ids per prefix, in the order they first appear:
/// `req` (request ids), `turn` (turn ids), `msg` (assistant message ids), `sub` (submission
/// ids). Once a prefix's recorded ids run out, or for a prefix the recording shows none of, it
/// counts: `{prefix}_replay_1`, `{prefix}_replay_2` …
///
/// A request an input event names (`turn_requested`) is not handed out: the replay re-issues
/// that input with its recorded id.
#[derive(Debug)]
pub struct RecordedIds {
    queues: Mutex<HashMap<String, VecDeque<String>>>,
    counters: Mutex<HashMap<String, u64>>,
}

impl RecordedIds {
    pub(super) fn new(envelopes: &[Envelope]) -> RecordedIds {
        let mut queues: HashMap<String, VecDeque<String>> = HashMap::new();
        let mut seen: std::collections::HashSet<(&str, String)> = envelopes
            .iter()
            .filter_map(|e| match &e.event {
                Event::TurnRequested { request_id, .. } => Some(("req", request_id.clone())),
                _ => None,
            })
            .collect();
        let mut push = |prefix: &'static str, id: &str| {
            if seen.insert((prefix, id.to_owned())) {
                queues
                    .entry(prefix.to_owned())
                    .or_default()
                    .push_back(id.to_owned());
            }
        };
        for envelope in envelopes {
            match &envelope.event {
                Event::UserMessagesSaved {
                    request_id: Some(id),
                    ..
                }
                | Event::SubmissionApplied { request_id: id, .. } => push("req", id),
                Event::TurnStarted {
                    request_id,
                    message_id,
                    ..
                } => {
                    push("req", request_id);
                    if let Some(turn) = &envelope.turn_id {
                        push("turn", turn);
                    }
                    push("msg", message_id);
                }
                Event::TurnFailed {
                    request_id: Some(id),
                    ..
                }
                | Event::MessagesRetracted {
                    request_id: Some(id),
                    ..
                } => push("req", id),
                Event::SubmissionAccepted { submission_id, .. } => push("sub", submission_id),
                _ => {}
            }
        }
        RecordedIds {
            queues: Mutex::new(queues),
            counters: Mutex::new(HashMap::new()),
        }
    }
}

impl IdSource for RecordedIds {
    fn next_id(&self, prefix: &str) -> String {
        if let Some(id) = lock(&self.queues)
            .get_mut(prefix)
            .and_then(VecDeque::pop_front)
        {
            return id;
        }
        let mut counters = lock(&self.counters);
        let n = counters.entry(prefix.to_owned()).or_insert(0);
        *n += 1;
        format!("{prefix}_replay_{n}")
    }
}
