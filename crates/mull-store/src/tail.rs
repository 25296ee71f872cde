//! Following the log live: [`Tail`] wakes on rows committed by any process.

use std::time::{Duration, Instant};

use mull_core::Envelope;

use crate::error::StoreError;
use crate::reader::LogReader;

/// How often a waiting tail looks for new commits.
pub const TAIL_POLL_INTERVAL: Duration = Duration::from_millis(5);

/// How many events one `next_batch` returns at most.
const TAIL_BATCH: usize = 1024;

/// A cursor that follows the log: each call returns the events committed after the last one
/// it returned.
///
/// It polls SQLite's `data_version` (which changes whenever another connection, in any
/// process, commits) every [`TAIL_POLL_INTERVAL`], and reads new rows only when it changed.
#[derive(Debug)]
pub struct Tail {
    reader: LogReader,
    after_seq: u64,
    /// The data_version at the last read that found everything; `None` before the first read.
    seen_version: Option<i64>,
}

impl Tail {
    pub(crate) fn new(reader: LogReader, after_seq: u64) -> Tail {
        Tail {
            reader,
            after_seq,
            seen_version: None,
        }
    }

    /// The seq of the last event returned (or the starting point).
    pub fn position(&self) -> u64 {
        self.after_seq
    }

    /// The reader underneath, for other queries between batches.
    pub fn reader(&self) -> &LogReader {
        &self.reader
    }

    /// Blocks until events after the current position are committed, and returns them in
    /// order (at most 1024 at a time); returns an empty batch when `wait` passes first.
    pub fn next_batch(&mut self, wait: Duration) -> Result<Vec<Envelope>, StoreError> {
        let deadline = Instant::now() + wait;
        loop {
            // Read the version before the rows: a commit in between changes it again, so the
            // next poll reads once more and nothing is missed.
            let version = self.reader.data_version()?;
            if self.seen_version != Some(version) {
                let batch = self.reader.page(self.after_seq, TAIL_BATCH)?;
                if batch.len() < TAIL_BATCH {
                    self.seen_version = Some(version);
                }
                if let Some(last) = batch.last() {
                    self.after_seq = last.seq;
                    return Ok(batch);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            std::thread::sleep(TAIL_POLL_INTERVAL.min(deadline - now));
        }
    }
}

impl LogReader {
    /// Follows the log from `after_seq`: see [`Tail`]. The reader becomes the tail's.
    pub fn tail(self, after_seq: u64) -> Tail {
        Tail::new(self, after_seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::Log;
    use chrono::DateTime;
    use mull_core::Event;

    #[test]
    fn a_tail_wakes_on_new_commits_and_times_out_when_there_are_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path().join("log.db")).expect("opens");
        let at = DateTime::from_timestamp_micros(0).expect("valid");
        log.append("s", None, at, Event::StepStarted { step: 0 })
            .expect("appends");
        log.flush_blocking().expect("flushes");
        let mut tail = log.reader().expect("reader").tail(0);
        let first = tail.next_batch(Duration::from_secs(5)).expect("first");
        assert_eq!(first.iter().map(|e| e.seq).collect::<Vec<_>>(), [1]);
        assert!(tail
            .next_batch(Duration::from_millis(30))
            .expect("timeout")
            .is_empty());
        let writer = {
            let log = log.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                for step in 1..=3 {
                    log.append("s", None, at, Event::StepStarted { step })
                        .expect("appends");
                }
                log.flush_blocking().expect("flushes");
            })
        };
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let batch = tail.next_batch(Duration::from_secs(5)).expect("batch");
            assert!(!batch.is_empty(), "the tail missed a commit");
            seen.extend(batch.iter().map(|e| e.seq));
        }
        writer.join().expect("writer");
        assert_eq!(seen, [2, 3, 4]);
        assert_eq!(tail.position(), 4);
    }
}
