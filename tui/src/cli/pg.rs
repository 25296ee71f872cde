//! The readers of a PostgreSQL log (`mull export` and `mull stats` given a `postgres://` URL):
//! the same output as on a SQLite file, read through `mull-store-pg`.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use mull::store::{CostLedger, SessionState};
use mull_store_pg::Reads;

use super::stats::{price_table, Tally};

/// Events read per statement while folding a session.
const PAGE: usize = 4096;

/// `db` as a PostgreSQL URL, when it is one.
pub fn url(db: &Path) -> Option<&str> {
    db.to_str().filter(|db| mull_store_pg::is_postgres_url(db))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
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
