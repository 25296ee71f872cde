//! The binary's `tracing` subscriber: what `RUST_LOG` asks for, on standard error, each span
//! (`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}` and their `gen_ai.*` fields)
//! printed when it closes; human-readable (colour only when standard error is a terminal, so
//! files and journals get plain text) or, with `--log-format json`, one JSON object per line;
//! and, with `--otlp URL` or the standard `OTEL_EXPORTER_OTLP_*` variables, the same spans sent
//! live over OTLP. Nothing is installed when neither is asked for, so the dashboard's screen and
//! piped output stay clean.

use std::io::IsTerminal;
use std::sync::OnceLock;

use anyhow::{Context, Result};
use mull::engine::SessionOptions;
use mull_otel::{LiveExport, OtlpConfig};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How `RUST_LOG` output is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people; coloured only on a terminal.
    #[default]
    Text,
    /// One JSON object per event, for log collectors.
    Json,
}

/// What [`init`] installed, for the lines that describe the process (`mull serve`'s start).
#[derive(Debug, Clone, Default)]
pub struct Installed {
    /// `RUST_LOG` output goes to standard error.
    pub logs: bool,
    /// Spans are exported live over OTLP, to this endpoint.
    pub otlp: Option<String>,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// What [`init`] installed (nothing before it ran).
pub fn installed() -> Installed {
    INSTALLED.get().cloned().unwrap_or_default()
}

/// The installed telemetry; dropping it sends the spans still queued.
pub struct Telemetry {
    live: Option<LiveExport>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            let endpoint = live.endpoint().to_owned();
            if let Err(e) = live.shutdown() {
                eprintln!("mull: the last spans for {endpoint} were not sent: {e}");
            }
        }
    }
}

/// Installs the subscriber when `RUST_LOG` is set or an OTLP endpoint is given (`otlp`, or the
/// variables).
pub fn init(otlp: Option<&str>, format: LogFormat) -> Result<Telemetry> {
    let log = !std::env::var("RUST_LOG").map_or(true, |v| v.is_empty());
    let live = OtlpConfig::requested(otlp)
        .map(|config| LiveExport::start(&config))
        .transpose()
        .context("starting the OTLP export")?;
    let _ = INSTALLED.set(Installed {
        logs: log,
        otlp: live.as_ref().map(|l| l.endpoint().to_owned()),
    });
    if !log && live.is_none() {
        return Ok(Telemetry { live });
    }
    let fmt = log.then(|| {
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_span_events(FmtSpan::CLOSE);
        match format {
            LogFormat::Text => layer
                .with_ansi(std::io::stderr().is_terminal())
                .with_filter(EnvFilter::from_default_env())
                .boxed(),
            LogFormat::Json => layer
                .json()
                .with_ansi(false)
                .with_filter(EnvFilter::from_default_env())
                .boxed(),
        }
    });
    let otel = live.as_ref().map(|l| l.layer());
    tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|e| anyhow::anyhow!(e))
        .context("installing the tracing subscriber")?;
    Ok(Telemetry { live })
}

/// A chat's session options: message content goes on the spans only when
/// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
pub fn session_options(session_id: &str) -> SessionOptions {
    let mut options = SessionOptions::new(session_id);
    options.capture_content = mull_otel::config::content_requested();
    options
}
