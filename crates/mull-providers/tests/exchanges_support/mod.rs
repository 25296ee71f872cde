//! The recorded-exchange suite's machinery: the file format, playback, the agent every
//! scenario runs, and the capture through a recording proxy in front of a live server.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use futures::StreamExt;
use mull_core::{
    default_context_overflow_classifier, ChatErrorClassification, Event, LanguageModel, ToolChoice,
    TurnStatus, UIMessage, UIPart,
};
use mull_engine::{
    compact_function, summarizer, Agent, ChatError, ChatErrorContext, CompactOptions, HookResult,
    PrepareStepContext, Session, SessionConfig, SessionOptions, StepConfig, Tool, ToolError,
    ToolExecution, ToolOutput, ToolSet, TurnConfig, TurnContext, TurnOptions,
};
use mull_store::{Log, LogReader};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::common::{pieces, serve, Reply, TestServer};

/// The variable naming the live server a re-capture talks to.
pub const CAPTURE_VARIABLE: &str = "MULL_CAPTURE_LLM";

/// One HTTP exchange: what mull sent and what the server answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The JSON body mull sent; absent for the providers' documented examples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    pub status: u16,
    pub content_type: String,
    /// The response body, exactly as received.
    pub body: String,
    /// Whether the connection broke after `body` instead of ending cleanly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/exchanges")
        .join(format!("{name}.jsonl"))
}

/// The exchanges of scenario `name`, in order.
pub fn load(name: &str) -> Vec<Exchange> {
    let path = path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn save(name: &str, exchanges: &[Exchange]) {
    let mut text = String::new();
    for exchange in exchanges {
        text.push_str(&serde_json::to_string(exchange).expect("serializable"));
        text.push('\n');
    }
    std::fs::write(path(name), text).expect("writing the capture");
}

/// A local server answering with the recorded responses in order, and its base URL.
pub async fn replay(exchanges: &[Exchange]) -> (TestServer, String) {
    let replies = exchanges
        .iter()
        .map(|x| {
            if x.status == 200 && x.content_type.starts_with("text/event-stream") {
                Reply::Sse {
                    pieces: pieces(&x.body, 61),
                    cut: x.cut,
                }
            } else {
                Reply::Status {
                    status: x.status,
                    headers: vec![("content-type", x.content_type.clone())],
                    body: x.body.clone(),
                }
            }
        })
        .collect();
    let server = serve(Reply::Sequence(replies)).await;
    let base_url = server.base_url.clone();
    (server, base_url)
}

/// What each scenario asks and how its turn is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Step 0 must call `add` (the small model would not choose to), step 1 answers.
    ToolTurn,
    /// Step 0 leaves the choice to the model (`tool_choice: "auto"`), step 1 answers.
    AutoToolTurn,
    /// A prompt longer than the server's context.
    Overflow,
    /// A plain answer whose stream the capture cut after its first events.
    CutStream,
    /// The documented examples' `get_weather` turn.
    Weather,
}

impl Scenario {
    /// How the scenario's model streams: the overflow capture shows the one-token probe of an
    /// empty stream, which only `on` sends (`auto` sends the whole request again instead).
    pub fn streaming(self) -> mull_providers::openai::Streaming {
        match self {
            Scenario::Overflow => mull_providers::openai::Streaming::On,
            _ => mull_providers::openai::Streaming::Auto,
        }
    }

    /// The model of a llama.cpp scenario: the captured server's endpoint, alias `local`.
    pub fn local_model(self, base_url: String) -> Arc<dyn LanguageModel> {
        let mut config = mull_providers::openai::OpenAiConfig::compatible(base_url, "local");
        config.streaming = self.streaming();
        Arc::new(mull_providers::openai::OpenAiModel::new(config).expect("model"))
    }

    pub fn prompt(self) -> &'static str {
        match self {
            Scenario::ToolTurn | Scenario::AutoToolTurn => "What is 2 + 3? Use the add tool.",
            Scenario::Overflow => {
                static LONG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
                LONG.get_or_init(|| "Tell me about the sea and the ships on it. ".repeat(700))
            }
            Scenario::CutStream => "Write a long story about a cat.",
            Scenario::Weather => "What is the weather like in Paris today?",
        }
    }
}

