//! `mull export DB [--session ID]`: the log as JSONL on standard output.
//!
//! Only whole lines are written; when the log is damaged part-way, the error says how many
//! lines went out, up to which seq, and which seqs could not be read.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use mull_store::{export_jsonl, LogReader, ReadLog};

/// How many session ids an unknown session's error lists.
const LISTED_SESSIONS: usize = 5;

/// Writes the log (or one session) to stdout.
pub fn run(db: &Path, session: Option<&str>) -> Result<()> {
    let reader = LogReader::open(db).with_context(|| format!("opening {}", db.display()))?;
    // An export must not pass a log without some of its rows off as the whole of it.
    reader
        .ensure_whole()
        .context("nothing exported: it would leave out rows the log lacks")?;
    if let Some(session) = session {
        if !reader.has_session(session)? {
            anyhow::bail!("{}", unknown_session(&reader, db, session)?);
        }
    }
    let progress = match session {
        None => super::progress::bar(
            reader.max_seq()?,
            super::progress::Unit::Events,
            &format!("exporting {}", db.display()),
        ),
        Some(session) => super::progress::spinner(&format!("exporting session {session}")),
    };
    let stdout = std::io::stdout();
    let mut out = Lines {
        inner: BufWriter::new(stdout.lock()),
        lines: 0,
        progress,
    };
    let exported = export_jsonl(&reader, session, &mut out);
    // What went out is whole lines: the export writes a line at a time.
    let flushed = out.inner.flush().context("writing standard output");
    out.progress.finish_and_clear();
    match exported {
        Ok(_) => flushed,
        Err(err) => Err(err).with_context(|| {
            format!(
                "exporting {}: {} complete lines written before this error, none after",
                db.display(),
                out.lines
            )
        }),
    }
}

/// The error for `--session` naming no session of the log.
fn unknown_session(reader: &LogReader, db: &Path, session: &str) -> Result<String> {
    let sessions = reader.sessions()?;
    let mut names: Vec<&str> = sessions
        .iter()
        .rev()
        .take(LISTED_SESSIONS)
        .map(|s| s.session_id.as_str())
        .collect();
    names.reverse();
    let listed = match sessions.len() {
        0 => "it holds no session".to_owned(),
        n if n > LISTED_SESSIONS => format!("it holds {n}, the newest: {}", names.join(", ")),
        n => format!("it holds {n}: {}", names.join(", ")),
    };
    Ok(format!(
        "{}: no session {session:?} ({listed})",
        db.display()
    ))
}

/// A writer that counts the newlines that went through it (and shows them as progress).
struct Lines<W> {
    inner: W,
    lines: u64,
    progress: indicatif::ProgressBar,
}

impl<W: Write> Write for Lines<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        let lines = buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        self.lines += lines;
        self.progress.inc(lines);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
