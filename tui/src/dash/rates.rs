//! Live throughput for the header: events and tokens per second over the last few seconds of
//! what the tail delivered. Time comes from the loop's ticks, so tests drive it exactly.

use std::collections::VecDeque;
use std::time::Duration;

use mull_core::{Envelope, Event};

/// How many one-second buckets the rates average over.
const WINDOW: usize = 5;
const BUCKET: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bucket {
    events: u64,
    tokens: u64,
}

/// Counts of recent arrivals, one bucket per second.
#[derive(Debug, Clone, Default)]
pub struct Rates {
    full: VecDeque<Bucket>,
    current: Bucket,
    in_current: Duration,
}

impl Rates {
    /// Counts a batch the tail delivered: every event, and the output tokens finished steps
    /// report.
    pub fn record(&mut self, events: &[Envelope]) {
        self.current.events += events.len() as u64;
        self.current.tokens += events
            .iter()
            .map(|env| match &env.event {
                Event::StepFinished { record } => record.usage.output_tokens.unwrap_or(0),
                _ => 0,
            })
            .sum::<u64>();
    }

    /// Wall time passed.
    pub fn tick(&mut self, elapsed: Duration) {
        self.in_current += elapsed;
        while self.in_current >= BUCKET {
            self.in_current -= BUCKET;
            self.full.push_back(std::mem::take(&mut self.current));
            if self.full.len() > WINDOW {
                self.full.pop_front();
            }
        }
    }

    fn per_second(&self, field: impl Fn(&Bucket) -> u64) -> u64 {
        if self.full.is_empty() {
            return 0;
        }
        let sum: u64 = self.full.iter().map(&field).sum();
        sum / self.full.len() as u64
    }

    /// Events per second over the window.
    pub fn events_per_sec(&self) -> u64 {
        self.per_second(|b| b.events)
    }

    /// Output tokens per second over the window.
    pub fn tokens_per_sec(&self) -> u64 {
        self.per_second(|b| b.tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dash::testlog::sample_log;

    #[test]
    fn rates_average_the_last_seconds() {
        let mut rates = Rates::default();
        assert_eq!(rates.events_per_sec(), 0, "nothing measured yet");
        let log = sample_log();
        rates.record(&log[..20]);
        rates.tick(Duration::from_millis(600));
        assert_eq!(rates.events_per_sec(), 0, "the first second is not over");
        rates.tick(Duration::from_millis(600));
        assert_eq!(rates.events_per_sec(), 20);
        rates.tick(Duration::from_secs(1));
        assert_eq!(rates.events_per_sec(), 10, "a quiet second halves the mean");
        rates.tick(Duration::from_secs(10));
        assert_eq!(rates.events_per_sec(), 0, "old seconds leave the window");
        let tokens: u64 = log
            .iter()
            .filter_map(|e| match &e.event {
                Event::StepFinished { record } => record.usage.output_tokens,
                _ => None,
            })
            .sum();
        rates.record(&log);
        rates.tick(Duration::from_secs(1));
        assert_eq!(rates.tokens_per_sec(), tokens / WINDOW as u64);
    }
}