/// The agent of every scenario: the scenario's model, `add` or `get_weather`, the default
/// overflow classifier, and settings that keep a small local model short and repeatable.
pub struct AddAgent {
    model: Arc<dyn LanguageModel>,
    scenario: Scenario,
}

impl AddAgent {
    pub fn new(model: Arc<dyn LanguageModel>, scenario: Scenario) -> Arc<AddAgent> {
        Arc::new(AddAgent { model, scenario })
    }
}

#[async_trait]
impl Agent for AddAgent {
    fn name(&self) -> &str {
        "exchanges"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn tools(&self) -> ToolSet {
        match self.scenario {
            Scenario::Weather => ToolSet::new().with(Arc::new(GetWeather)),
            _ => ToolSet::new().with(Arc::new(Add)),
        }
    }
    fn system_prompt(&self) -> String {
        "You are a helpful assistant.".into()
    }
    fn max_retries(&self) -> u32 {
        match self.scenario {
            Scenario::CutStream => 1,
            _ => 2,
        }
    }
    async fn before_turn(&self, _ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        if self.scenario == Scenario::Weather {
            return Ok(None);
        }
        Ok(Some(TurnConfig {
            max_output_tokens: Some(24),
            temperature: Some(0.0),
            seed: Some(7),
            ..TurnConfig::default()
        }))
    }
    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        let tool_choice = match (self.scenario, ctx.step_number) {
            (Scenario::Weather, _) => return Ok(None),
            (Scenario::ToolTurn, 0) => ToolChoice::Tool {
                tool_name: "add".into(),
            },
            (Scenario::AutoToolTurn, 0) => ToolChoice::Auto,
            _ => ToolChoice::None,
        };
        Ok(Some(StepConfig {
            tool_choice: Some(tool_choice),
            ..StepConfig::default()
        }))
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        // Recovery on, so an overflow is classified; a one-message turn has nothing to compact,
        // so the summarizer is never asked.
        let never = summarizer(|_prompt: String| async { Err("nothing to summarize".into()) });
        session
            .context_overflow(true, 1)
            .on_compaction(compact_function(CompactOptions::new(never)))
    }
    fn classify_chat_error(
        &self,
        error: &ChatError,
        _ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        default_context_overflow_classifier(error.as_error_input())
    }
}

/// `add`: the sum of two integers.
pub struct Add;

#[async_trait]
impl Tool for Add {
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers a and b."
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]
        }))
    }
    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let n = |k: &str| {
            input[k]
                .as_i64()
                .ok_or_else(|| format!("`{k}` is not an integer"))
        };
        Ok(ToolOutput::Value(json!({"sum": n("a")? + n("b")?})))
    }
}

/// `get_weather`, as in the providers' documentation.
pub struct GetWeather;

#[async_trait]
impl Tool for GetWeather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Get the current weather in a given location."
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["location"]
        }))
    }
    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Value(
            json!({"location": input["location"], "temperature": 14, "unit": "celsius"}),
        ))
    }
}

/// What a turn left: its status, every event of the session, and the answer's text.
#[derive(Debug)]
pub struct Run {
    pub status: TurnStatus,
    pub events: Vec<Event>,
    pub text: String,
}

/// Runs one turn of `agent` on `prompt` into a fresh log and reads it back.
pub async fn run_turn(agent: Arc<AddAgent>, prompt: &str) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("exchanges.db");
    let log = Log::open(&db).expect("log");
    let session = Session::open(
        &log,
        agent,
        SessionOptions::new("x").with_retry_base_delay(std::time::Duration::from_millis(1)),
    )
    .await
    .expect("session");
    let outcome = session
        .save_messages(vec![UIMessage::user("u_1", prompt)], TurnOptions::default())
        .await
        .expect("turn");
    let text = outcome
        .message
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|p| match p {
            UIPart::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    drop(session);
    log.close().expect("close");
    let reader = LogReader::open(&db).expect("reader");
    let turns = reader.turns("x").expect("turns");
    let events = reader
        .session_events("x", 0)
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect();
    Run {
        status: turns.last().map(|t| t.status).expect("a turn"),
        events,
        text,
    }
}

