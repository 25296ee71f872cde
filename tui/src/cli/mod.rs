//! One module per subcommand; each is thin wiring over `mull-store` and the dashboard.

pub mod agent;
pub mod approve;
pub mod backtest;
pub mod budget;
pub mod chat;
pub mod chat_prompt;
pub mod chat_view;
pub mod check;
pub mod dash;
pub mod demo;
pub mod diff;
pub mod exit;
pub mod export;
pub mod fork;
pub mod gen_bench_log;
pub mod import;
pub mod integrity;
pub mod mcp;
pub mod otlp_export;
pub mod pg;
pub(crate) mod progress;
pub mod replay;
pub mod serve;
pub mod stats;
pub(crate) mod table;

use std::path::Path;
use std::sync::OnceLock;

use mull_store::{Durability, Log, LogOptions, StoreError};

/// The `--durability` the command line asked for, set once before any log opens.
static DURABILITY: OnceLock<Durability> = OnceLock::new();

/// Records `--durability` for [`open_log`].
pub fn set_durability(durability: Durability) {
    let _ = DURABILITY.set(durability);
}

/// Opens the SQLite log at `path` for writing, as durable as `--durability` asked.
pub fn open_log(path: &Path) -> Result<Log, StoreError> {
    Log::open_with(
        path,
        LogOptions {
            durability: DURABILITY.get().copied().unwrap_or_default(),
            ..LogOptions::default()
        },
    )
}
