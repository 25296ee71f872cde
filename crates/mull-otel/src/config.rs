//! Where spans go: the `--otlp URL` flag or the standard `OTEL_EXPORTER_OTLP_*` variables, an
//! OTLP/HTTP exporter built from them, and the resource every span is sent with.

use std::env;

use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;

use crate::error::OtelError;

/// The variable that turns message content on (tool arguments and results, answers), as the
/// GenAI instrumentations of other languages name it.
pub const CONTENT_VARIABLE: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";

/// Where and how to send spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The traces URL given on the command line: a base URL (spans go to `URL/v1/traces`, as
    /// with `OTEL_EXPORTER_OTLP_ENDPOINT`) or the full `…/v1/traces` URL. `None`: the
    /// variables decide.
    pub endpoint: Option<String>,
}

impl OtlpConfig {
    /// Export to `url` (a base URL or the full traces URL).
    pub fn to(url: &str) -> OtlpConfig {
        OtlpConfig {
            endpoint: Some(url.to_owned()),
        }
    }

    /// The configuration the flag or the environment asks for: `Some` when `--otlp` was given or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, unless
    /// `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turns exporting off.
    pub fn requested(flag: Option<&str>) -> Option<OtlpConfig> {
        if let Some(url) = flag.filter(|u| !u.trim().is_empty()) {
            return Some(OtlpConfig::to(url));
        }
        let off = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let set = var(ENDPOINT).is_some() || var(TRACES_ENDPOINT).is_some();
        (set && !off).then_some(OtlpConfig { endpoint: None })
    }

    /// Where the spans will be sent, for messages.
    pub fn describe(&self) -> String {
        match &self.endpoint {
            Some(url) => traces_url(url),
            None => var(TRACES_ENDPOINT)
                .or_else(|| var(ENDPOINT).map(|u| traces_url(&u)))
                .unwrap_or_else(|| "http://localhost:4318/v1/traces".into()),
        }
    }

    /// An OTLP/HTTP span exporter (protobuf, or JSON when the protocol variable says
    /// `http/json`); headers, timeout and compression come from the standard variables.
    pub(crate) fn exporter(&self) -> Result<opentelemetry_otlp::SpanExporter, OtelError> {
        let protocol = self.protocol()?;
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol);
        if let Some(url) = &self.endpoint {
            builder = builder.with_endpoint(traces_url(url));
        }
        builder.build().map_err(|e| OtelError::Build {
            endpoint: self.describe(),
            message: e.to_string(),
        })
    }
}

impl OtlpConfig {
    /// Where the metrics will be sent, for messages: the traces URL's `…/v1/metrics`
    /// sibling, or what the standard variables name.
    pub fn describe_metrics(&self) -> String {
        match &self.endpoint {
            Some(url) => metrics_url(url),
            None => var(METRICS_ENDPOINT)
                .or_else(|| var(ENDPOINT).map(|u| metrics_url(&u)))
                .unwrap_or_else(|| "http://localhost:4318/v1/metrics".into()),
        }
    }

    /// An OTLP/HTTP metric exporter to [`OtlpConfig::describe_metrics`], with the protocol,
    /// headers, timeout and compression the standard variables ask for.
    pub(crate) fn metric_exporter(
        &self,
        temporality: opentelemetry_sdk::metrics::Temporality,
    ) -> Result<opentelemetry_otlp::MetricExporter, OtelError> {
        let mut builder = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(self.protocol()?)
            .with_temporality(temporality);
        if let Some(url) = &self.endpoint {
            builder = builder.with_endpoint(metrics_url(url));
        }
        builder.build().map_err(|e| OtelError::Build {
            endpoint: self.describe_metrics(),
            message: e.to_string(),
        })
    }

    /// OTLP over HTTP as protobuf, or JSON when the protocol variable says `http/json`.
    fn protocol(&self) -> Result<Protocol, OtelError> {
        match var(TRACES_PROTOCOL).or_else(|| var(PROTOCOL)).as_deref() {
            None | Some("http/protobuf") => Ok(Protocol::HttpBinary),
            Some("http/json") => Ok(Protocol::HttpJson),
            Some(other) => Err(OtelError::Config(format!(
                "OTLP protocol {other:?} is not supported: mull sends OTLP over HTTP \
                 (http/protobuf or http/json, usually port 4318)"
            ))),
        }
    }
}

/// `…/v1/metrics` beside the traces URL `url` would give (a base URL gets the path added).
fn metrics_url(url: &str) -> String {
    let traces = traces_url(url);
    match traces.strip_suffix("/v1/traces") {
        Some(base) => format!("{base}/v1/metrics"),
        None => traces,
    }
}

/// The resource spans are sent with: `service.name` is `mull` unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` names one; the variables' other attributes are kept.
pub(crate) fn resource() -> Resource {
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    let builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if named {
        builder.build()
    } else {
        builder.with_service_name("mull").build()
    }
}

/// Whether `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` asks for message content.
pub fn content_requested() -> bool {
    var(CONTENT_VARIABLE).is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// `URL/v1/traces`, unless `url` already is a traces URL.
fn traces_url(url: &str) -> String {
    let url = url.trim();
    if url.trim_end_matches('/').ends_with("/v1/traces") {
        url.to_owned()
    } else {
        format!("{}/v1/traces", url.trim_end_matches('/'))
    }
}

fn var(name: &str) -> Option<String> {
    env::var(name).ok().filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_gets_the_traces_path_and_a_traces_url_is_kept() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://h:4318/v1/traces"),
            "http://h:4318/v1/traces"
        );
        assert_eq!(
            OtlpConfig::to("http://h:4318/v1/traces").describe_metrics(),
            "http://h:4318/v1/metrics"
        );
        assert_eq!(
            OtlpConfig::to("http://h:4318").describe_metrics(),
            "http://h:4318/v1/metrics"
        );
        assert_eq!(
            OtlpConfig::requested(Some("http://h:1")).map(|c| c.describe()),
            Some("http://h:1/v1/traces".to_owned())
        );
    }
}
