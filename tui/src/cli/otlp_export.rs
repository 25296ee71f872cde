//! `mull export DB --otlp URL [--session ID]`: a past session (or every session) re-exported as
//! OpenTelemetry spans with the times it ran at, rebuilt from the log.

use std::path::Path;

use anyhow::{Context, Result};
use mull_otel::{export_log, OtlpConfig, SpanOptions};
use mull_store::LogReader;

/// Sends the spans and says how many went where on standard error.
pub fn run(db: &Path, session: Option<&str>, url: &str) -> Result<()> {
    let reader = LogReader::open(db).with_context(|| format!("opening {}", db.display()))?;
    let options = SpanOptions {
        capture_content: mull_otel::config::content_requested(),
    };
    let report = export_log(&reader, session, &OtlpConfig::to(url), options)
        .with_context(|| format!("exporting {} over OTLP", db.display()))?;
    eprintln!(
        "sent {} spans of {} session{} to {}",
        report.spans,
        report.sessions,
        if report.sessions == 1 { "" } else { "s" },
        report.endpoint
    );
    Ok(())
}
