//! OpenTelemetry for mull, with the GenAI semantic conventions.
//!
//! Two ways out, one span shape built one way: the log holds every turn, step and tool call
//! with its time, so spans are folded from events ([`spans::SessionSpans`]), one envelope at a
//! time, whether the envelopes come as they are appended or from the log.
//! - **Live** ([`LiveExport`]): a `tracing` layer that receives each envelope the engine
//!   appends, folds it, and sends each span over OTLP once no later event can change it.
//! - **From the log** ([`export_log`]): any past session re-exported with its original
//!   timestamps; a session run without any collector can be looked at in one later.
//!
//! Both send OTLP over HTTP to the `--otlp URL` the binary was given or to what the standard
//! `OTEL_EXPORTER_OTLP_*` variables name ([`OtlpConfig`]). Message content (tool arguments and
//! results, answers) is left out unless asked for ([`config::CONTENT_VARIABLE`]).
//!
//! The names are those of `semantic-conventions-genai` v0.1.0, or the older ones on request
//! ([`Conventions`]). A re-export also sends the `gen_ai.client.*` metrics of every model call
//! ([`metrics`]), measured from the log's timestamps. Decisions are on the tool spans: a blocked
//! or denied call has an error status saying so, and an approved one says who answered.
//!
//! ```no_run
//! use mull_otel::{export_log, Conventions, OtlpConfig, SpanOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let reader = mull_store::LogReader::open("mull.db")?;
//! let options = SpanOptions::new(false, Conventions::Current);
//! let report = export_log(&reader, None, &OtlpConfig::to("http://127.0.0.1:4318"), options)?;
//! println!("{} spans, {} model calls measured", report.spans, report.model_calls);
//! # Ok(())
//! # }
//! ```

pub mod config;
pub mod conventions;
mod error;
pub mod export;
pub mod live;
pub mod metrics;
pub mod spans;

pub use config::OtlpConfig;
pub use conventions::Conventions;
pub use error::OtelError;
pub use export::{export_log, export_spans, export_spans_named, log_spans, log_telemetry};
pub use export::{ExportReport, LogTelemetry};
pub use live::LiveExport;
pub use metrics::export_metrics;
pub use spans::{AttrValue, Inference, Kind, LogSpan, SessionSpans, SpanEvent, SpanOptions};
