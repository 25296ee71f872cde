//! The readers of a PostgreSQL log: `mull export` and `mull stats` read it directly through
//! `mull-store-pg`; the readers built on the SQLite log (dashboard, replay, diff, fork points,
//! backtest) read a local mirror of it ([`Local`]), so each of them has one implementation.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use mull::store::{CostLedger, SessionState};
use mull_store_pg::{Mirror, Reads};

use super::stats::{price_table, Tally};

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

/// Prints the counts of the log, as `mull stats` does for a SQLite file.
pub fn stats(url: &str, prices: Option<&Path>) -> Result<()> {
    let prices = price_table(prices)?;
    let report = runtime()?.block_on(async {
        let reads = Reads::open(url)
            .await
            .context("opening the PostgreSQL log")?;
        let sessions = reads.sessions().await?;
        let mut tally = Tally::new(sessions.len());
        for session in &sessions {
            let mut ledger = CostLedger::new();
            let mut state = SessionState::new(session.session_id.as_str());
            loop {
                let page = reads
                    .session_page(&session.session_id, state.last_seq, PAGE)
                    .await?;
                for env in &page {
                    ledger.apply(env);
                    state.apply(env);
                    tally.event(env.kind());
                }
                if page.len() < PAGE {
                    break;
                }
            }
            tally.cost.add(&ledger.totals(&prices));
            for turn in &state.turns {
                tally.turn(turn);
            }
        }
        anyhow::Ok(tally.render())
    })?;
    print!("{report}");
    Ok(())
}

/// A log given to a command, where the SQLite log's readers can read it: the file itself, or
/// for a `postgres://` URL a local mirror of the database (see `mull_store_pg::Mirror`), thrown
/// away when this is dropped.
pub struct Local {
    path: PathBuf,
    mirror: Option<Mirrored>,
}

/// A mirror and what keeps it: its directory, and the runtime its reads run on (or the thread
/// that keeps it caught up).
enum Mirrored {
    Once {
        runtime: Box<tokio::runtime::Runtime>,
        mirror: Option<Box<Mirror>>,
        _dir: tempfile::TempDir,
    },
    Following {
        stop: Option<std::sync::mpsc::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
        _dir: tempfile::TempDir,
    },
}

/// A PostgreSQL log copied into a new SQLite file as it is now.
fn mirror_now(url: &str) -> Result<(tempfile::TempDir, PathBuf, tokio::runtime::Runtime, Mirror)> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let path = dir.path().join("mirror.db");
    let runtime = runtime()?;
    let mirror = runtime.block_on(async {
        let mut mirror = Mirror::open(url, &path)
            .await
            .context("opening the PostgreSQL log")?;
        mirror
            .catch_up()
            .await
            .context("reading the PostgreSQL log")?;
        anyhow::Ok(mirror)
    })?;
    Ok((dir, path, runtime, mirror))
}

impl Local {
    /// `db` as it is when it is a file; a PostgreSQL log copied as it is now.
    pub fn open(db: &Path) -> Result<Local> {
        let Some(url) = url(db) else {
            return Ok(Local {
                path: db.to_owned(),
                mirror: None,
            });
        };
        let (dir, path, runtime, mirror) = mirror_now(url)?;
        Ok(Local {
            path,
            mirror: Some(Mirrored::Once {
                runtime: Box::new(runtime),
                mirror: Some(Box::new(mirror)),
                _dir: dir,
            }),
        })
    }

    /// Like [`Local::open`], and a PostgreSQL log's mirror is then kept caught up every
    /// `period` by a thread of its own, for a reader that follows the log live.
    pub fn follow(db: &Path, period: Duration) -> Result<Local> {
        let Some(url) = url(db) else {
            return Local::open(db);
        };
        let (dir, path, runtime, mut mirror) = mirror_now(url)?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("mull-pg-mirror".into())
            .spawn(move || {
                // Stops when told to, or when the dropped sender says nobody listens.
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(period)
                {
                    // A failed catch-up (the database restarting) is tried again next period:
                    // what the mirror holds stays as it was.
                    let _ = runtime.block_on(mirror.catch_up());
                }
                let _guard = runtime.enter();
                let _ = mirror.close();
            })
            .context("starting the mirror's thread")?;
        Ok(Local {
            path,
            mirror: Some(Mirrored::Following {
                stop: Some(stop),
                thread: Some(thread),
                _dir: dir,
            }),
        })
    }

    /// Where the SQLite readers read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mirror (of a PostgreSQL log opened with [`Local::open`]), for mapping its seqs back.
    pub fn mirror(&self) -> Option<&Mirror> {
        match &self.mirror {
            Some(Mirrored::Once { mirror, .. }) => mirror.as_deref(),
            _ => None,
        }
    }
}

impl Drop for Mirrored {
    fn drop(&mut self) {
        match self {
            Mirrored::Once {
                runtime, mirror, ..
            } => {
                if let Some(mirror) = mirror.take() {
                    let _guard = runtime.enter();
                    let _ = mirror.close();
                }
            }
            Mirrored::Following { stop, thread, .. } => {
                drop(stop.take());
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
        }
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
