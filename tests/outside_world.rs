//! The outside world a session touches is one seam, given through `SessionOptions::outside`: a
//! test harness that serves the model's output and the tools' results from its own recording
//! runs the agent's real code against them, with nothing of the agent wrapped. The agent's
//! models (its default and one it resolves by id) and its tool are never called; the log names
//! the models the agent chose and holds the served output and results; and the harness sees
//! every hook point, each right before the agent's hook, so it can act on a turn at a known
//! point.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use mull::core::{Event, LanguageModel, ModelError, ModelRequest, ModelStream, UIMessage};
use mull::engine::{
    Agent, ChatResponseResult, ChunkContext, HookPoint, HookResult, ModelChoice, OutcomeStatus,
    Outside, PrepareStepContext, StepConfig, StepContext, Tool, ToolCallContext, ToolCallDecision,
    ToolCallResultContext, ToolEntry, ToolError, ToolExecution, ToolOutput, ToolSet, TurnConfig,
    TurnContext, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

mod support;
use support::events::streamed_text;
use support::hook_calls::HookCalls;
use support::test_log::TestLog;
use support::tools::counting_lookup;

/// An agent with two real models (named `acme/kit-large` and `acme/kit-small`, with empty
/// scripts that record any request) and a real `lookup` tool that counts its runs. Its second
/// step asks for `kit-small` by id. Every hook it runs is written to `calls` as `agent:<hook>`.
struct FieldKit {
    large: ScriptedModel,
    small: ScriptedModel,
    lookups: Arc<AtomicUsize>,
    calls: HookCalls,
}

impl FieldKit {
    fn new(calls: &HookCalls) -> FieldKit {
        let model = |id: &str| ScriptedModel::builder(id).provider("acme").build();
        FieldKit {
            large: model("kit-large"),
            small: model("kit-small"),
            lookups: Arc::new(AtomicUsize::new(0)),
            calls: calls.clone(),
        }
    }
}

#[async_trait]
impl Agent for FieldKit {
    fn name(&self) -> &str {
        "field-kit"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.large.clone())
    }
    fn resolve_model(&self, model_id: &str) -> Option<Arc<dyn LanguageModel>> {
        (model_id == "kit-small").then(|| Arc::new(self.small.clone()) as Arc<dyn LanguageModel>)
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new().with(
            counting_lookup(&self.lookups, |q: Value| {
                json!(format!("live answer for {q}"))
            })
            .shared(),
        )
    }
    async fn before_turn(&self, _: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.calls.record("agent:BeforeTurn");
        Ok(None)
    }
    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        self.calls.record("agent:BeforeStep");
        Ok((ctx.step_number == 1).then(|| StepConfig {
            model: Some(ModelChoice::Id("kit-small".to_owned())),
            ..StepConfig::default()
        }))
    }
    async fn before_tool_call(&self, _: &ToolCallContext) -> HookResult<Option<ToolCallDecision>> {
        self.calls.record("agent:BeforeToolCall");
        Ok(None)
    }
    async fn after_tool_call(&self, _: &ToolCallResultContext) -> HookResult<()> {
        self.calls.record("agent:AfterToolCall");
        Ok(())
    }
    async fn on_step_finish(&self, _: &StepContext) -> HookResult<()> {
        self.calls.record("agent:OnStepFinish");
        Ok(())
    }
    async fn on_chunk(&self, _: &ChunkContext) -> HookResult<()> {
        self.calls.record("agent:OnChunk");
        Ok(())
    }
    async fn on_chat_response(&self, _: &ChatResponseResult) -> HookResult<()> {
        self.calls.record("agent:OnChatResponse");
        Ok(())
    }
}

/// A test harness's recording standing in for the world: model output from `recording`,
/// presented under the name of the model the agent chose; each tool's result from `results`
/// by tool name; every hook point written to `calls` as `outside:<hook>`, and, when
/// `cancel_at` names a hook, `cancel` cancelled there.
struct Harness {
    recording: ScriptedModel,
    results: HashMap<String, Value>,
    calls: HookCalls,
    cancel_at: Option<(mull::core::HookName, CancellationToken)>,
}

#[async_trait]
impl Outside for Harness {
    fn model(&self, chosen: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        Arc::new(Presented {
            provider: chosen.provider().to_owned(),
            model_id: chosen.model_id().to_owned(),
            serving: self.recording.clone(),
        })
    }

    fn tools(&self, tools: ToolSet) -> ToolSet {
        let mut served = ToolSet::new();
        for entry in tools.entries() {
            served.insert(match entry {
                ToolEntry::Server(tool) => ToolEntry::Server(Arc::new(Canned {
                    tool: Arc::clone(tool),
                    result: self.results.get(tool.name()).cloned(),
                })),
                client => client.clone(),
            });
        }
        served
    }

    async fn at_hook(&self, point: HookPoint<'_>) {
        self.calls.record(format!("outside:{:?}", point.hook()));
        if let Some((hook, cancel)) = &self.cancel_at {
            if *hook == point.hook() {
                cancel.cancel();
            }
        }
    }
}

/// A model named as the agent chose, streaming the harness's recording.
struct Presented {
    provider: String,
    model_id: String,
    serving: ScriptedModel,
}

