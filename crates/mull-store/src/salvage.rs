//! What a recovery takes from the files beside a damaged log (see [`crate::gate`]): the
//! commits a damaged WAL still holds after its bad frame, and the rows of record files that
//! still verify.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::damage::DamagedRange;
use crate::error::StoreError;
use crate::gate::{self, wal};
use crate::reader::LogReader;
use crate::row::Row;

/// The log to walk for a recovery: the database itself, or — when a damaged WAL was kept —
/// a copy of it with that WAL's frames re-checksummed, so that SQLite replays every commit it
/// holds (a damaged page among them reads as damage, which the walk goes around).
pub(crate) struct Source {
    pub reader: LogReader,
    /// The copy's directory, removed on drop.
    scratch: Option<PathBuf>,
}

impl Drop for Source {
    fn drop(&mut self) {
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The log to walk for a recovery of `db` into `out` (see [`Source`]); `reader` is `db`'s.
pub(crate) fn source(db: &Path, reader: LogReader, out: &Path) -> Result<Source, StoreError> {
    let kept_wal = gate::evidence(db).into_iter().rev().find(|f| {
        f.file_name()
            .is_some_and(|n| n.to_string_lossy().contains("-wal."))
    });
    let Some(kept_wal) = kept_wal else {
        return Ok(Source {
            reader,
            scratch: None,
        });
    };
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::Io { path, source }
    };
    let bytes = std::fs::read(&kept_wal).map_err(io(&kept_wal))?;
    let Some(rechained) = wal::rechain(&bytes) else {
        return Ok(Source {
            reader,
            scratch: None,
        });
    };
    let mut name = out.as_os_str().to_owned();
    name.push(".wal-replay");
    let scratch = PathBuf::from(name);
    std::fs::create_dir_all(&scratch).map_err(io(&scratch))?;
    let copy = scratch.join("log.db");
    drop(reader);
    let made = std::fs::copy(db, &copy)
        .map_err(io(db))
        .and_then(|_| std::fs::write(gate::wal_path(&copy), &rechained).map_err(io(&copy)))
        .and_then(|()| LogReader::open(&copy));
    match made {
        Ok(reader) => Ok(Source {
            reader,
            scratch: Some(scratch),
        }),
        Err(err) => {
            let _ = std::fs::remove_dir_all(&scratch);
            Err(err)
        }
    }
}

/// The rows after `after` that the record file of `db` and the record files set aside beside
/// it still hold, in seq order, and the stretches of seqs between them that none holds.
pub(crate) fn record_rows(db: &Path, after: u64) -> (Vec<Row>, Vec<DamagedRange>) {
    let mut files = vec![gate::records_path(db)];
    files.extend(gate::evidence(db).into_iter().filter(|f| {
        f.file_name()
            .is_some_and(|n| n.to_string_lossy().contains("-records."))
    }));
    let mut rows = BTreeMap::new();
    for file in files {
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        for row in gate::salvage(&bytes) {
            if row.seq > after {
                rows.entry(row.seq).or_insert(row);
            }
        }
    }
    let mut lost = Vec::new();
    let mut last = after;
    for (&seq, row) in &rows {
        if seq > last + 1 {
            lost.push(DamagedRange {
                first: last + 1,
                last: Some(seq - 1),
                sessions: BTreeSet::from([row.session_id.to_string()]),
                lifecycle: Vec::new(),
                cause: "no file beside the log holds them whole (a record-file frame that fails \
                        its CRC)"
                    .to_owned(),
            });
        }
        last = seq;
    }
    (rows.into_values().collect(), lost)
}
