//! A parent agent that asks a research sub-agent through an agent tool, the sub-agent looking
//! a word up with a counted tool; every hook of both records itself.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use async_trait::async_trait;
use mull::core::{LanguageModel, StreamPart};
use mull::engine::{
    Agent, AgentTool, ChatResponseResult, ChunkContext, HookResult, PrepareStepContext, StepConfig,
    StepContext, Tool, ToolCallContext, ToolCallDecision, ToolCallResultContext, ToolSet,
    TurnConfig, TurnContext,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;

use super::hook_calls::HookCalls;
use super::tools::counting_lookup;

/// An agent on a scripted model whose hooks each write one line to `calls`, prefixed with
/// its name; `block_lookups` makes its `before_tool_call` block every `lookup`.
pub struct Recorded {
    pub name: String,
    pub model: ScriptedModel,
    pub tools: ToolSet,
    pub calls: HookCalls,
    pub block_lookups: bool,
}

impl Recorded {
    fn record(&self, line: String) {
        self.calls.record(format!("{}: {line}", self.name));
    }
}

#[async_trait]
impl Agent for Recorded {
    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }

    fn tools(&self) -> ToolSet {
        self.tools.clone()
    }

    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.record(format!("before_turn entry={:?}", ctx.entry));
        Ok(None)
    }

    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        self.record(format!("before_step {}", ctx.step_number));
        Ok(None)
    }

    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        self.record(format!("before_tool_call {}", ctx.tool_name));
        Ok(super::tools::block_lookups(self.block_lookups, ctx))
    }

    async fn after_tool_call(&self, ctx: &ToolCallResultContext) -> HookResult<()> {
        self.record(format!(
            "after_tool_call {} success={}",
            ctx.tool_name, ctx.success
        ));
        Ok(())
    }

    async fn on_step_finish(&self, ctx: &StepContext) -> HookResult<()> {
        self.record(format!("on_step_finish {}", ctx.step_number));
        Ok(())
    }

    async fn on_chunk(&self, ctx: &ChunkContext) -> HookResult<()> {
        let kind = match &ctx.chunk {
            StreamPart::TextDelta { .. } => "text",
            StreamPart::ToolCall { .. } => "tool-call",
            StreamPart::ToolResult { .. } => "tool-result",
            _ => "other",
        };
        self.record(format!("on_chunk {kind}"));
        Ok(())
    }

    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
        self.record(format!("on_chat_response {:?}", result.status));
        Ok(())
    }
}

/// The research sub-agent: looks `lisbon` up (counted in `lookups`), then answers.
pub fn researcher(calls: &HookCalls, lookups: &Arc<AtomicUsize>) -> Recorded {
    let model = ScriptedModel::builder("scripted-research")
        .step(|s| {
            s.text("Looking it up.")
                .tool_call("call_lookup_1", "lookup", json!({"word": "lisbon"}))
                .usage(100, 10)
        })
        .step(|s| s.text("Lisbon has seven hills.").usage(150, 20))
        .build();
    Recorded {
        name: "researcher".to_owned(),
        model,
        tools: ToolSet::new().with(
            counting_lookup(lookups, |input: serde_json::Value| input["word"].clone()).shared(),
        ),
        calls: calls.clone(),
        block_lookups: false,
    }
}

/// The agent tool asking `child`.
pub fn research_tool(child: Recorded) -> Arc<dyn Tool> {
    AgentTool::new(
        "research",
        "Asks the research sub-agent a question.",
        Arc::new(child),
    )
    .shared()
}

/// The parent: calls `research` once, then answers with what it learned.
pub fn desk(calls: &HookCalls, research: Arc<dyn Tool>) -> Recorded {
    let model = ScriptedModel::builder("scripted-desk")
        .step(|s| {
            s.tool_call(
                "call_research_1",
                "research",
                json!({"prompt": "How many hills has Lisbon?"}),
            )
            .usage(1000, 30)
        })
        .step(|s| s.text("Seven, says research.").usage(1200, 40))
        .build();
    Recorded {
        name: "desk".to_owned(),
        model,
        tools: ToolSet::new().with(research),
        calls: calls.clone(),
        block_lookups: false,
    }
}