#[derive(Clone)]
struct Proxy {
    upstream: String,
    client: reqwest::Client,
    recorded: Arc<Mutex<Vec<Exchange>>>,
    /// Requests whose answer is cut after its first events: the first `cut` requests.
    cut: Arc<AtomicUsize>,
}

/// How many SSE events a cut answer keeps.
const EVENTS_BEFORE_CUT: usize = 4;

async fn forward(State(proxy): State<Proxy>, uri: axum::http::Uri, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let root = proxy.upstream.trim_end_matches('/').trim_end_matches("/v1");
    let answer = proxy
        .client
        .post(format!("{root}{}", uri.path()))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .expect("the live server answers");
    let status = answer.status().as_u16();
    let content_type = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut text = answer.text().await.expect("the live server's body");
    let cut = status == 200
        && proxy
            .cut
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    if cut {
        let keep: usize = text
            .split_inclusive("\n\n")
            .take(EVENTS_BEFORE_CUT)
            .map(str::len)
            .sum();
        text.truncate(keep);
    }
    proxy.recorded.lock().expect("lock").push(Exchange {
        request: Some(request),
        status,
        content_type: content_type.clone(),
        body: text.clone(),
        cut,
    });
    let head = futures::stream::once(async move { Ok::<_, std::io::Error>(text.into_bytes()) });
    let body = if cut {
        // The events kept reach mull before the connection breaks, as in playback.
        Body::from_stream(head.chain(futures::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            Err(std::io::Error::other("cut by the capture"))
        })))
    } else {
        Body::from_stream(head)
    };
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(body)
        .expect("response")
}

/// Runs `scenario` through a recording proxy in front of `upstream` and saves it as `name`.
async fn capture_one(upstream: &str, name: &str, scenario: Scenario, cut: usize) -> Vec<Exchange> {
    let proxy = Proxy {
        upstream: upstream.to_owned(),
        // A fresh connection per request: the live server drops a kept-alive connection after
        // an empty-200 stream, which is not part of any answer worth recording.
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("client"),
        recorded: Arc::new(Mutex::new(Vec::new())),
        cut: Arc::new(AtomicUsize::new(cut)),
    };
    let recorded = Arc::clone(&proxy.recorded);
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base_url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let model = scenario.local_model(base_url);
    let run = run_turn(AddAgent::new(model, scenario), scenario.prompt()).await;
    task.abort();
    let exchanges = recorded.lock().expect("lock").clone();
    eprintln!("{name}: {:?}, {} exchanges", run.status, exchanges.len());
    save(name, &exchanges);
    exchanges
}

/// Re-captures every `llama-cpp-*` scenario from `upstream`.
pub async fn capture(upstream: &str) {
    capture_one(
        upstream,
        "llama-cpp-auto-tool-turn",
        Scenario::AutoToolTurn,
        0,
    )
    .await;
    let turn = capture_one(upstream, "llama-cpp-tool-turn", Scenario::ToolTurn, 0).await;
    capture_one(upstream, "llama-cpp-overflow", Scenario::Overflow, 0).await;
    capture_one(upstream, "llama-cpp-cut-stream", Scenario::CutStream, 1).await;

    // The tool turn's second step again, with the assistant's `content` as `null`.
    let mut request = turn
        .get(1)
        .and_then(|x| x.request.clone())
        .expect("the tool turn has a second step");
    if let Some(messages) = request["messages"].as_array_mut() {
        for message in messages.iter_mut().filter(|m| m["role"] == "assistant") {
            message["content"] = Value::Null;
        }
    }
    let root = upstream.trim_end_matches('/');
    let answer = reqwest::Client::new()
        .post(format!("{root}/chat/completions"))
        .json(&request)
        .send()
        .await
        .expect("the live server answers");
    let status = answer.status().as_u16();
    let content_type = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = answer.text().await.expect("body");
    save(
        "llama-cpp-null-content",
        &[Exchange {
            request: Some(request),
            status,
            content_type,
            body,
            cut: false,
        }],
    );
}
