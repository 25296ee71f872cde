//! A log given to a command by its path or URL: [`open_log`] opens either backend through the
//! read contract, which every reader takes (dashboard, replay, diff, fork, backtest, stats,
//! the OTLP re-export). What only PostgreSQL has its own way of doing is here too: the JSONL
//! export of its rows and `mull check`'s read-back.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use mull_store::{LogReader, ReadLog};
use mull_store_pg::{PgReader, Reads};

/// Events read per statement while folding a session.
const PAGE: usize = 4096;

/// `db` as a PostgreSQL URL, when it is one.
pub fn url(db: &Path) -> Option<&str> {
    db.to_str().filter(|db| mull_store_pg::is_postgres_url(db))
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime")
}

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

/// Opens the log `db` names for reading through the read contract: a SQLite file, or a
/// PostgreSQL database read natively (nothing is copied).
pub fn open_log(db: &Path) -> Result<Box<dyn ReadLog>> {
    match url(db) {
        Some(url) => Ok(Box::new(
            PgReader::open(url).context("opening the PostgreSQL log")?,
        )),
        None => Ok(Box::new(
            LogReader::open(db).with_context(|| format!("opening {}", db.display()))?,
        )),
    }
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