#[async_trait]
impl LanguageModel for Presented {
    fn provider(&self) -> &str {
        &self.provider
    }
    fn model_id(&self) -> &str {
        &self.model_id
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        self.serving.stream(request).await
    }
}

/// A tool as the model sees it, answering with a recorded result instead of running.
struct Canned {
    tool: Arc<dyn Tool>,
    result: Option<Value>,
}

#[async_trait]
impl Tool for Canned {
    fn name(&self) -> &str {
        self.tool.name()
    }
    fn description(&self) -> &str {
        self.tool.description()
    }
    fn input_schema(&self) -> Arc<Value> {
        self.tool.input_schema()
    }
    async fn execute(&self, _: Value, call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let result = self
            .result
            .clone()
            .ok_or_else(|| format!("the harness recorded no result for {}", call.tool_name))?;
        Ok(ToolOutput::Value(result))
    }
}

/// The harness's recording: a `lookup` call, then the answer.
fn recording() -> ScriptedModel {
    ScriptedModel::builder("recording")
        .step(|s| s.tool_call("call_1", "lookup", json!({"q": "rust"})))
        .step(|s| s.text("Rust is a systems language."))
        .build()
}

fn harness(calls: &HookCalls) -> Harness {
    Harness {
        recording: recording(),
        results: HashMap::from([("lookup".to_owned(), json!({"found": "a systems language"}))]),
        calls: calls.clone(),
        cancel_at: None,
    }
}

#[tokio::test]
async fn a_harness_serves_the_agents_models_and_tools_and_sees_every_hook_point() {
    let calls = HookCalls::default();
    let agent = Arc::new(FieldKit::new(&calls));
    let env = TestLog::new();
    let options = env.options().with_outside(Arc::new(harness(&calls)));
    let session = env.open_with(&agent, options).await;
    let out = session
        .chat(
            vec![UIMessage::user("u1", "What is Rust?")],
            TurnOptions::default(),
        )
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed, "{:?}", out.error);

    // Nothing real was called.
    assert!(agent.large.requests().is_empty(), "the default model ran");
    assert!(agent.small.requests().is_empty(), "the resolved model ran");
    assert_eq!(agent.lookups.load(Ordering::SeqCst), 0, "the tool ran");

    // The log names the models the agent chose and holds what the harness served.
    let events = env.bare_events().await;
    let config = events
        .iter()
        .find_map(|e| match e {
            Event::TurnConfigured { config } => Some(config),
            _ => None,
        })
        .expect("turn_configured");
    assert_eq!(
        (config.provider.as_str(), config.model_id.as_str()),
        ("acme", "kit-large")
    );
    let step_models: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::StepConfigured { model_id, .. } => Some(model_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(step_models, ["kit-large", "kit-small"]);
    let output = events.iter().find_map(|e| match e {
        Event::ToolCallFinished {
            success: true,
            output,
            ..
        } => output.clone(),
        _ => None,
    });
    assert_eq!(output, Some(json!({"found": "a systems language"})));
    assert_eq!(streamed_text(&events), "Rust is a systems language.");

    // Each of the agent's hooks ran right after the harness saw its point, and no other way.
    let lines = calls.lines();
    assert!(!lines.is_empty());
    for pair in lines.chunks(2) {
        let [outside, agent] = pair else {
            panic!("a hook point without its hook: {lines:?}")
        };
        assert_eq!(
            outside.strip_prefix("outside:"),
            agent.strip_prefix("agent:"),
            "{lines:?}"
        );
    }
    let hooks: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("agent:"))
        .collect();
    for hook in [
        "BeforeTurn",
        "BeforeStep",
        "BeforeToolCall",
        "AfterToolCall",
        "OnStepFinish",
        "OnChunk",
        "OnChatResponse",
    ] {
        assert!(hooks.contains(&hook), "{hook} never ran: {hooks:?}");
    }
    assert_eq!(hooks.last(), Some(&"OnChatResponse"));
}

#[tokio::test]
async fn a_harness_cancels_a_turn_at_a_known_hook_point_before_the_tool_runs() {
    let calls = HookCalls::default();
    let agent = Arc::new(FieldKit::new(&calls));
    let env = TestLog::new();
    let cancel = CancellationToken::new();
    let harness = Harness {
        cancel_at: Some((mull::core::HookName::BeforeToolCall, cancel.clone())),
        ..harness(&calls)
    };
    let session = env
        .open_with(&agent, env.options().with_outside(Arc::new(harness)))
        .await;
    let mut stream = session
        .chat(
            vec![UIMessage::user("u1", "What is Rust?")],
            TurnOptions {
                signal: Some(cancel),
                ..TurnOptions::default()
            },
        )
        .unwrap();
    while stream.next().await.is_some() {}
    let out = stream.finish().await.unwrap();
    assert_eq!(out.status, OutcomeStatus::Aborted, "{:?}", out.error);

    let events = env.bare_events().await;
    let served = events
        .iter()
        .any(|e| matches!(e, Event::ToolCallFinished { success: true, .. }));
    assert!(!served, "the tool was served after the turn was cancelled");
    assert_eq!(agent.lookups.load(Ordering::SeqCst), 0);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::StepConfigured { step: 1, .. })),
        "a second step started after the cancellation"
    );
}
