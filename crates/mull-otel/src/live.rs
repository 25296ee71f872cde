//! Live export: the events a session appends, folded as they are appended by the same
//! [`SessionSpans`] fold a re-export runs over the log, and each span sent over OTLP in batches
//! from a background thread as soon as no later event can change it, so a turn never waits on
//! the collector. Live and re-exported spans are one span shape built one way.
//!
//! The engine hands each envelope it appends to `tracing` ([`mull_core::appended`]): a layer is
//! how a process already opts into telemetry, and nothing is copied unless a layer asks for
//! the target. The engine's own `tracing` spans stay what `RUST_LOG` prints; they are not
//! exported.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use mull_core::appended::{with_current, TRACE_TARGET as APPENDED_TARGET};
use mull_core::Envelope;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanExporter, SpanProcessor};
use tracing::field::{Field, Visit};
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::{resource, OtlpConfig};
use crate::conventions::Conventions;
use crate::error::OtelError;
use crate::export::{scope, span_data};
use crate::spans::{LogSpan, SessionSpans, SpanOptions};

/// A running live export. Dropping it (or [`LiveExport::shutdown`]) sends what is queued.
#[derive(Debug)]
pub struct LiveExport {
    shared: Arc<Shared>,
    endpoint: String,
}

/// What the layer and the export share: the open folds, one per session seen, and the batch
/// processor their closed spans go to.
struct Shared {
    processor: BatchSpanProcessor,
    names: Conventions,
    scope: InstrumentationScope,
    sessions: Mutex<HashMap<String, SessionSpans>>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("names", &self.names)
            .field("sessions", &self.sessions().len())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn sessions(&self) -> MutexGuard<'_, HashMap<String, SessionSpans>> {
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Folds one appended envelope into its session's spans and sends the spans it settled.
    fn apply(&self, env: &Envelope, content: bool) {
        let closed = {
            let mut sessions = self.sessions();
            let fold = sessions.entry(env.session_id.clone()).or_insert_with(|| {
                SessionSpans::new(
                    &env.session_id,
                    SpanOptions::new(content, Conventions::Current),
                )
            });
            fold.apply(env);
            fold.take_closed()
        };
        self.send(&closed);
    }

    fn send(&self, spans: &[LogSpan]) {
        for span in spans {
            self.processor
                .on_end(span_data(span, &self.scope, self.names));
        }
    }
}

impl LiveExport {
    /// Builds the exporter and its batch processor. Call it outside an async runtime (the
    /// exporter's HTTP client is a blocking one, owned by the processor's thread).
    pub fn start(config: &OtlpConfig) -> Result<LiveExport, OtelError> {
        LiveExport::start_named(config, Conventions::from_env())
    }

    /// [`LiveExport::start`], with the attribute names of `names`.
    pub fn start_named(config: &OtlpConfig, names: Conventions) -> Result<LiveExport, OtelError> {
        let mut exporter = config.exporter()?;
        exporter.set_resource(&resource());
        let processor = BatchSpanProcessor::builder(exporter).build();
        Ok(LiveExport {
            shared: Arc::new(Shared {
                processor,
                names,
                scope: scope(),
                sessions: Mutex::new(HashMap::new()),
            }),
            endpoint: config.describe(),
        })
    }

    /// Where spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The layer to add to a `tracing` subscriber: it receives the envelopes the engine
    /// appends (and nothing else).
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync + 'static>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        Appended {
            shared: Arc::clone(&self.shared),
        }
        .with_filter(Targets::new().with_target(APPENDED_TARGET, Level::TRACE))
        .boxed()
    }

    /// Ends the turns still open (as a re-export ends a turn its log never finished), sends
    /// every span still queued and stops the exporter, reporting a failure.
    pub fn shutdown(self) -> Result<(), OtelError> {
        let open: Vec<SessionSpans> = self.shared.sessions().drain().map(|(_, f)| f).collect();
        for fold in open {
            self.shared.send(&fold.finish());
        }
        self.shared
            .processor
            .shutdown()
            .map_err(|e| OtelError::Send {
                endpoint: self.endpoint.clone(),
                message: e.to_string(),
            })
    }
}

/// The layer: each envelope the engine appends, folded.
struct Appended {
    shared: Arc<Shared>,
}

impl<S: tracing::Subscriber> Layer<S> for Appended {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != APPENDED_TARGET {
            return;
        }
        let mut content = Content(false);
        event.record(&mut content);
        with_current(|env| {
            if let Some(env) = env {
                self.shared.apply(env, content.0);
            }
        });
    }
}

/// The `content` field of an appended-envelope event.
struct Content(bool);

impl Visit for Content {
    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "content" {
            self.0 = value;
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn fmt::Debug) {}
}
