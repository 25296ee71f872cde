//! Extensions in process (CONFORMANCE H.35–36, B.4): dispatch order, the before_turn merge
//! rules, and isolation of failing, panicking and hanging extensions. Out-of-process
//! extensions are tested in crates/mull-extensions/tests.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mull::core::{Event, HookName, LanguageModel, StreamPart, TurnConfigRecord, UIMessage};
use mull::engine::{
    Agent, ChunkContext, ChunkSnapshot, Extension, ExtensionHook, ExtensionHost, FnTool,
    HookResult, OutcomeStatus, StepContext, StepSnapshot, ToolCallContext, ToolCallDecision,
    ToolCallResultContext, ToolCallSnapshot, ToolError, ToolResultSnapshot, ToolSet, TurnConfig,
    TurnConfigPatch, TurnContext, TurnOptions, TurnSnapshot,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::{json, Value};
use support::events::{hook_failures, HookFailure};
use support::hook_calls::HookCalls;
use support::test_log::TestLog;

/// An agent that records its hook calls into a shared list.
struct Agentish {
    model: ScriptedModel,
    calls: HookCalls,
    before_turn: Option<TurnConfig>,
}

#[async_trait]
impl Agent for Agentish {
    fn name(&self) -> &str {
        "agentish"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Q {
            q: String,
        }
        let search = FnTool::new("search", "Searches.", |i: Q, _| async move {
            Ok::<Value, ToolError>(json!({ "hits": i.q.len() }))
        });
        let shell = FnTool::new("shell", "Runs a command.", |_: Q, _| async move {
            Ok::<Value, ToolError>(json!("ran"))
        });
        ToolSet::new().with(search.shared()).with(shell.shared())
    }
    fn system_prompt(&self) -> String {
        "base".into()
    }
    async fn before_turn(&self, _ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.calls.record("agent:before_turn");
        Ok(self.before_turn.clone())
    }
    async fn before_tool_call(
        &self,
        _ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        self.calls.record("agent:before_tool_call");
        Ok(None)
    }
    async fn after_tool_call(&self, _ctx: &ToolCallResultContext) -> HookResult<()> {
        self.calls.record("agent:after_tool_call");
        Ok(())
    }
    async fn on_step_finish(&self, _ctx: &StepContext) -> HookResult<()> {
        self.calls.record("agent:on_step_finish");
        Ok(())
    }
    async fn on_chunk(&self, ctx: &ChunkContext) -> HookResult<()> {
        if matches!(ctx.chunk, StreamPart::ToolCall { .. }) {
            self.calls.record("agent:on_chunk(tool-call)");
        }
        Ok(())
    }
}

/// How a test extension behaves.
#[derive(Clone)]
enum Behaviour {
    Record,
    Patch(Value),
    Fail,
    Panic,
    Hang,
}

/// An in-process extension that records its calls (and snapshots) and behaves as told.
struct Probe {
    name: String,
    hooks: Vec<ExtensionHook>,
    calls: HookCalls,
    behaviour: Behaviour,
    seen_turns: Mutex<Vec<TurnSnapshot>>,
}

impl Probe {
    fn new(name: &str, calls: &HookCalls, behaviour: Behaviour) -> Probe {
        Probe {
            name: name.into(),
            hooks: ExtensionHook::ALL.to_vec(),
            calls: calls.clone(),
            behaviour,
            seen_turns: Mutex::new(Vec::new()),
        }
    }

    async fn act(&self, hook: &str) -> HookResult<()> {
        self.calls.record(format!("{}:{hook}", self.name));
        match self.behaviour {
            Behaviour::Fail => Err(format!("{} refuses {hook}", self.name).into()),
            Behaviour::Panic => panic!("{} panics in {hook}", self.name),
            Behaviour::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Extension for Probe {
    fn name(&self) -> &str {
        &self.name
    }
    fn subscribes(&self, hook: ExtensionHook) -> bool {
        self.hooks.contains(&hook)
    }
    fn timeout(&self, _hook: ExtensionHook) -> Duration {
        Duration::from_millis(200)
    }
    async fn before_turn(
        &self,
        snapshot: &TurnSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<Option<TurnConfigPatch>> {
        self.seen_turns.lock().unwrap().push(snapshot.clone());
        self.act("before_turn").await?;
        match &self.behaviour {
            Behaviour::Patch(v) => Ok(TurnConfigPatch::from_json(v)?),
            _ => Ok(None),
        }
    }
    async fn before_tool_call(
        &self,
        s: &ToolCallSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        assert_eq!(s.tool_name, "search");
        self.act("before_tool_call").await
    }
    async fn after_tool_call(
        &self,
        s: &ToolResultSnapshot,
        _host: &dyn ExtensionHost,
    ) -> HookResult<()> {
        assert!(s.success);
        self.act("after_tool_call").await
    }
    async fn on_step_finish(&self, _s: &StepSnapshot, _host: &dyn ExtensionHost) -> HookResult<()> {
        self.act("on_step_finish").await
    }
    async fn on_chunk(&self, s: &ChunkSnapshot, _host: &dyn ExtensionHost) -> HookResult<()> {
        if s.kind == "tool-call" {
            self.act("on_chunk(tool-call)").await?;
        }
        Ok(())
    }
}

/// The merged turn configuration of every turn in the log.
async fn turn_configured(env: &TestLog) -> Vec<TurnConfigRecord> {
    env.bare_events()
        .await
        .into_iter()
        .filter_map(|e| match e {
            Event::TurnConfigured { config } => Some(*config),
            _ => None,
        })
        .collect()
}

/// A search call, then an answer.
fn search_then_answer() -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.tool_call("call_1", "search", json!({"q": "mull"}))
                .usage(10, 2)
        })
        .step(|s| s.text("Found it.").usage(12, 3))
        .build()
}

async fn run_turn(
    env: &TestLog,
    agent: Agentish,
    extensions: Vec<Arc<dyn Extension>>,
) -> OutcomeStatus {
    let options = env.options().with_extensions(extensions);
    let session = env.open_with(&Arc::new(agent), options).await;
    let outcome = session
        .save_messages(
            vec![UIMessage::user("u1", "find mull")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    outcome.status
}

#[tokio::test]
async fn extensions_run_after_the_agent_hook_in_load_order() {
    let env = TestLog::new();
    let calls = HookCalls::default();
    let a = Arc::new(Probe::new("a", &calls, Behaviour::Record));
    let mut b = Probe::new("b", &calls, Behaviour::Record);
    b.hooks = vec![ExtensionHook::BeforeTurn, ExtensionHook::OnStepFinish];
    let agent = Agentish {
        model: search_then_answer(),
        calls: calls.clone(),
        before_turn: None,
    };
    let status = run_turn(&env, agent, vec![a, Arc::new(b)]).await;
    assert_eq!(status, OutcomeStatus::Completed);
    let calls = calls.lines();
    assert_eq!(
        calls,
        [
            "agent:before_turn",
            "a:before_turn",
            "b:before_turn",
            "agent:before_tool_call",
            "a:before_tool_call",
            "agent:after_tool_call",
            "a:after_tool_call",
            // Think's order: the tool-call chunk is observed once the call's hooks ran.
            "agent:on_chunk(tool-call)",
            "a:on_chunk(tool-call)",
            "agent:on_step_finish",
            "a:on_step_finish",
            "b:on_step_finish",
            "agent:on_step_finish",
            "a:on_step_finish",
            "b:on_step_finish",
        ]
    );
    assert!(hook_failures(&env.bare_events().await).is_empty());
}

#[tokio::test]
async fn before_turn_merges_scalars_in_load_order_and_ignores_the_rest() {
    let env = TestLog::new();
    let calls = HookCalls::default();
    let a = Arc::new(Probe::new(
        "a",
        &calls,
        Behaviour::Patch(json!({
            "system": "from a",
            "temperature": 0.5,
            "headers": {"x-a": "1"},
            "providerOptions": {"p": {"a": 1}},
            "model": "some-other-model",
            "tools": {"evil": {}},
            "stopWhen": ["has_tool_call(search)"],
            "experimental_transform": ["upper"],
            "output": {"type": "object"},
        })),
    ));
    let b = Arc::new(Probe::new(
        "b",
        &calls,
        Behaviour::Patch(json!({
            "maxSteps": 2,
            "activeTools": ["search"],
            "headers": {"x-b": "2"},
            "providerOptions": {"q": 2},
            "timeout": {"totalMs": 60000},
        })),
    ));
    let agent = Agentish {
        model: search_then_answer(),
        calls: calls.clone(),
        before_turn: Some(TurnConfig {
            system: Some("from agent".into()),
            max_steps: Some(4),
            active_tools: Some(vec!["search".into(), "shell".into()]),
            ..TurnConfig::default()
        }),
    };
    let model = agent.model.clone();
    let status = run_turn(&env, agent, vec![a.clone(), b.clone()]).await;
    assert_eq!(status, OutcomeStatus::Completed);

    // Each extension sees the turn as configured so far.
    let seen_a = a.seen_turns.lock().unwrap()[0].clone();
    assert_eq!(seen_a.system, "from agent");
    assert_eq!(
        seen_a.active_tools,
        Some(vec!["search".into(), "shell".into()])
    );
    assert_eq!(seen_a.tool_names, ["search", "shell"]);
    assert_eq!(seen_a.model_id, "scripted-1");
    assert_eq!(seen_a.message_count, 1);
    assert!(!seen_a.continuation);
    assert_eq!(b.seen_turns.lock().unwrap()[0].system, "from a");

    let configured = turn_configured(&env).await;
    assert_eq!(configured.len(), 1, "the merged result is one event");
    let c = &configured[0];
    assert_eq!(c.system.as_deref(), Some("from a"));
    assert_eq!(c.model_id, "scripted-1", "model is ignored from extensions");
    assert_eq!(c.tool_names, ["search", "shell"], "tools are ignored");
    assert_eq!(c.stop_when, ["step_count_is(2)"], "stop_when is ignored");
    assert!(c.transforms.is_empty() && c.output_schema.is_none());
    assert_eq!(c.max_steps, 2);
    assert_eq!(c.active_tools, Some(vec!["search".into()]));
    assert_eq!(c.settings.temperature, Some(0.5));
    assert_eq!(
        c.settings.headers.keys().collect::<Vec<_>>(),
        ["x-a", "x-b"],
        "headers merge key by key"
    );
    assert_eq!(
        c.settings.provider_options,
        Some(json!({"p": {"a": 1}, "q": 2}))
    );
    assert_eq!(c.timeout_ms, Some(60_000));
    assert_eq!(
        c.overrides,
        [
            "system",
            "active_tools",
            "max_steps",
            "ext:a:system",
            "ext:a:temperature",
            "ext:a:headers",
            "ext:a:provider_options",
            "ext:b:active_tools",
            "ext:b:max_steps",
            "ext:b:timeout",
            "ext:b:headers",
            "ext:b:provider_options",
        ]
    );
    // The merged settings reach the model request.
    let request = &model.requests()[0];
    assert_eq!(request.system.as_deref(), Some("from a"));
    assert_eq!(request.settings.temperature, Some(0.5));
    assert_eq!(
        request.settings.headers.get("x-b").map(String::as_str),
        Some("2")
    );
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["search"]);
}

#[tokio::test]
async fn failing_panicking_and_hanging_extensions_are_logged_and_the_turn_completes() {
    let env = TestLog::new();
    let calls = HookCalls::default();
    let mut hang = Probe::new("hang", &calls, Behaviour::Hang);
    hang.hooks = vec![ExtensionHook::BeforeTurn];
    let mut panicky = Probe::new("panicky", &calls, Behaviour::Panic);
    panicky.hooks = vec![ExtensionHook::AfterToolCall];
    let mut failing = Probe::new("failing", &calls, Behaviour::Fail);
    failing.hooks = vec![ExtensionHook::OnStepFinish];
    let after = Probe::new("after", &calls, Behaviour::Patch(json!({"seed": 7})));
    let agent = Agentish {
        model: search_then_answer(),
        calls: calls.clone(),
        before_turn: None,
    };
    let status = run_turn(
        &env,
        agent,
        vec![
            Arc::new(hang),
            Arc::new(panicky),
            Arc::new(failing),
            Arc::new(after),
        ],
    )
    .await;
    assert_eq!(status, OutcomeStatus::Completed);
    let failures = hook_failures(&env.bare_events().await);
    assert_eq!(failures.len(), 4, "{failures:#?}");
    assert_eq!(
        failures[0],
        HookFailure {
            hook: HookName::BeforeTurn,
            source: "hang".into(),
            error: "timed out after 200 ms".into(),
            panicked: false,
            timed_out: true
        }
    );
    assert_eq!(failures[1].hook, HookName::AfterToolCall);
    assert_eq!(failures[1].source, "panicky");
    assert!(failures[1]
        .error
        .contains("panicky panics in after_tool_call"));
    assert!(failures[1].panicked, "panicked");
    for (f, step) in failures[2..].iter().zip(0..) {
        assert_eq!(
            (f.hook, f.source.as_str(), f.error.as_str()),
            (
                HookName::OnStepFinish,
                "failing",
                "failing refuses on_step_finish"
            ),
            "step {step}"
        );
    }
    // A later extension still runs and its patch still applies.
    let configured = turn_configured(&env).await;
    assert_eq!(configured[0].settings.seed, Some(7));
    assert!(configured[0]
        .overrides
        .contains(&"ext:after:seed".to_owned()));
    let calls = calls.lines();
    assert!(calls.contains(&"after:on_step_finish".to_owned()));
}
