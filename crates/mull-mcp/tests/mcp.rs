//! MCP servers' tools in real turns, against a real MCP server (the official Python SDK) over
//! stdio and streamable HTTP: where they join the merge, a call as a tool call like any other,
//! failures as tool errors naming the server, and a replay that never calls the server.

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mull_core::{
    DecisionAction, Envelope, Event, LanguageModel, ToolSpec, TurnConfigRecord, UIMessage,
};
use mull_engine::replay::{reexecute, Recording, ReplayOptions};
use mull_engine::{
    Agent, FnTool, HookResult, OutcomeStatus, Session, SessionOptions, ToolCallResultContext,
    ToolError, ToolSet, ToolSource, TurnOptions,
};
use mull_mcp::{McpServer, McpTransport};
use mull_providers::replay::ReplayModel;
use mull_providers::scripted::ScriptedModel;
use mull_store::{Log, LogReader};
use serde_json::{json, Value};

/// What `after_tool_call` saw: (tool, dynamic, success, output, error, duration_ms).
type Seen = (String, bool, bool, Option<Value>, Option<String>, u64);

struct McpAgent {
    model: ScriptedModel,
    servers: Vec<Arc<dyn ToolSource>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

#[async_trait]
impl Agent for McpAgent {
    fn name(&self) -> &str {
        "mcp-agent"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Q {
            #[allow(dead_code)]
            q: String,
        }
        let search = FnTool::new("search", "Searches.", |_: Q, _| async move {
            Ok::<Value, ToolError>(json!("found"))
        });
        ToolSet::new().with(search.shared())
    }
    fn mcp_servers(&self) -> Vec<Arc<dyn ToolSource>> {
        self.servers.clone()
    }
    async fn after_tool_call(&self, ctx: &ToolCallResultContext) -> HookResult<()> {
        self.seen.lock().unwrap().push((
            ctx.tool_name.clone(),
            ctx.dynamic,
            ctx.success,
            ctx.output.clone(),
            ctx.error.clone(),
            ctx.duration_ms,
        ));
        Ok(())
    }
}

struct Env {
    dir: tempfile::TempDir,
    log: Log,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path().join("mull.db")).unwrap();
        Env { dir, log }
    }

    fn call_log(&self) -> std::path::PathBuf {
        self.dir.path().join("calls.jsonl")
    }

    async fn events(&self) -> Vec<Envelope> {
        self.log.flush().await.unwrap();
        LogReader::open(self.dir.path().join("mull.db"))
            .unwrap()
            .session_page("s1", 0, 10_000)
            .unwrap()
    }

    async fn configured(&self) -> Vec<TurnConfigRecord> {
        self.events()
            .await
            .into_iter()
            .filter_map(|e| match e.event {
                Event::TurnConfigured { config } => Some(*config),
                _ => None,
            })
            .collect()
    }

    /// (tool, success, output, error) of every tool_call_finished event.
    async fn finished(&self) -> Vec<(String, bool, Option<Value>, Option<String>)> {
        self.events()
            .await
            .into_iter()
            .filter_map(|e| match e.event {
                Event::ToolCallFinished {
                    tool,
                    success,
                    output,
                    error,
                    ..
                } => Some((tool, success, output, error)),
                _ => None,
            })
            .collect()
    }
}

fn stdio_server(python: &Path, call_log: &Path) -> McpServer {
    McpServer::new(
        "test",
        McpTransport::stdio(python.display().to_string())
            .arg(support::server_script().display().to_string())
            .env("MCP_CALL_LOG", call_log.display().to_string()),
    )
    .unwrap()
}

async fn run_turn(
    log: &Log,
    agent: Arc<McpAgent>,
    options: SessionOptions,
    turn: TurnOptions,
) -> OutcomeStatus {
    let session = Session::open(log, agent, options).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(120),
        session.save_messages(vec![UIMessage::user("u1", "go")], turn),
    )
    .await
    .expect("the turn ends")
    .unwrap()
    .status
}

fn agent(model: ScriptedModel, servers: Vec<Arc<dyn ToolSource>>) -> Arc<McpAgent> {
    Arc::new(McpAgent {
        model,
        servers,
        seen: Arc::default(),
    })
}

