//! A log given to a command by its path or URL: [`open_log`] opens either backend through the
//! read contract, which every reader takes (dashboard, replay, diff, fork, backtest, stats,
//! the OTLP re-export).

use std::path::Path;

use anyhow::{Context, Result};
use mull_store::{LogReader, ReadLog};
use mull_store_pg::PgReader;

/// `db` as a PostgreSQL URL, when it is one.
pub fn url(db: &Path) -> Option<&str> {
    db.to_str().filter(|db| mull_store_pg::is_postgres_url(db))
}

/// A runtime on this thread, for the async clients a command drives to the end.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime")
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
