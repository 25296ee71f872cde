//! The clock and ids a replay serves from the recording.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use mull_core::{Clock, Envelope, Event, IdSource};

use super::lock;

/// A clock that serves a recording's stamps in order, one per recorded event (its `at`). Past
/// the end it keeps answering the last one. A [`Clock::timer`] reading (timing a tool's run)
/// uses up no stamp: a replayed call's duration is served from its recorded outcome instead.
///
/// It also counts how many stamps it has handed out, which is how many events the replay has
/// appended: the replay uses that to re-issue inputs at the recorded point.
#[derive(Debug)]
pub struct RecordedClock {
    stamps: Vec<DateTime<Utc>>,
    next: AtomicUsize,
}

impl RecordedClock {
    pub(super) fn new(envelopes: &[Envelope]) -> RecordedClock {
        RecordedClock {
            stamps: envelopes.iter().map(|e| e.at).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// How many events have been stamped so far.
    pub fn events_stamped(&self) -> usize {
        self.next.load(Ordering::SeqCst)
    }

    fn stamp(&self, i: usize) -> DateTime<Utc> {
        self.stamps
            .get(i)
            .or(self.stamps.last())
            .copied()
            .unwrap_or_default()
    }
}

impl Clock for RecordedClock {
    fn now(&self) -> DateTime<Utc> {
        self.stamp(self.next.fetch_add(1, Ordering::SeqCst))
    }

    /// A replay's time is the recording's: a recorded wait (a recovery's backoff) already
    /// passed, so the replay does not wait again.
    fn skip_ahead(&self, _by: std::time::Duration) -> bool {
        true
    }

    fn timer(&self) -> DateTime<Utc> {
        self.stamp(self.next.load(Ordering::SeqCst).saturating_sub(1))
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
                Event::ToolApprovalRequested { approval_id, .. } => push("approval", approval_id),
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