fn text_result(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

#[tokio::test]
async fn stdio_tools_join_the_merge_and_are_called_like_any_tool() {
    let Some(python) = support::python() else {
        return;
    };
    let env = Env::new();
    let server = stdio_server(&python, &env.call_log());
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.tool_call("c1", "tool_test_add", json!({"a": 2, "b": 3}))
                .tool_call("c2", "tool_test_add", json!({"a": "two"}))
                .tool_call("c3", "tool_test_sleep", json!({"seconds": 0.2}))
        })
        .step(|s| s.text("5"))
        .build();
    let agent = agent(model.clone(), vec![server.clone().shared()]);
    let client = ToolSpec {
        name: "pick".into(),
        description: "Asks the user.".into(),
        input_schema: Arc::new(json!({"type": "object"})),
    };
    let turn = TurnOptions {
        client_tools: vec![client],
        ..TurnOptions::default()
    };
    let status = run_turn(&env.log, agent.clone(), SessionOptions::new("s1"), turn).await;
    assert_eq!(status, OutcomeStatus::Completed);

    // Agent tools, then the MCP server's (in the order it lists them), then the client's.
    let configured = env.configured().await;
    assert_eq!(
        configured[0].tool_names,
        [
            "search",
            "tool_test_echo",
            "tool_test_add",
            "tool_test_fail",
            "tool_test_sleep",
            "tool_test_crash",
            "pick"
        ]
    );
    assert!(configured[0].tool_problems.is_empty());
    // The model is offered the server's own schema.
    let add = model.requests()[0]
        .tools
        .iter()
        .find(|t| t.name == "tool_test_add")
        .cloned()
        .unwrap();
    assert_eq!(add.description, "Adds two integers.");
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));

    // The valid call ran on the server; the invalid one was stopped by the schema first.
    let events = env.events().await;
    let decisions: Vec<DecisionAction> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolDecided { action, .. } => Some(*action),
            _ => None,
        })
        .collect();
    assert_eq!(
        decisions,
        [
            DecisionAction::Allow,
            DecisionAction::Invalid,
            DecisionAction::Allow
        ]
    );
    let finished = env.finished().await;
    assert_eq!(finished[0].0, "tool_test_add");
    assert!(finished[0].1);
    let output = finished[0].2.clone().unwrap();
    assert_eq!(output["content"], json!([text_result("5")]));
    assert_eq!(output["structuredContent"], json!({"result": 5}));
    assert!(!finished[1].1);
    assert!(finished[1].3.as_deref().unwrap().contains("tool_test_add"));
    let calls = support::calls(&env.call_log());
    assert_eq!(
        calls,
        [
            json!({"tool": "add", "arguments": {"a": 2, "b": 3}}),
            json!({"tool": "sleep", "arguments": {"seconds": 0.2}})
        ]
    );

    // Hooks see a dynamic tool, with its duration.
    let seen = agent.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].0.as_str(), seen[0].1, seen[0].2),
        ("tool_test_add", true, true)
    );
    assert_eq!(
        (seen[1].0.as_str(), seen[1].1, seen[1].2),
        ("tool_test_sleep", true, true)
    );
    assert!(seen[1].5 >= 150, "the sleep took {} ms", seen[1].5);
    // The log records each call as dynamic: the step's record reads its calls from there.
    let dynamic_in_log: Vec<bool> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallStarted {
                step: 0, dynamic, ..
            } => Some(*dynamic),
            _ => None,
        })
        .collect();
    assert_eq!(dynamic_in_log, vec![true, true, true]);
    server.close().await;
}

#[tokio::test]
async fn http_tools_are_called_over_streamable_http_on_a_session() {
    let Some(python) = support::python() else {
        return;
    };
    let env = Env::new();
    let http = support::HttpServer::start(&python, &env.call_log()).await;
    let server = McpServer::new("remote-box", McpTransport::http(http.url.clone())).unwrap();
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "tool_remotebox_echo", json!({"text": "over http"})))
        .step(|s| s.text("done"))
        .build();
    let agent = agent(model, Vec::new());
    // The session lists the server this time, not the agent.
    let options = SessionOptions::deterministic("s1").with_mcp_server(server.clone().shared());
    let status = run_turn(&env.log, agent.clone(), options, TurnOptions::default()).await;
    assert_eq!(status, OutcomeStatus::Completed);
    let configured = env.configured().await;
    assert_eq!(configured[0].tool_names[0], "search");
    assert!(
        configured[0]
            .tool_names
            .contains(&"tool_remotebox_echo".to_owned()),
        "{:?}",
        configured[0]
    );
    let finished = env.finished().await;
    assert_eq!(finished.len(), 1);
    assert!(finished[0].1, "{finished:?}");
    assert_eq!(
        finished[0].2.as_ref().unwrap()["content"],
        json!([text_result("over http")])
    );
    assert_eq!(
        support::calls(&env.call_log()),
        [json!({"tool": "echo", "arguments": {"text": "over http"}})]
    );
    server.close().await;
    http.stop().await;
}

