//! The bodies of the fuzz targets: each takes arbitrary bytes, runs one decoder of untrusted
//! input, and checks the promises that decoder makes. A broken promise panics with a message
//! saying which one, which is what a fuzzer (and a property test) reports as a failure.
//!
//! - [`event_decode`]: `Event::decode` never panics; unknown kinds come back verbatim; a known
//!   kind that does not fit is an error naming the kind; what decodes re-encodes stably.
//! - [`jsonl_import`]: `import_jsonl` never panics; a refused file names its source and line
//!   and leaves the log untouched; an accepted one round-trips export → import → export.
//! - [`SseTarget`]: the OpenAI and Anthropic clients, fed arbitrary SSE bytes by a local
//!   server, never panic; an error ends the stream and names the provider; nothing follows a
//!   `finish` part.

use std::io::Cursor;
use std::sync::Arc;

use futures::StreamExt;
use mull_core::{
    Event, EventDecodeError, LanguageModel, ModelError, ModelMessage, ModelRequest, ModelRole,
    StreamPart, EVENT_VERSION,
};
use mull_providers::anthropic::{AnthropicConfig, AnthropicModel};
use mull_providers::openai::{OpenAiConfig, OpenAiModel};
use mull_providers::Secret;
use mull_store::{export_jsonl, import_jsonl, Log, StoreError};

use crate::sse_server::SseServer;

/// Decodes `data` as `[version: u8][payload…]` with `Event::decode` and checks its promises.
pub fn event_decode(data: &[u8]) {
    let Some((&v, payload)) = data.split_first() else {
        return;
    };
    let Ok(payload) = std::str::from_utf8(payload) else {
        return;
    };
    check_event_payload(u16::from(v), payload);
}

/// The promises of `Event::decode` for one stored payload of version `v`.
pub fn check_event_payload(v: u16, payload: &str) {
    match Event::decode(v, payload) {
        Ok(Event::Unknown(raw)) => {
            let kind = raw.get("type").and_then(|t| t.as_str()).unwrap_or("");
            assert!(
                !Event::KNOWN_KINDS.contains(&kind),
                "known kind {kind:?} decoded as unknown"
            );
            let again = Event::Unknown(raw.clone()).encode();
            let reparsed: serde_json::Value =
                serde_json::from_str(&again).expect("an unknown event re-encodes as JSON");
            assert_eq!(reparsed, raw, "an unknown event must be kept verbatim");
        }
        Ok(event) => {
            let first = event.encode();
            let decoded = Event::decode(EVENT_VERSION, &first)
                .unwrap_or_else(|e| panic!("re-decoding {first} failed: {e}"));
            assert_eq!(
                decoded.kind(),
                event.kind(),
                "the kind survives a round trip"
            );
            let second = decoded.encode();
            let third = Event::decode(EVENT_VERSION, &second)
                .unwrap_or_else(|e| panic!("re-decoding {second} failed: {e}"))
                .encode();
            assert_eq!(second, third, "encoding must reach a fixed point");
        }
        Err(EventDecodeError::BadShape { kind, source }) => {
            assert!(Event::KNOWN_KINDS.contains(&kind.as_str()));
            let text = EventDecodeError::BadShape {
                kind: kind.clone(),
                source,
            }
            .to_string();
            assert!(
                text.contains(&kind),
                "a shape error must name the kind: {text}"
            );
        }
        Err(EventDecodeError::TooNew(found)) => {
            assert!(found > EVENT_VERSION && found == v);
        }
        Err(EventDecodeError::NotJson(_)) => {
            assert!(serde_json::from_str::<serde_json::Value>(payload).is_err());
        }
        Err(EventDecodeError::NoType) => {
            let raw: serde_json::Value = serde_json::from_str(payload).expect("was JSON");
            assert!(raw.get("type").and_then(|t| t.as_str()).is_none());
        }
    }
}

/// A scratch directory for one import, in memory when the machine offers it.
fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("a temporary directory")
}

