//! Sending spans built from the log: [`log_spans`] folds sessions into [`LogSpan`]s, and
//! [`export_spans`] hands them to an OTLP exporter as finished spans with their own ids and
//! timestamps — no live tracer is involved, so a session exported a year later keeps the times
//! it ran at.

use std::borrow::Cow;
use std::time::SystemTime;

use mull_store::ReadLog;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};

use crate::config::{resource, OtlpConfig};
use crate::conventions::Conventions;
use crate::error::OtelError;
use crate::spans::{AttrValue, Inference, Kind, LogSpan, SessionSpans, SpanOptions};

/// Spans per OTLP request.
const BATCH: usize = 512;

/// What an export sent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportReport {
    /// Sessions read.
    pub sessions: usize,
    /// Spans sent.
    pub spans: usize,
    /// Model calls whose metrics were sent.
    pub model_calls: usize,
    /// Where they went.
    pub endpoint: String,
}

/// The spans of one session (`Some`, with the sub-agent sessions its tool calls ran, so its
/// traces are whole) or of every session in the log, folded from the events.
pub fn log_spans(
    reader: &dyn ReadLog,
    session: Option<&str>,
    options: SpanOptions,
) -> Result<(usize, Vec<LogSpan>), OtelError> {
    let folded = log_telemetry(reader, session, options)?;
    Ok((folded.sessions, folded.spans))
}

/// What one fold of the log gives the exporters: spans and the model calls' measurements.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LogTelemetry {
    /// Sessions read.
    pub sessions: usize,
    pub spans: Vec<LogSpan>,
    /// Every model call, for the metrics.
    pub inferences: Vec<Inference>,
}

/// [`log_spans`], with the measurements of every model call for the metrics.
pub fn log_telemetry(
    reader: &dyn ReadLog,
    session: Option<&str>,
    options: SpanOptions,
) -> Result<LogTelemetry, OtelError> {
    let mut pending: Vec<String> = match session {
        Some(id) => {
            if !reader.has_session(id)? {
                return Err(OtelError::NoSession(id.to_owned()));
            }
            vec![id.to_owned()]
        }
        None => reader
            .sessions()?
            .into_iter()
            .map(|s| s.session_id)
            .rev()
            .collect(),
    };
    let mut seen = std::collections::HashSet::new();
    let mut spans = Vec::new();
    let mut inferences = Vec::new();
    while let Some(id) = pending.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let mut fold = SessionSpans::new(&id, options);
        reader.for_each_session_event(&id, 0, &mut |env| fold.apply(&env))?;
        if session.is_some() {
            pending.extend(fold.children().iter().rev().cloned());
        }
        let (folded, calls) = fold.finish_with_inferences();
        spans.extend(folded);
        inferences.extend(calls);
    }
    Ok(LogTelemetry {
        sessions: seen.len(),
        spans,
        inferences,
    })
}

/// Re-exports the session (or every session) of `reader` to the OTLP endpoint of `config`:
/// its spans, then the GenAI client metrics of its model calls. Blocking: call it outside an
/// async runtime.
pub fn export_log(
    reader: &dyn ReadLog,
    session: Option<&str>,
    config: &OtlpConfig,
    options: SpanOptions,
) -> Result<ExportReport, OtelError> {
    let folded = log_telemetry(reader, session, options)?;
    export_spans_named(config, &folded.spans, options.conventions)?;
    crate::metrics::export_metrics(config, &folded.inferences, options.conventions)?;
    Ok(ExportReport {
        sessions: folded.sessions,
        spans: folded.spans.len(),
        model_calls: folded.inferences.len(),
        endpoint: config.describe(),
    })
}

/// Sends `spans` to the OTLP endpoint of `config`, a batch per request, and fails with the
/// exporter's reason when a request is refused or the endpoint cannot be reached. Blocking:
/// call it outside an async runtime.
pub fn export_spans(config: &OtlpConfig, spans: &[LogSpan]) -> Result<(), OtelError> {
    let names = Conventions::from_env();
    export_spans_named(config, spans, names)
}

/// [`export_spans`] with the attribute names of `names`.
pub fn export_spans_named(
    config: &OtlpConfig,
    spans: &[LogSpan],
    names: Conventions,
) -> Result<(), OtelError> {
    let mut exporter = config.exporter()?;
    exporter.set_resource(&resource());
    let scope = scope();
    for batch in spans.chunks(BATCH) {
        let data = batch.iter().map(|s| span_data(s, &scope, names)).collect();
        futures_executor::block_on(exporter.export(data)).map_err(|e| OtelError::Send {
            endpoint: config.describe(),
            message: e.to_string(),
        })?;
    }
    let _ = exporter.shutdown();
    Ok(())
}

/// The instrumentation scope every span mull sends is under.
pub(crate) fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("mull")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// A span of the fold as the exporter takes it, with the attribute names of `names`: the one
/// conversion for live and re-exported spans alike.
pub(crate) fn span_data(
    span: &LogSpan,
    scope: &InstrumentationScope,
    names: Conventions,
) -> SpanData {
    let context = SpanContext::new(
        TraceId::from_bytes(span.trace_id),
        SpanId::from_bytes(span.span_id),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    let events = span
        .events
        .iter()
        .map(|e| {
            opentelemetry::trace::Event::new(
                e.name,
                SystemTime::from(e.at),
                e.attributes.iter().map(|a| key_value(a, names)).collect(),
                0,
            )
        })
        .collect();
    SpanData {
        span_context: context,
        parent_span_id: span.parent_id.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: false,
        span_kind: match span.kind {
            Kind::Client => SpanKind::Client,
            _ => SpanKind::Internal,
        },
        name: Cow::Owned(span.name.clone()),
        start_time: SystemTime::from(span.start),
        end_time: SystemTime::from(span.end),
        attributes: span
            .attributes
            .iter()
            .map(|a| key_value(a, names))
            .collect(),
        dropped_attributes_count: 0,
        events: span_events(events),
        links: SpanLinks::default(),
        status: match &span.error {
            Some(description) => Status::error(description.clone()),
            None => Status::Unset,
        },
        instrumentation_scope: scope.clone(),
    }
}

fn span_events(events: Vec<opentelemetry::trace::Event>) -> SpanEvents {
    let mut all = SpanEvents::default();
    all.events = events;
    all
}

fn key_value((key, value): &(&'static str, AttrValue), names: Conventions) -> KeyValue {
    let value = match value {
        AttrValue::Str(s) => Value::String(s.clone().into()),
        AttrValue::Int(n) => Value::I64(*n),
        AttrValue::Float(x) => Value::F64(*x),
        AttrValue::Bool(b) => Value::Bool(*b),
        AttrValue::StrList(items) => Value::Array(Array::String(
            items.iter().cloned().map(StringValue::from).collect(),
        )),
    };
    KeyValue::new(names.name(key), value)
}