#[tokio::test]
async fn a_failing_server_gives_tool_errors_naming_it_and_the_turn_goes_on() {
    let Some(python) = support::python() else {
        return;
    };
    let env = Env::new();
    let server = stdio_server(&python, &env.call_log())
        .with_timeouts(Duration::from_secs(60), Duration::from_secs(5));
    // The call timeout leaves a loaded machine's Python server room to answer the other calls;
    // the sleeping call outlives it by far. isError, a call that outlives the call timeout, a crash, then a call that finds the
    // server gone and starts it again.
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.tool_call("c1", "tool_test_fail", json!({"reason": "disk on fire"}))
                .tool_call("c2", "tool_test_sleep", json!({"seconds": 60}))
                .tool_call("c3", "tool_test_crash", json!({}))
                .tool_call("c4", "tool_test_echo", json!({"text": "back"}))
        })
        .step(|s| s.text("recovered"))
        .build();
    let agent = agent(model, vec![server.clone().shared()]);
    let status = run_turn(
        &env.log,
        agent.clone(),
        SessionOptions::deterministic("s1"),
        TurnOptions::default(),
    )
    .await;
    assert_eq!(status, OutcomeStatus::Completed);

    let finished = env.finished().await;
    let errors: Vec<String> = finished
        .iter()
        .take(3)
        .map(|f| f.3.clone().unwrap_or_default())
        .collect();
    assert!(
        errors[0].starts_with("MCP server \"test\": tool \"fail\" failed: ")
            && errors[0].contains("disk on fire"),
        "{}",
        errors[0]
    );
    assert_eq!(
        errors[1],
        "MCP server \"test\" did not answer tool \"sleep\" within 5000 ms"
    );
    assert!(
        errors[2].starts_with("MCP server \"test\" failed while running tool \"crash\""),
        "{}",
        errors[2]
    );
    assert!(
        finished[3].1,
        "the server was started again: {:?}",
        finished[3]
    );
    let seen = agent.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|s| s.2).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    server.close().await;
}

#[tokio::test]
async fn a_server_that_cannot_start_is_recorded_and_offers_nothing() {
    let Some(python) = support::python() else {
        return;
    };
    let env = Env::new();
    let missing = McpServer::new("ghost", McpTransport::stdio("/nonexistent/mcp-server")).unwrap();
    let dies = McpServer::new(
        "quitter",
        McpTransport::stdio(python.display().to_string())
            .arg("-c")
            .arg("import sys; print('no config here', file=sys.stderr); sys.exit(2)"),
    )
    .unwrap();
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "tool_ghost_echo", json!({"text": "hi"})))
        .step(|s| s.text("no tools"))
        .build();
    let agent = agent(model, vec![missing.shared(), dies.shared()]);
    let status = run_turn(
        &env.log,
        agent,
        SessionOptions::deterministic("s1"),
        TurnOptions::default(),
    )
    .await;
    assert_eq!(status, OutcomeStatus::Completed);
    let configured = env.configured().await;
    assert_eq!(configured[0].tool_names, ["search"]);
    let problems = &configured[0].tool_problems;
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with("MCP server \"ghost\" failed to start: /nonexistent/mcp-server")
            && problems[0].ends_with("none of its tools are offered"),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].starts_with("MCP server \"quitter\" failed to start")
            && problems[1].contains("no config here"),
        "{}",
        problems[1]
    );
    let finished = env.finished().await;
    assert!(finished[0]
        .3
        .as_deref()
        .unwrap()
        .contains("unavailable tool \"tool_ghost_echo\""));
}

#[tokio::test]
async fn a_replay_serves_mcp_calls_from_the_log_and_never_calls_the_server() {
    let Some(python) = support::python() else {
        return;
    };
    let env = Env::new();
    let server = stdio_server(&python, &env.call_log());
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "tool_test_echo", json!({"text": "once"})))
        .step(|s| s.text("echoed"))
        .build();
    let recorded = agent(model, vec![server.clone().shared()]);
    let status = run_turn(
        &env.log,
        recorded.clone(),
        SessionOptions::deterministic("s1"),
        TurnOptions::default(),
    )
    .await;
    assert_eq!(status, OutcomeStatus::Completed);
    assert_eq!(support::calls(&env.call_log()).len(), 1);

    env.log.flush().await.unwrap();
    let recording = Recording::read(
        &LogReader::open(env.dir.path().join("mull.db")).unwrap(),
        "s1",
    )
    .unwrap();
    let replay_model = ReplayModel::from_envelopes(recording.envelopes().to_vec()).unwrap();
    let replay_log = Log::open(env.dir.path().join("replayed.db")).unwrap();
    let again = agent(
        ScriptedModel::builder("scripted-1").build(),
        vec![server.clone().shared()],
    );
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        reexecute(
            &replay_log,
            again.clone(),
            Arc::new(replay_model),
            &recording,
            ReplayOptions::default(),
        ),
    )
    .await
    .expect("the replay ends")
    .unwrap();
    assert!(report.divergence.is_none(), "{:?}", report.divergence);
    // The hook saw the recorded result; the server saw no second call.
    let seen = again.seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].3.as_ref().unwrap()["content"],
        json!([text_result("once")])
    );
    assert_eq!(support::calls(&env.call_log()).len(), 1);
    server.close().await;
}
