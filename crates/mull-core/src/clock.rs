//! Injectable time and identifiers.
//!
//! Every timestamp and id that reaches the log comes from a [`Clock`] or an [`IdSource`], so a run
//! with [`FixedClock`] and [`SequentialIds`] writes the same bytes every time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// The current instant: what an event is stamped with.
    fn now(&self) -> DateTime<Utc>;

    /// A reading that only times work (a tool's run) and stamps nothing. A clock that serves a
    /// recording's stamps answers it without using one up; every other clock reads `now`.
    fn timer(&self) -> DateTime<Utc> {
        self.now()
    }

    /// Lets `by` pass for a wait (a backoff before a retry). A clock that only moves when told
    /// to moves forward by `by` and answers true: nothing needs to wait in real time, so tests
    /// and deterministic runs back off instantly and their stamps still show the wait. A real
    /// clock answers false (the default) and the caller sleeps.
    fn skip_ahead(&self, _by: Duration) -> bool {
        false
    }
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to: deterministic runs and tests use it.
#[derive(Debug)]
pub struct FixedClock {
    micros: AtomicI64,
}

impl FixedClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            micros: AtomicI64::new(start.timestamp_micros()),
        }
    }

    /// A clock standing at 2025-01-01T00:00:00Z, the epoch of every fixture.
    pub fn at_fixture_epoch() -> Self {
        Self::new(
            Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0)
                .single()
                .unwrap_or_default(),
        )
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let micros = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.micros.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.micros.load(Ordering::SeqCst)).unwrap_or_default()
    }

    fn skip_ahead(&self, by: Duration) -> bool {
        self.advance(by);
        true
    }
}

/// A source of unique identifiers for sessions, turns, requests, messages and tool calls.
pub trait IdSource: Send + Sync + 'static {
    /// A fresh id; `prefix` names what it identifies (`"turn"`, `"msg"` …).
    fn next_id(&self, prefix: &str) -> String;
}

/// Random ids (UUID v4 under a prefix) for production use.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomIds;

impl IdSource for RandomIds {
    fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
    }
}

/// Counting ids (`turn_1`, `turn_2`, `msg_1` …), one counter per prefix, for deterministic runs.
#[derive(Debug, Default)]
pub struct SequentialIds {
    counters: Mutex<HashMap<String, u64>>,
}

impl SequentialIds {
    /// A source whose counters all start at 1.
    pub fn new() -> Self {
        Self::default()
    }
}

impl IdSource for SequentialIds {
    fn next_id(&self, prefix: &str) -> String {
        let mut counters = self
            .counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let n = counters.entry(prefix.to_owned()).or_insert(0);
        *n += 1;
        format!("{prefix}_{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_clock_moves_only_when_advanced() {
        let clock = FixedClock::at_fixture_epoch();
        let a = clock.now();
        assert_eq!(a, clock.now());
        clock.advance(Duration::from_millis(1500));
        assert_eq!((clock.now() - a).num_milliseconds(), 1500);
        assert_eq!(a.to_rfc3339(), "2025-01-01T00:00:00+00:00");
    }

    #[test]
    fn sequential_ids_count_per_prefix() {
        let ids = SequentialIds::new();
        assert_eq!(ids.next_id("turn"), "turn_1");
        assert_eq!(ids.next_id("msg"), "msg_1");
        assert_eq!(ids.next_id("turn"), "turn_2");
    }

    #[test]
    fn random_ids_differ() {
        assert_ne!(RandomIds.next_id("s"), RandomIds.next_id("s"));
    }
}
