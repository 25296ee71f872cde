//! The writer's side of the output gate: a gate whose event is not committed writes the queued
//! rows to the record file ([`crate::gate`]) in one `write` instead of committing them on its
//! caller's thread; the writer thread records the rows it takes the same way, then commits
//! them behind the gate with its batch, and empties the file once the database holds it all.

use std::sync::atomic::Ordering;

use super::{lock, Shared};
use crate::error::StoreError;
use crate::gate::Records;
use crate::row::Row;

impl Shared {
    /// The output gate's write: the queued rows up to the newest, written to the record file,
    /// if every row up to `seq` not yet durable is still queued. Returns false when some of them
    /// were taken into the writer's open transaction (which must then commit instead).
    pub(super) fn record_queued(&self, seq: u64) -> Result<bool, StoreError> {
        let mut records = lock(&self.records);
        let last = {
            let queue = lock(&self.queue);
            let durable = self.committed.load(Ordering::Acquire).max(records.written);
            if seq <= durable {
                return Ok(true);
            }
            match queue.rows.first() {
                Some(first) if first.seq <= durable + 1 => records.encode(&queue.rows),
                _ => return Ok(false),
            }
        };
        self.write_records(&mut records, last)?;
        Ok(true)
    }

    /// Writes the rows the writer thread takes that the record file lacks (see `run_writer`).
    pub(super) fn record_rows(&self, records: &mut Records, rows: &[Row]) {
        let last = records.encode(rows);
        // A failure stops the writer for good; it is reported to every later call.
        let _ = self.write_records(records, last);
    }

    fn write_records(&self, records: &mut Records, last: u64) -> Result<(), StoreError> {
        if let Err(message) = records.write_encoded(last) {
            // The rows after the last durable one may be lost: nothing more may be let out.
            self.failure.set(message);
            self.failure.check()?;
        }
        Ok(())
    }

    /// Empties the record file if the database holds all of it (called after each commit).
    pub(super) fn settle_records(&self) {
        lock(&self.records).reset_if_caught_up(self.committed.load(Ordering::Acquire));
    }
}
