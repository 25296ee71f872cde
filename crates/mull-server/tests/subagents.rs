//! A sub-agent's progress over the UI message stream: an agent tool's call streams the child's
//! snapshots as preliminary `tool-output-available` parts, then its answer.

mod harness;

use std::sync::Arc;

use async_trait::async_trait;
use harness::*;
use mull_core::LanguageModel;
use mull_engine::{Agent, AgentTool, FnTool, ToolSet};
use mull_providers::scripted::ScriptedModel;
use serde_json::{json, Value};

/// An agent on a scripted model with the given tools.
struct Scripted {
    name: &'static str,
    model: ScriptedModel,
    tools: ToolSet,
}

#[async_trait]
impl Agent for Scripted {
    fn name(&self) -> &str {
        self.name
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        self.tools.clone()
    }
}

fn desk() -> Arc<dyn Agent> {
    let lookup = FnTool::new("lookup", "Looks a word up.", |input: Value, _| async move {
        Ok::<Value, mull_engine::ToolError>(json!({"found": input["word"]}))
    })
    .with_schema(json!({"type": "object"}));
    let researcher = Scripted {
        name: "researcher",
        model: ScriptedModel::builder("scripted-research")
            .step(|s| s.tool_call("call_lookup", "lookup", json!({"word": "tram"})))
            .step(|s| s.text("Tram 15."))
            .build(),
        tools: ToolSet::new().with(lookup.shared()),
    };
    let research = AgentTool::new("research", "Asks the researcher.", Arc::new(researcher));
    Arc::new(Scripted {
        name: "desk",
        model: ScriptedModel::builder("scripted-desk")
            .step(|s| s.tool_call("call_research", "research", json!({"prompt": "Tram?"})))
            .step(|s| s.text("Take tram 15."))
            .build(),
        tools: ToolSet::new().with(research.shared()),
    })
}

#[tokio::test]
async fn a_sub_agents_progress_streams_as_preliminary_tool_output() {
    let agent = desk();
    let server = server_for(Arc::new(move |_chat: &str| Arc::clone(&agent))).await;
    let response = server
        .post_chat(&user_request("desk-1", "How do I get there?"))
        .await;
    let (events, done) = read_sse(response, usize::MAX).await;
    assert!(done);
    let outputs: Vec<&Value> = events
        .iter()
        .filter(|e| e["toolCallId"] == "call_research" && e["type"] == "tool-output-available")
        .collect();
    // Lookup decided, lookup done, step 0 ended, step 1 ended, the answer; then the final one.
    assert_eq!(outputs.len(), 6, "{outputs:?}");
    assert!(outputs[..5].iter().all(|e| e["preliminary"] == true));
    let child = outputs[0]["output"]["session_id"]
        .as_str()
        .expect("the child's id");
    assert!(child.starts_with("desk-1.agent_"), "{child}");
    assert_eq!(outputs[0]["output"]["tools"][0]["state"], "running");
    assert_eq!(outputs[1]["output"]["tools"][0]["state"], "done");
    assert_eq!(outputs[3]["output"]["text"], "Tram 15.");
    assert!(outputs[5].get("preliminary").is_none());
    assert_eq!(outputs[5]["output"], "Tram 15.");
    // The stream is a function of the parent's log, as for every chat.
    assert_eq!(turns_from_log(&server.log, "desk-1").await, vec![events]);
}
