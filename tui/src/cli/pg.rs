//! What only a PostgreSQL log has its own way of doing: the JSONL export of its rows and
//! `mull check`'s read-back. Opening a log by path or URL is [`crate::log_source`]'s, named
//! here too for the commands.

use std::io::{BufWriter, Write};

use anyhow::{Context, Result};
use mull_store_pg::Reads;

pub use crate::log_source::{open_log, runtime, url};

/// Events read per statement while folding a session.
const PAGE: usize = 4096;

/// Writes the log (or one session) to stdout as JSONL, in the SQLite export's line format.
pub fn export(url: &str, session: Option<&str>) -> Result<()> {
    runtime()?.block_on(async {
        let reads = Reads::open(url)
            .await
            .context("opening the PostgreSQL log")?;
        let stdout = std::io::stdout();
        let mut out = BufWriter::new(stdout.lock());
        reads
            .export_jsonl(session, &mut out)
            .await
            .context("exporting the PostgreSQL log")?;
        out.flush().context("writing standard output")
    })
}

/// `mull check` on a PostgreSQL log: every event of every session read back and decoded, and
/// each session's seqs contiguous from 1. Prints the verdict; returns whether the log is sound.
/// (Pages and indexes are the database's own to check, e.g. with amcheck.)
pub fn check(url: &str) -> Result<bool> {
    let (read, problems, database) = runtime()?.block_on(async {
        let reads = Reads::open(url)
            .await
            .context("opening the PostgreSQL log")?;
        let mut read = 0u64;
        let mut problems = Vec::new();
        for (session, _) in reads.heads().await? {
            let mut after = 0u64;
            loop {
                match reads.session_page(&session, after, PAGE).await {
                    Ok(page) => {
                        for env in &page {
                            if env.seq != after + 1 {
                                problems.push(format!(
                                    "session {session}: seqs {}..={} missing",
                                    after + 1,
                                    env.seq - 1
                                ));
                            }
                            after = env.seq;
                            read += 1;
                        }
                        if page.len() < PAGE {
                            break;
                        }
                    }
                    Err(e) => {
                        problems.push(format!(
                            "session {session}: the events after seq {after} cannot be read: {e}"
                        ));
                        break;
                    }
                }
            }
        }
        anyhow::Ok((read, problems, reads.database()))
    })?;
    if problems.is_empty() {
        println!("{database}: sound: {read} events read back");
        return Ok(true);
    }
    println!("{database}: damaged");
    for problem in &problems {
        println!("  {problem}");
    }
    println!("{read} events read back");
    Ok(false)
}
