//! The record file `<db>-records`: rows an output gate let out before SQLite committed them.
//!
//! A gate ([`Log::durable`](super::Log::durable)) whose event is not committed yet writes the
//! queued rows here — one `write` for all of them — instead of inserting and committing them on
//! its caller's thread; the writer thread commits them to the database behind it, with the rest
//! of its batch. A `write` that returned is in the operating system's page cache, so a killed
//! process loses nothing a gate let out: the same promise a WAL commit under
//! `synchronous=NORMAL` makes (a power cut may lose the last writes of either).
//!
//! When a writer opens the log, the rows of the file the database lacks are inserted before
//! anything else (see [`replay`]). Once the database holds every row of the file, the writer
//! thread empties it. Each row is one frame: its length, a CRC-32 of its bytes, and the row;
//! a frame cut short by a kill mid-`write` ends the file there, and that write never returned.

use std::borrow::Cow;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rusqlite::Connection;

use super::row::{insert_many, Row, Seqs, ROWS_PER_INSERT};
use super::{lock, Shared};
use crate::error::StoreError;
use crate::timestamp;

/// Past this size the writer thread empties the file even if it must hold gates back for one
/// commit to catch up (see `run_writer`).
pub(super) const RECORDS_RESET_BYTES: u64 = 4 << 20;

/// The record file of the log at `db`.
pub fn records_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-records");
    PathBuf::from(name)
}

/// The open record file of a writer.
pub(super) struct Records {
    file: File,
    path: PathBuf,
    /// The highest seq written to the file (or committed when the file was last emptied).
    pub written: u64,
    /// Bytes in the file.
    pub len: u64,
    /// Encoding buffer, kept between writes.
    buf: Vec<u8>,
}

impl Records {
    /// Opens (creating) the record file of `db`, empty: [`replay`] has run before.
    pub fn open(db: &Path, committed: u64) -> Result<Records, StoreError> {
        let path = records_path(db);
        let file = File::options()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        file.set_len(0).map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(Records {
            file,
            path,
            written: committed,
            len: 0,
            buf: Vec::new(),
        })
    }

    /// Encodes the rows after [`Records::written`] into the buffer; returns the last seq
    /// encoded. Nothing is written yet (see [`Records::write_encoded`]).
    pub fn encode(&mut self, rows: &[Row]) -> u64 {
        self.buf.clear();
        let mut last = self.written;
        for row in rows.iter().filter(|row| row.seq > self.written) {
            encode_row(&mut self.buf, row);
            last = row.seq;
        }
        last
    }

    /// Writes what [`Records::encode`] encoded, in one `write`, and moves
    /// [`Records::written`] to `last`.
    pub fn write_encoded(&mut self, last: u64) -> Result<(), String> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.file.write_all(&self.buf).map_err(|e| {
            format!(
                "{}: writing rows {}..={last}: {e}",
                self.path.display(),
                self.written + 1
            )
        })?;
        self.len += self.buf.len() as u64;
        self.written = last;
        Ok(())
    }

    /// Empties the file once the database holds every row written to it.
    pub fn reset_if_caught_up(&mut self, committed: u64) {
        if self.len == 0 || committed < self.written {
            return;
        }
        match self.file.set_len(0) {
            Ok(()) => self.len = 0,
            // Left as it is: its rows are all committed, so a replay skips them.
            Err(err) => {
                tracing::warn!(path = %self.path.display(), error = %err, "emptying the record file")
            }
        }
    }

    /// Removes the file (the log is closing with everything committed).
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

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
        self.recorded.store(records.written, Ordering::Release);
        Ok(())
    }

    /// Empties the record file if the database holds all of it (called after each commit).
    pub(super) fn settle_records(&self) {
        lock(&self.records).reset_if_caught_up(self.committed.load(Ordering::Acquire));
    }
}

