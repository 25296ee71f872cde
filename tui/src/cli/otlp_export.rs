//! `mull export DB --otlp URL [--session ID]`: a past session (or every session) re-exported as
//! OpenTelemetry spans with the times it ran at, and the GenAI client metrics of its model
//! calls, rebuilt from the log.

use std::path::Path;

use anyhow::{Context, Result};
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
    Ok(())
}
