//! Record once, replay forever: a session is recorded through the OpenAI-compatible provider
//! against a local server, exported as a JSONL fixture, and re-executed offline (no server)
//! with the replay model, writing the same events. The recording keeps no secret: neither the
//! API key nor a secret request header reaches the database file.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use common::{serve, Reply};
use mull_core::{LanguageModel, UIMessage};
use mull_engine::replay::{reexecute, Recording, ReplayOptions};
use mull_engine::{
    Agent, HookResult, OutcomeStatus, Session, SessionOptions, Tool, ToolError, ToolExecution,
    ToolOutput, ToolSet, TurnConfig, TurnContext, TurnOptions,
};
use mull_providers::openai::{OpenAiConfig, OpenAiModel};
use mull_providers::replay::ReplayModel;
use mull_providers::Secret;
use mull_store::{export_jsonl, import_jsonl, Log, LogReader};
use serde_json::{json, Value};

const API_KEY: &str = "sk-record-test-7f3a9c21e5";
const SECRET_HEADER: &str = "tenant-secret-b81d4e";

fn sse(chunks: &[Value]) -> String {
    let mut out = String::new();
    for delta in chunks {
        let data = json!({
            "id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 1,
            "model": "local-model", "choices": [delta]
        });
        out.push_str(&format!("data: {data}\n\n"));
    }
    let usage = json!({
        "id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 1,
        "model": "local-model", "choices": [],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}
    });
    out.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    out
}

/// Step 0 calls `add`; step 1 answers with its result.
fn wire() -> Vec<String> {
    vec![
        sse(&[
            json!({"index": 0, "delta": {"role": "assistant", "content": "Adding. "}, "finish_reason": null}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_add", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2,"}}]}, "finish_reason": null}),
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " \"b\": 3}"}}]}, "finish_reason": null}),
            json!({"index": 0, "delta": {}, "finish_reason": "tool_calls"}),
        ]),
        sse(&[
            json!({"index": 0, "delta": {"role": "assistant", "content": "2 + 3 "}, "finish_reason": null}),
            json!({"index": 0, "delta": {"content": "= 5."}, "finish_reason": null}),
            json!({"index": 0, "delta": {}, "finish_reason": "stop"}),
        ]),
    ]
}

struct Add;

#[async_trait]
impl Tool for Add {
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers."
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::new(
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
        )
    }
    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let n = |k: &str| {
            input[k]
                .as_i64()
                .ok_or_else(|| format!("{k} is not an integer"))
        };
        Ok(ToolOutput::Value(json!({"sum": n("a")? + n("b")?})))
    }
}

/// An agent on the OpenAI-compatible provider, sending a secret header on every call.
struct Calculator {
    base_url: String,
}

#[async_trait]
impl Agent for Calculator {
    fn name(&self) -> &str {
        "calculator"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        let mut config = OpenAiConfig::compatible(self.base_url.clone(), "local-model");
        config.api_key = Some(Secret::new(API_KEY));
        Arc::new(OpenAiModel::new(config).unwrap())
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new().with(Arc::new(Add))
    }
    fn system_prompt(&self) -> String {
        "Use the add tool for sums.".into()
    }
    async fn before_turn(&self, _ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        let headers = BTreeMap::from([("x-tenant-secret".to_owned(), SECRET_HEADER.to_owned())]);
        Ok(Some(TurnConfig {
            headers: Some(headers),
            ..TurnConfig::default()
        }))
    }
}

fn file_contains(path: &Path, needle: &str) -> bool {
    std::fs::read(path)
        .map(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_recorded_through_openai_replays_offline_identically_and_keeps_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(Reply::Sequence(
        wire()
            .into_iter()
            .map(|body| Reply::Sse {
                pieces: vec![body.into_bytes()],
                cut: false,
            })
            .collect(),
    ))
    .await;
    let base_url = server.base_url.clone();

    // Record: real clock, random ids, a real provider over HTTP.
    let recorded_db = dir.path().join("recorded.db");
    let log = Log::open(&recorded_db).unwrap();
    let agent = Arc::new(Calculator {
        base_url: base_url.clone(),
    });
    let session = Session::open(&log, agent, SessionOptions::new("rec"))
        .await
        .unwrap();
    let outcome = session
        .save_messages(
            vec![UIMessage::user("u_1", "What is 2 + 3?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Completed, "{outcome:?}");
    drop(session);
    log.close().unwrap();
    let received: Vec<_> = server.received().into_iter().map(|r| r.headers).collect();
    assert_eq!(received.len(), 2, "two model steps");
    // The secrets were really used on the wire …
    assert_eq!(
        received[0]["authorization"].to_str().unwrap(),
        format!("Bearer {API_KEY}")
    );
    assert_eq!(
        received[0]["x-tenant-secret"].to_str().unwrap(),
        SECRET_HEADER
    );
    // … and never written: not in the database, its WAL, or the export.
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.path().join(format!("recorded.db{suffix}"));
        assert!(
            !file_contains(&file, API_KEY),
            "API key in {}",
            file.display()
        );
        assert!(
            !file_contains(&file, SECRET_HEADER),
            "secret header in {}",
            file.display()
        );
    }
    let fixture = dir.path().join("recorded.jsonl");
    let reader = LogReader::open(&recorded_db).unwrap();
    export_jsonl(
        &reader,
        Some("rec"),
        std::fs::File::create(&fixture).unwrap(),
    )
    .unwrap();
    assert!(!file_contains(&fixture, API_KEY));
    assert!(!file_contains(&fixture, SECRET_HEADER));
    let exported = std::fs::read_to_string(&fixture).unwrap();
    assert!(
        exported.contains(r#""x-tenant-secret":"[redacted]""#),
        "header names are kept"
    );

    // Replay offline: the server is gone; the agent's model would fail if it were called.
    server.stop().await;
    let fixture_db = dir.path().join("fixture.db");
    let fixture_log = Log::open(&fixture_db).unwrap();
    import_jsonl(
        std::io::BufReader::new(std::fs::File::open(&fixture).unwrap()),
        "recorded.jsonl",
        &fixture_log,
    )
    .unwrap();
    fixture_log.close().unwrap();
    let recording = Recording::read(&LogReader::open(&fixture_db).unwrap(), "rec").unwrap();
    let model = ReplayModel::from_envelopes(recording.envelopes().to_vec()).unwrap();
    let replayed = Log::open(dir.path().join("replayed.db")).unwrap();
    let report = reexecute(
        &replayed,
        Arc::new(Calculator { base_url }),
        Arc::new(model),
        &recording,
        ReplayOptions::default(),
    )
    .await
    .unwrap();
    if let Some(divergence) = &report.divergence {
        panic!("{divergence}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
    let finished = report
        .actual
        .iter()
        .find(|e| e.kind() == "tool_call_finished")
        .expect("the tool ran");
    assert_eq!(
        serde_json::to_value(&finished.event).unwrap()["output"],
        json!({"sum": 5})
    );
}
