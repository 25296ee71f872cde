//! The record file `<db>-records` as a writer holds it open: rows an output gate let out before
//! SQLite committed them, appended one `write` per gate, emptied once the database holds them;
//! and [`replay`], which inserts the rows the database lacks before a writer (or a reader that
//! found the writer dead) goes on.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::frames::{encode_row, scan};
use super::{set_aside, Durability};
use crate::error::StoreError;
use crate::row::{insert_many, Row, Seqs, ROWS_PER_INSERT};

/// The record file of the log at `db`.
pub fn records_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-records");
    PathBuf::from(name)
}

/// The open record file of a writer.
pub(crate) struct Records {
    file: File,
    path: PathBuf,
    durability: Durability,
    /// The highest seq written to the file (or committed when the file was last emptied).
    pub written: u64,
    /// Bytes in the file.
    pub len: u64,
    /// Encoding buffer, kept between writes.
    buf: Vec<u8>,
}

impl Records {
    /// Opens (creating) the record file of `db`, empty: [`replay`] has run before.
    pub fn open(db: &Path, committed: u64, durability: Durability) -> Result<Records, StoreError> {
        let path = records_path(db);
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let file = File::options()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        file.set_len(0).map_err(io)?;
        if durability == Durability::Power {
            // The file's name must survive a power cut too, not only its bytes.
            file.sync_all().map_err(io)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
            }
        }
        Ok(Records {
            file,
            path,
            durability,
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

    /// Writes what [`Records::encode`] encoded, in one `write` (followed by `fdatasync` for
    /// [`Durability::Power`]), and moves [`Records::written`] to `last`.
    pub fn write_encoded(&mut self, last: u64) -> Result<(), String> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let fail = |e: std::io::Error, written: u64| {
            format!(
                "{}: writing rows {}..={last}: {e}",
                self.path.display(),
                written + 1
            )
        };
        self.file
            .write_all(&self.buf)
            .map_err(|e| fail(e, self.written))?;
        if self.durability == Durability::Power {
            self.file.sync_data().map_err(|e| fail(e, self.written))?;
        }
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

/// Inserts the rows of `db`'s record file that the database lacks (those after `last`, its last
/// seq), in one transaction. Returns the log's last seq after it.
///
/// Run with the single-writer lock held, by a writer opening the log or by a reader that found
/// its writer dead, after [`super::inspect`] found the file whole (its last frame may be torn:
/// that `write` never returned). Rows must continue the database without a gap; a file whose
/// rows start further on is set aside as `gapped` and refused, since the rows between are lost.
pub(crate) fn replay(conn: &mut Connection, db: &Path, last: u64) -> Result<u64, StoreError> {
    let path = records_path(db);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(last),
        Err(source) => return Err(StoreError::Io { path, source }),
    };
    let rows: Vec<Row> = scan(&bytes)
        .rows
        .into_iter()
        .filter(|row| row.seq > last)
        .collect();
    let Some(first) = rows.first() else {
        return Ok(last);
    };
    let gap = if first.seq != last + 1 {
        Some(format!(
            "its rows (from seq {}) do not continue the log, which ends at seq {last}",
            first.seq
        ))
    } else {
        rows.windows(2)
            .find(|w| w[1].seq != w[0].seq + 1)
            .map(|w| format!("its rows skip from seq {} to seq {}", w[0].seq, w[1].seq))
    };
    if let Some(gap) = gap {
        let kept = set_aside(&path, "gapped")?;
        return Err(super::refusal(db, &kept, &gap));
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
