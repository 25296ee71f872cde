//! `mull export DB --otlp URL [--session ID]`: a past session (or every session) re-exported as
//! OpenTelemetry spans with the times it ran at, and the GenAI client metrics of its model
//! calls, rebuilt from the log.

use std::path::Path;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use mull_core::Clock;
use mull_otel::{export_log, OtlpConfig, SpanOptions};

/// Sends the spans and metrics and says how many went where on standard error.
pub fn run(db: &Path, session: Option<&str>, url: &str) -> Result<()> {
    let reader = crate::cli::pg::open_log(db)?;
    let options = SpanOptions::from_env();
    let report = export_log(&*reader, session, &OtlpConfig::to(url), options)
        .with_context(|| format!("exporting {} over OTLP", db.display()))?;
    eprintln!(
        "sent {} spans of {} session{} to {}, and the metrics of {} model call{}",
        report.spans,
        report.sessions,
        if report.sessions == 1 { "" } else { "s" },
        report.endpoint,
        report.model_calls,
        if report.model_calls == 1 { "" } else { "s" },
    );
    if let Some(dated) = dated(&*reader, session)? {
        eprintln!("{dated}");
    }
    Ok(())
}

/// Where a collector will file the spans: they keep the times the log holds, which for an old
/// log — or a `--deterministic` one, whose fixed clock starts at the fixtures' epoch — is far
/// outside the "last hour" a collector's search shows first.
fn dated(reader: &dyn mull_store::ReadLog, session: Option<&str>) -> Result<Option<String>> {
    let sessions = reader.sessions().context("reading the sessions' times")?;
    let chosen = sessions
        .iter()
        .filter(|s| session.is_none_or(|id| s.session_id == id));
    let (Some(first), Some(last)) = (
        chosen.clone().map(|s| s.first_at).min(),
        chosen.map(|s| s.last_at).max(),
    ) else {
        return Ok(None);
    };
    let format = |at: DateTime<Utc>| at.format("%Y-%m-%d %H:%M:%S").to_string();
    let mut line = format!(
        "the spans keep the log's times: {} to {} UTC",
        format(first),
        format(last)
    );
    if first == fixture_epoch() {
        line.push_str(
            " (a --deterministic log: its fixed clock starts at 2025-01-01 00:00:00 UTC; \
             search the collector at that time)",
        );
    } else if Utc::now() - last > chrono::Duration::hours(1) {
        line.push_str(" (more than an hour ago: search the collector at that time)");
    }
    Ok(Some(line))
}

/// Where a deterministic log's clock starts (the fixtures' epoch).
fn fixture_epoch() -> DateTime<Utc> {
    mull_core::FixedClock::at_fixture_epoch().now()
}
