//! The GenAI client metrics of the model calls in the log: operation duration, time to first
//! chunk, time per output chunk and token usage, as the GenAI semantic conventions define them.
//!
//! Every value comes from the log's own timestamps and usage (the [`Inference`]s the span fold
//! collects), never from a clock read while exporting, so a session re-exported a year later
//! carries the same measurements it would have had live. They are recorded into an
//! OpenTelemetry meter and pushed once over OTLP/HTTP (`…/v1/metrics`) as delta histograms.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};

use crate::config::{resource, OtlpConfig};
use crate::conventions::Conventions;
use crate::error::OtelError;
use crate::spans::Inference;

/// Bucket boundaries the conventions advise for durations, in seconds.
const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Bucket boundaries the conventions advise for the time between output chunks, in seconds.
const CHUNK_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// Bucket boundaries the conventions advise for token counts.
const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// The metric names, as the conventions in force spell them.
pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
pub const TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
pub const TIME_PER_OUTPUT_CHUNK: &str = "gen_ai.client.operation.time_per_output_chunk";
pub const INPUT_TOKENS: &str = "gen_ai.client.inference.operation.input_tokens";
pub const OUTPUT_TOKENS: &str = "gen_ai.client.inference.operation.output_tokens";
/// The single token histogram of the conventions before v0.1.0, split by `gen_ai.token.type`.
pub const LEGACY_TOKEN_USAGE: &str = "gen_ai.client.token.usage";

/// Sends the metrics of `calls` to the OTLP endpoint of `config` and waits until they are
/// delivered. Blocking: call it outside an async runtime. Nothing is sent for no calls.
pub fn export_metrics(
    config: &OtlpConfig,
    calls: &[Inference],
    names: Conventions,
) -> Result<(), OtelError> {
    if calls.is_empty() {
        return Ok(());
    }
    let exporter = config.metric_exporter(Temporality::Delta)?;
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter).build())
        .with_resource(resource())
        .build();
    record(&provider, calls, names);
    let sent = provider.force_flush();
    let _ = provider.shutdown();
    sent.map_err(|e| OtelError::Send {
        endpoint: config.describe_metrics(),
        message: e.to_string(),
    })
}

/// Records every call's measurements into `provider`'s `mull` meter.
fn record(provider: &SdkMeterProvider, calls: &[Inference], names: Conventions) {
    let meter = provider.meter("mull");
    let duration = meter
        .f64_histogram(OPERATION_DURATION)
        .with_unit("s")
        .with_description("GenAI operation duration.")
        .with_boundaries(DURATION_BUCKETS.to_vec())
        .build();
    let first_chunk = meter
        .f64_histogram(TIME_TO_FIRST_CHUNK)
        .with_unit("s")
        .with_description("Time from the request to the first chunk of the response stream.")
        .with_boundaries(DURATION_BUCKETS.to_vec())
        .build();
    let per_chunk = meter
        .f64_histogram(TIME_PER_OUTPUT_CHUNK)
        .with_unit("s")
        .with_description("Time between output chunks after the first.")
        .with_boundaries(CHUNK_BUCKETS.to_vec())
        .build();
    let token_histogram = |name: &'static str, what: &'static str| {
        meter
            .u64_histogram(name)
            .with_unit("{token}")
            .with_description(what)
            .with_boundaries(TOKEN_BUCKETS.to_vec())
            .build()
    };
    let (input, output) = if names.single_token_histogram() {
        let usage = token_histogram(
            LEGACY_TOKEN_USAGE,
            "Number of input and output tokens used.",
        );
        (usage.clone(), usage)
    } else {
        (
            token_histogram(INPUT_TOKENS, "Input tokens per inference operation."),
            token_histogram(OUTPUT_TOKENS, "Output tokens per inference operation."),
        )
    };
    for call in calls {
        let common = attributes(call);
        let mut with_error = common.clone();
        if let Some(error) = &call.error_type {
            with_error.push(KeyValue::new("error.type", error.clone()));
        }
        duration.record(call.duration_s, &with_error);
        if let Some(first) = call.time_to_first_chunk_s {
            first_chunk.record(first, &common);
        }
        for gap in &call.time_per_output_chunk_s {
            per_chunk.record(*gap, &common);
        }
        let typed = |kind: &'static str| {
            let mut kv = with_error.clone();
            if names.single_token_histogram() {
                kv.push(KeyValue::new("gen_ai.token.type", kind));
            }
            kv
        };
        if let Some(n) = call.input_tokens {
            input.record(n, &typed("input"));
        }
        if let Some(n) = call.output_tokens {
            output.record(n, &typed("output"));
        }
    }
}

/// The attributes every GenAI client metric carries, for what the log knows of the call.
fn attributes(call: &Inference) -> Vec<KeyValue> {
    let mut kv = vec![KeyValue::new("gen_ai.operation.name", "chat")];
    let optional = [
        ("gen_ai.provider.name", &call.provider),
        ("gen_ai.request.model", &call.request_model),
        ("gen_ai.response.model", &call.response_model),
        ("server.address", &call.server_address),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            kv.push(KeyValue::new(key, value.clone()));
        }
    }
    kv
}
