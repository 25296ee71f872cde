//! `mull import FILE DB`: append a JSONL log to a database.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use anyhow::{Context, Result};
use mull_store::{import_jsonl, Log};

/// Imports `file` into `db` and reports how many events went in.
pub fn run(file: &Path, db: &Path) -> Result<()> {
    let count = import_into(file, db)?;
    eprintln!(
        "imported {count} events from {} into {}",
        file.display(),
        db.display()
    );
    Ok(())
}

/// Imports `file` into `db`; returns the number of events.
pub fn import_into(file: &Path, db: &Path) -> Result<u64> {
    let input = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let log = Log::open(db).with_context(|| format!("opening {}", db.display()))?;
    let count = import_jsonl(BufReader::new(input), &file.display().to_string(), &log)?;
    log.close()
        .with_context(|| format!("committing the import into {}", db.display()))?;
    Ok(count)
}
