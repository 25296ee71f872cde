//! What the OTLP tests share: the real receiver ([`receiver`]) and a session that runs a tool
//! turn on a scripted model into a fresh log.

pub mod receiver;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use mull_core::{LanguageModel, UIMessage};
use mull_engine::{
    Agent, AgentTool, Budget, Session, SessionOptions, Tool, ToolError, ToolExecution, ToolOutput,
};
use mull_engine::{HookResult, ToolCallContext, ToolCallDecision, ToolSet, TurnOptions};
use mull_providers::scripted::ScriptedModel;
use mull_store::Log;
use serde_json::{json, Value};

pub use receiver::{attr, attr_bool, attr_f64, attr_int, attr_str, named, nanos, Receiver};

/// Held by each test for its whole run: the tests take turns. `tracing` caches per span site
/// whether any subscriber wants it; a site first reached on one test's thread while another
/// test installs its scoped subscriber can be cached as unwanted, and that test's live export
/// then misses spans (seen as an empty export under load).
pub fn one_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// What an export test starts from, held for the whole test. `None` when the receiver cannot
/// start (a printed skip outside CI).
pub struct ExportTest {
    /// The real OTLP receiver.
    pub receiver: Receiver,
    /// A fresh log's path, inside `dir`.
    pub db: PathBuf,
    /// The folder, removed when the test ends.
    _dir: tempfile::TempDir,
    /// This test's turn (see [`one_test_at_a_time`]); released last.
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl ExportTest {
    pub fn start() -> Option<ExportTest> {
        let turn = one_test_at_a_time();
        let receiver = Receiver::start()?;
        let dir = tempfile::tempdir().expect("tempdir");
        Some(ExportTest {
            receiver,
            db: dir.path().join("log.db"),
            _dir: dir,
            _turn: turn,
        })
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
                .ok_or_else(|| format!("`{k}` is no integer"))
        };
        Ok(ToolOutput::Value(json!({"sum": n("a")? + n("b")?})))
    }
}

/// An agent whose model calls `add`, then answers; the first step reports a cache write the
/// way Anthropic does.
pub struct Calculator {
    model: ScriptedModel,
    /// Set: `before_tool_call` blocks every call with this reason.
    block: Option<String>,
}

impl Calculator {
    pub fn new() -> Calculator {
        let model = ScriptedModel::builder("claude-test")
            .provider("anthropic")
            .step(|s| {
                s.tool_call("call_1", "add", json!({"a": 2, "b": 3}))
                    .usage(120, 9)
                    .provider_metadata(json!({"anthropic": {"cache_creation_input_tokens": 100}}))
            })
            .step(|s| s.text("2 + 3 = 5.").usage(140, 7))
            .build();
        Calculator { model, block: None }
    }

    /// The same model, with every tool call blocked by `before_tool_call` for `reason`.
    pub fn blocking(reason: &str) -> Calculator {
        Calculator {
            block: Some(reason.to_owned()),
            ..Calculator::new()
        }
    }

    /// A model whose stream breaks with an error after a few words.
    pub fn failing() -> Calculator {
        let model = ScriptedModel::builder("claude-test")
            .provider("anthropic")
            .step(|s| s.text("Let me").error("the model broke"))
            .build();
        Calculator { model, block: None }
    }
}

#[async_trait]
impl Agent for Calculator {
    fn name(&self) -> &str {
        "calculator"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new().with(Arc::new(Add))
    }
    fn system_prompt(&self) -> String {
        "You add.".into()
    }
    async fn before_tool_call(
        &self,
        _ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        Ok(self.block.clone().map(|reason| ToolCallDecision::Block {
            reason: Some(reason),
        }))
    }
}

/// Runs one calculator turn of session `id` into the log at `db` (content captured when asked).
pub async fn run_turn(db: &Path, id: &str, capture_content: bool) {
    run_agent(db, id, Calculator::new(), capture_content).await;
}

/// Runs one turn of `agent` (whatever its outcome) as session `id` into the log at `db`.
pub async fn run_agent(db: &Path, id: &str, agent: Calculator, capture_content: bool) {
    let mut options = SessionOptions::new(id);
    options.capture_content = capture_content;
    run_one(db, Arc::new(agent), options, "What is 2 + 3?").await;
}

/// Runs one turn of `agent` as session `id` into the log at `db`, held to `budget`.
pub async fn run_budgeted(db: &Path, id: &str, agent: Calculator, budget: Budget) {
    let options = SessionOptions::new(id).with_budget(budget);
    run_one(db, Arc::new(agent), options, "What is 2 + 3?").await;
}

/// Runs one turn of `agent`, asked `question`, into the log at `db`.
async fn run_one(db: &Path, agent: Arc<dyn Agent>, options: SessionOptions, question: &str) {
    let log = Log::open(db).expect("log");
    let session = Session::open(&log, agent, options).await.expect("session");
    session
        .save_messages(
            vec![UIMessage::user("u_1", question)],
            TurnOptions::default(),
        )
        .await
        .expect("turn");
    drop(session);
    log.close().expect("close");
}

/// An agent whose model asks the calculator, as a sub-agent (`ask`), then answers.
pub struct Manager {
    model: ScriptedModel,
}

impl Manager {
    pub fn new() -> Manager {
        let model = ScriptedModel::builder("claude-test")
            .provider("anthropic")
            .step(|s| {
                s.tool_call("call_ask", "ask", json!({"prompt": "What is 2 + 3?"}))
                    .usage(90, 12)
            })
            .step(|s| s.text("The calculator says 5.").usage(110, 6))
            .build();
        Manager { model }
    }
}

#[async_trait]
impl Agent for Manager {
    fn name(&self) -> &str {
        "manager"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        let calculator = AgentTool::new("ask", "Asks the calculator.", Arc::new(Calculator::new()));
        ToolSet::new().with(calculator.shared())
    }
    fn system_prompt(&self) -> String {
        "You delegate sums.".into()
    }
}

/// Runs one manager turn (which runs one calculator turn as its sub-agent) as session `id`.
pub async fn run_manager(db: &Path, id: &str) {
    let options = SessionOptions::new(id);
    run_one(
        db,
        Arc::new(Manager::new()),
        options,
        "Ask the calculator for 2 + 3.",
    )
    .await;
}