/// Appends one row's frame to `buf`.
fn encode_row(buf: &mut Vec<u8>, row: &Row) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 8]);
    buf.extend_from_slice(&row.seq.to_le_bytes());
    buf.extend_from_slice(&timestamp::to_stored(row.at).to_le_bytes());
    buf.extend_from_slice(&row.v.to_le_bytes());
    put_str(buf, Some(&row.session_id));
    put_str(buf, row.turn_id.as_deref());
    put_str(buf, Some(&row.kind));
    put_str(buf, Some(&row.payload));
    let body = start + 8;
    let len = (buf.len() - body) as u32;
    let crc = crc32fast::hash(&buf[body..]);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..body].copy_from_slice(&crc.to_le_bytes());
}

fn put_str(buf: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
            buf.extend_from_slice(s.as_bytes());
        }
        None => buf.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

/// Reads frames of a row's body; `None` at anything that does not decode.
struct Body<'a>(&'a [u8]);

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn str(&mut self) -> Option<Option<&'a str>> {
        let len = self.u32()?;
        if len == u32::MAX {
            return Some(None);
        }
        std::str::from_utf8(self.take(len as usize)?).ok().map(Some)
    }

    fn row(mut self) -> Option<Row> {
        let seq = self.u64()?;
        let at = timestamp::from_stored(self.u64()? as i64)?;
        let v = u16::from_le_bytes(self.take(2)?.try_into().ok()?);
        let session_id: Arc<str> = Arc::from(self.str()??);
        let turn_id = self.str()?.map(Arc::from);
        let kind = Cow::Owned(self.str()??.to_owned());
        let payload = self.str()??.to_owned();
        self.0.is_empty().then_some(Row {
            seq,
            session_id,
            turn_id,
            at,
            v,
            kind,
            payload,
        })
    }
}

/// The rows of a record file, in order, up to the first frame that is cut short or does not
/// match its CRC (a write the kill interrupted, which never returned).
fn read_rows(bytes: &[u8]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 8 {
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        let Some(body) = rest.get(8..8 + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let Some(row) = Body(body).row() else { break };
        rows.push(row);
        rest = &rest[8 + len..];
    }
    rows
}

/// Inserts the rows of `db`'s record file that the database lacks (those after `last`, its last
/// seq), in one transaction, and empties the file. Returns the log's last seq after it.
///
/// Runs when a writer opens the log, before anything else reads or writes it. Rows must
/// continue the database without a gap; a file whose rows start further on is refused, since
/// the rows between would be lost.
pub(super) fn replay(conn: &mut Connection, db: &Path, last: u64) -> Result<u64, StoreError> {
    let path = records_path(db);
    let io = |source| StoreError::Io {
        path: path.clone(),
        source,
    };
    let mut bytes = Vec::new();
    match File::open(&path) {
        Ok(mut file) => file.read_to_end(&mut bytes).map_err(io)?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(last),
        Err(err) => return Err(io(err)),
    };
    let rows: Vec<Row> = read_rows(&bytes)
        .into_iter()
        .filter(|row| row.seq > last)
        .collect();
    let Some(first) = rows.first() else {
        return Ok(last);
    };
    let contiguous = first.seq == last + 1 && rows.windows(2).all(|w| w[1].seq == w[0].seq + 1);
    if !contiguous {
        return Err(StoreError::Damaged {
            path: path.clone(),
            what: format!(
                "its rows (from seq {}) do not continue the log, which ends at seq {last}: \
                 move the file aside to open the log without them",
                first.seq
            ),
        });
    }
    let ctx = format!("{}: inserting the rows of {}", db.display(), path.display());
    let tx = conn
        .transaction()
        .map_err(StoreError::sqlite(ctx.clone()))?;
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        insert_many(&tx, chunk, Seqs::Given).map_err(StoreError::sqlite(ctx.clone()))?;
    }
    tx.commit().map_err(StoreError::sqlite(ctx))?;
    Ok(rows.last().map_or(last, |row| row.seq))
}

