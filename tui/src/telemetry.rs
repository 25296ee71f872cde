//! The binary's `tracing` subscriber: what `RUST_LOG` asks for, human-readable on standard
//! error, each span (`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}` and their
//! `gen_ai.*` fields) printed when it closes. Nothing is installed when `RUST_LOG` is unset, so
//! the dashboard's screen and piped output stay clean.

use anyhow::{Context, Result};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::EnvFilter;

/// Installs the subscriber when `RUST_LOG` is set.
pub fn init() -> Result<()> {
    if std::env::var("RUST_LOG").map_or(true, |v| v.is_empty()) {
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(EnvFilter::from_default_env())
        .with_span_events(FmtSpan::CLOSE)
        .try_init()
        .map_err(|e| anyhow::anyhow!(e))
        .context("installing the tracing subscriber")
}
