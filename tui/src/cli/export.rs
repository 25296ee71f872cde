//! `mull export DB [--session ID]`: the log as JSONL on standard output.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use mull_store::{export_jsonl, LogReader};

/// Writes the log (or one session) to stdout.
pub fn run(db: &Path, session: Option<&str>) -> Result<()> {
    let reader = LogReader::open(db).with_context(|| format!("opening {}", db.display()))?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    export_jsonl(&reader, session, &mut out)
        .with_context(|| format!("exporting {}", db.display()))?;
    out.flush().context("writing standard output")?;
    Ok(())
}