/// Inserts a dead writer's record file into the database, for a reader about to open it: so
/// that a reader never shows less than the last writer let out. Does nothing when the file is
/// empty or missing, or while a writer lives (it commits the file's rows within its batch
/// delay); otherwise takes the writer's lock for the moment it inserts them.
pub(crate) fn settle_dead_writer(db: &Path) -> Result<(), StoreError> {
    let path = records_path(db);
    if std::fs::metadata(&path).map_or(true, |m| m.len() == 0) {
        return Ok(());
    }
    let lock_path = crate::lock::lock_path(db);
    let Some(lock) = crate::lock::try_take_lock(&lock_path)? else {
        return Ok(());
    };
    let result = (|| {
        let mut conn = crate::schema::open_writer(db)?;
        let last: i64 = conn
            .query_row("SELECT coalesce(max(seq), 0) FROM events", [], |r| r.get(0))
            .map_err(StoreError::sqlite(format!(
                "{}: reading the last seq",
                db.display()
            )))?;
        replay(&mut conn, db, last.max(0) as u64)?;
        std::fs::remove_file(&path).map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })
    })();
    // Removed while still held, as a writer does when it closes.
    let _ = std::fs::remove_file(&lock_path);
    drop(lock);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn row(seq: u64, turn: Option<&str>, payload: &str) -> Row {
        Row {
            seq,
            session_id: Arc::from("s"),
            turn_id: turn.map(Arc::from),
            at: Utc
                .timestamp_micros(1_700_000_000_123_456)
                .single()
                .expect("time"),
            v: 1,
            kind: Cow::Borrowed("chunk"),
            payload: payload.to_owned(),
        }
    }

    fn encoded(rows: &[Row]) -> Vec<u8> {
        let mut buf = Vec::new();
        for r in rows {
            encode_row(&mut buf, r);
        }
        buf
    }

    #[test]
    fn rows_read_back_as_written() {
        let rows = [row(1, None, "{}"), row(2, Some("t"), "{\"a\":\"é\"}")];
        let back = read_rows(&encoded(&rows));
        assert_eq!(back.len(), 2);
        for (a, b) in rows.iter().zip(&back) {
            assert_eq!(
                (
                    a.seq,
                    &a.session_id,
                    &a.turn_id,
                    a.at,
                    a.v,
                    &a.kind,
                    &a.payload
                ),
                (
                    b.seq,
                    &b.session_id,
                    &b.turn_id,
                    b.at,
                    b.v,
                    &b.kind,
                    &b.payload
                )
            );
        }
    }

    #[test]
    fn a_frame_cut_short_or_altered_ends_the_file_there() {
        let rows = [
            row(1, None, "one"),
            row(2, None, "two"),
            row(3, None, "three"),
        ];
        let bytes = encoded(&rows);
        for cut in 0..bytes.len() {
            let back = read_rows(&bytes[..cut]);
            assert!(back.len() < 3, "a cut at {cut} keeps a whole file");
            assert!(back
                .iter()
                .zip(&rows)
                .all(|(b, r)| b.seq == r.seq && b.payload == r.payload));
        }
        let mut altered = bytes.clone();
        let second = bytes.len() / 2;
        altered[second] ^= 0x40;
        assert!(read_rows(&altered).len() < 3);
    }

    #[test]
    fn rows_that_do_not_continue_the_log_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        crate::Log::open(&path)
            .expect("opens")
            .close()
            .expect("closes");
        // Rows from seq 3 on, while the log ends at 0: seqs 1 and 2 would be missing.
        std::fs::write(
            records_path(&path),
            encoded(&[row(3, None, "{}"), row(4, None, "{}")]),
        )
        .expect("writes");
        let err = crate::Log::open(&path).expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("-records"), "{text}");
        assert!(
            text.contains("from seq 3") && text.contains("ends at seq 0"),
            "{text}"
        );
        // Nothing was changed: the file is still there for whoever looks at it.
        assert!(records_path(&path).metadata().expect("kept").len() > 0);
    }
}