/// Imports `data` as JSONL into a fresh log and checks the import's promises.
pub fn jsonl_import(data: &[u8]) {
    let dir = scratch();
    let log = Log::open(dir.path().join("in.db")).expect("a fresh log opens");
    let lines = data.split(|b| *b == b'\n').count() as u64;
    match import_jsonl(Cursor::new(data), "fuzz.jsonl", &log) {
        Ok(count) => {
            assert!(count <= lines, "{count} events from {lines} lines");
            log.flush_blocking().expect("flush after import");
            let reader = log.reader().expect("reader");
            assert_eq!(reader.max_seq().expect("max") > 0, count > 0);
            let mut first = Vec::new();
            export_jsonl(&reader, None, &mut first).expect("export");
            let other = Log::open(dir.path().join("again.db")).expect("second log opens");
            import_jsonl(Cursor::new(&first), "export.jsonl", &other)
                .unwrap_or_else(|e| panic!("re-importing an export failed: {e}"));
            other.flush_blocking().expect("flush");
            let mut second = Vec::new();
            export_jsonl(&other.reader().expect("reader"), None, &mut second).expect("export");
            assert!(
                first == second,
                "export → import → export must be byte-identical"
            );
        }
        Err(StoreError::Jsonl {
            source_name,
            line,
            message,
        }) => {
            assert_eq!(source_name, "fuzz.jsonl");
            assert!(line >= 1 && line <= lines + 1, "line {line} of {lines}");
            assert!(!message.is_empty());
            log.flush_blocking()
                .expect("the log still works after a refused import");
            let reader = log.reader().expect("reader");
            assert_eq!(
                reader.max_seq().expect("max"),
                0,
                "a refused import wrote rows"
            );
        }
        Err(other) => panic!("import failed with a non-JSONL error: {other}"),
    }
}

/// Which wire format an [`SseTarget`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI Chat Completions streaming.
    OpenAi,
    /// Anthropic Messages streaming.
    Anthropic,
}

/// A provider client pointed at a local server whose response body is the fuzz input.
pub struct SseTarget {
    server: SseServer,
    model: Arc<dyn LanguageModel>,
    provider: &'static str,
    runtime: tokio::runtime::Runtime,
}

impl SseTarget {
    /// Starts the local server and builds the client for `wire`.
    pub fn new(wire: Wire) -> SseTarget {
        let server = SseServer::start().expect("a local server starts");
        let (model, provider): (Arc<dyn LanguageModel>, _) = match wire {
            Wire::OpenAi => {
                let mut config = OpenAiConfig::openai("gpt-fuzz", Secret::new("sk-fuzz"));
                config.base_url = server.base_url.clone();
                (
                    Arc::new(OpenAiModel::new(config).expect("client")),
                    "openai",
                )
            }
            Wire::Anthropic => {
                let mut config = AnthropicConfig::new("claude-fuzz", Secret::new("sk-fuzz"));
                config.base_url = server.base_url.clone();
                (
                    Arc::new(AnthropicModel::new(config).expect("client")),
                    "anthropic",
                )
            }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        SseTarget {
            server,
            model,
            provider,
            runtime,
        }
    }

    /// Streams one response whose body is `data`; returns the parts and the ending error.
    pub fn run(&self, data: &[u8]) -> (Vec<StreamPart>, Option<ModelError>) {
        self.server.set_body(data);
        let request = ModelRequest {
            messages: vec![ModelMessage::text(ModelRole::User, "hi")],
            ..ModelRequest::default()
        };
        let (parts, error) = self.runtime.block_on(async {
            let mut stream = match self.model.stream(request).await {
                Ok(stream) => stream,
                Err(error) => return (Vec::new(), Some(error)),
            };
            let mut parts = Vec::new();
            while let Some(item) = stream.next().await {
                match item {
                    Ok(part) => parts.push(part),
                    Err(error) => {
                        assert!(stream.next().await.is_none(), "a part followed an error");
                        return (parts, Some(error));
                    }
                }
            }
            (parts, None)
        });
        self.check(&parts, error.as_ref());
        (parts, error)
    }

    fn check(&self, parts: &[StreamPart], error: Option<&ModelError>) {
        if let Some(error) = error {
            assert!(
                error.message.contains(self.provider),
                "a stream error must name the provider: {}",
                error.message
            );
        }
        let finishes = parts
            .iter()
            .filter(|p| matches!(p, StreamPart::Finish { .. }))
            .count();
        assert!(finishes <= 1, "{finishes} finish parts in one stream");
        if let Some(at) = parts
            .iter()
            .position(|p| matches!(p, StreamPart::Finish { .. }))
        {
            assert_eq!(at + 1, parts.len(), "parts after finish: {parts:?}");
        }
    }
}
