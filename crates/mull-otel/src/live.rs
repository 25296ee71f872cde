//! Live export: the engine's `tracing` spans (`invoke_agent {agent}`, `chat {model}`,
//! `execute_tool {tool}` and their `gen_ai.*` fields) turned into OpenTelemetry spans by
//! `tracing-opentelemetry` and sent over OTLP in batches from a background thread, so a turn
//! never waits on the collector. The engine names its fields as the current GenAI conventions
//! do; the exporter renames them when the older names are asked for ([`Conventions`]), and
//! nothing but the engine's own fields is added (no `target`, code location or thread).

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Key, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::{resource, OtlpConfig};
use crate::conventions::Conventions;
use crate::OtelError;

/// The engine crate whose spans are exported; other crates' spans (HTTP clients, the exporter
/// itself) stay out, so exporting never traces its own requests.
const ENGINE_TARGET: &str = "mull_engine";

/// A running live export. Dropping it (or [`LiveExport::shutdown`]) sends what is queued.
#[derive(Debug)]
pub struct LiveExport {
    provider: SdkTracerProvider,
    endpoint: String,
}

impl LiveExport {
    /// Builds the exporter and its batch processor. Call it outside an async runtime (the
    /// exporter's HTTP client is a blocking one, owned by the processor's thread).
    pub fn start(config: &OtlpConfig) -> Result<LiveExport, OtelError> {
        LiveExport::start_named(config, Conventions::from_env())
    }

    /// [`LiveExport::start`], with the attribute names of `names`.
    pub fn start_named(config: &OtlpConfig, names: Conventions) -> Result<LiveExport, OtelError> {
        let exporter = Renamed {
            inner: config.exporter()?,
            names,
        };
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(LiveExport {
            provider,
            endpoint: config.describe(),
        })
    }

    /// Where spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The layer to add to a `tracing` subscriber: the engine's spans at INFO and above.
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync + 'static>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.provider.tracer("mull");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            // A span starts when it closes rather than when first entered, so a name recorded
            // inside it (`chat {model}` once the step's model is known) is the name sent.
            .with_context_activation(false)
            .with_filter(Targets::new().with_target(ENGINE_TARGET, Level::INFO))
            .boxed()
    }

    /// Sends every span still queued and stops the exporter, reporting a failure.
    pub fn shutdown(self) -> Result<(), OtelError> {
        self.provider.shutdown().map_err(|e| OtelError::Send {
            endpoint: self.endpoint.clone(),
            message: e.to_string(),
        })
    }
}

/// An exporter that sends the engine's spans with the attribute names of the conventions asked
/// for.
#[derive(Debug)]
struct Renamed<E> {
    inner: E,
    names: Conventions,
}

impl<E: SpanExporter> SpanExporter for Renamed<E> {
    fn export(
        &self,
        mut batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        if self.names != Conventions::Current {
            for span in &mut batch {
                for kv in &mut span.attributes {
                    let renamed = self.names.name_of(kv.key.as_str()).to_owned();
                    if renamed != kv.key.as_str() {
                        *kv = KeyValue::new(Key::new(renamed), kv.value.clone());
                    }
                }
            }
        }
        self.inner.export(batch)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
