//! OpenTelemetry for mull, with the GenAI semantic conventions.
//!
//! Two ways out, one span shape:
//! - **Live** ([`LiveExport`]): a `tracing` layer that sends the engine's spans over OTLP as
//!   turns run.
//! - **From the log** ([`export_log`]): any past session re-exported with its original
//!   timestamps. The log holds every turn, step and tool call with its time, so the spans are
//!   built from events ([`spans`]) rather than recorded live; a session run without any
//!   collector can be looked at in one later.
//!
//! Both send OTLP over HTTP to the `--otlp URL` the binary was given or to what the standard
//! `OTEL_EXPORTER_OTLP_*` variables name ([`OtlpConfig`]). Message content (tool arguments and
//! results, answers) is left out unless asked for ([`config::CONTENT_VARIABLE`]).

pub mod config;
pub mod export;
pub mod live;
pub mod spans;

pub use config::OtlpConfig;
pub use export::{export_log, export_spans, log_spans, ExportReport};
pub use live::LiveExport;
pub use spans::{AttrValue, Kind, LogSpan, SessionSpans, SpanEvent, SpanOptions};

/// What can go wrong configuring or sending spans.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The flag or the variables ask for something mull cannot do.
    #[error("OTLP configuration: {0}")]
    Config(String),
    /// The exporter could not be built (a malformed URL, a bad header).
    #[error("building the OTLP exporter for {endpoint}: {message}")]
    Build { endpoint: String, message: String },
    /// The collector refused the spans or could not be reached.
    #[error("sending spans to {endpoint}: {message}")]
    Send { endpoint: String, message: String },
    /// The log could not be read.
    #[error("reading the log: {0}")]
    Store(#[from] mull_store::StoreError),
    /// `--session` names no session of the log.
    #[error("the log has no session {0:?}")]
    NoSession(String),
}
