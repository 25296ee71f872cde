//! `mull import FILE DB`: append a JSONL log to a database (a SQLite file or a `postgres://`
//! URL).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result};
use mull_store::{import_jsonl, Log, LogReader};

/// Imports `file` into `db` and reports how many events went in.
pub fn run(file: &Path, db: &Path) -> Result<()> {
    let count = match super::pg::url(db) {
        Some(url) => import_into_postgres(file, url)?,
        None => import_into(file, db)?,
    };
    eprintln!(
        "imported {count} events from {} into {}",
        file.display(),
        db.display()
    );
    Ok(())
}

/// Imports `file` into `db`; returns the number of events. A failed import into a database it
/// created leaves no file behind (the log's own import already keeps an existing one as it was).
pub fn import_into(file: &Path, db: &Path) -> Result<u64> {
    refuse_database(file)?;
    let input = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let size = input.metadata().map(|m| m.len()).unwrap_or(0);
    let progress = super::progress::bar(
        size,
        super::progress::Unit::Bytes,
        &format!("importing {}", file.display()),
    );
    let created = !db.exists();
    let imported = (|| {
        let log = Log::open(db).with_context(|| format!("opening {}", db.display()))?;
        let input = BufReader::new(progress.wrap_read(input));
        let count = import_jsonl(input, &file.display().to_string(), &log)?;
        log.close()
            .with_context(|| format!("committing the import into {}", db.display()))?;
        Ok(count)
    })();
    // Cleared whatever happened: an error prints below no half-drawn bar.
    progress.finish_and_clear();
    if imported.is_err() && created {
        mull_store::integrity::remove_log_files(db);
    }
    imported
}

/// Imports `file` into the PostgreSQL log at `url`: the file is checked line by line into a
/// scratch SQLite log first (the same rules as an import into a file), then copied into the
/// database in one transaction, each session's seqs counted from 1 there.
fn import_into_postgres(file: &Path, url: &str) -> Result<u64> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let scratch = dir.path().join("import.db");
    import_into(file, &scratch)?;
    let reader =
        LogReader::open(&scratch).with_context(|| format!("reading {} back", file.display()))?;
    super::pg::runtime()?
        .block_on(mull_store_pg::import(url, &reader))
        .with_context(|| format!("importing {}", file.display()))
}

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// Refuses a database given where a JSONL file is expected, pointing to `mull export`.
pub fn refuse_database(file: &Path) -> Result<()> {
    let mut head = [0u8; 16];
    let read = File::open(file).and_then(|mut f| f.read(&mut head));
    if read.is_ok_and(|n| head[..n] == *SQLITE_MAGIC) {
        anyhow::bail!(
            "{0}: a database, not a JSONL file; `mull export {0} > {1}` writes its JSONL \
             (`mull dash {0}` and `mull stats {0}` read it as it is)",
            file.display(),
            file.with_extension("jsonl").display()
        );
    }
    Ok(())
}
