//! A turn a budget stopped, over the UI message stream: the client sees the steps that ran,
//! then an `error` part naming the budget, and the stream ends — live and mapped from the log
//! alike.

mod harness;

use std::sync::Arc;

use async_trait::async_trait;
use harness::*;
use mull_core::LanguageModel;
use mull_engine::{Agent, Budget, FnTool, SessionConfig, ToolSet};
use mull_providers::scripted::ScriptedModel;
use serde_json::{json, Value};

/// Looks words up on a scripted model, 110 tokens a step, held to 150 tokens a turn.
struct Capped {
    model: ScriptedModel,
}

#[async_trait]
impl Agent for Capped {
    fn name(&self) -> &str {
        "capped"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        let lookup = FnTool::new("lookup", "Looks a word up.", |input: Value, _| async move {
            Ok::<Value, mull_engine::ToolError>(json!({"found": input["word"]}))
        })
        .with_schema(json!({"type": "object"}));
        ToolSet::new().with(lookup.shared())
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        session.budget(Budget::new().turn_tokens(150))
    }
}

fn capped() -> Arc<dyn Agent> {
    let mut model = ScriptedModel::builder("scripted-lookups");
    for n in 0..4 {
        model = model.step(|s| {
            s.tool_call(&format!("call_{n}"), "lookup", json!({"word": "tram"}))
                .usage(100, 10)
        });
    }
    Arc::new(Capped {
        model: model.build(),
    })
}

#[tokio::test]
async fn a_budget_stop_reaches_the_client_as_an_error_part_live_and_from_the_log() {
    let agent = capped();
    let server = server_for(Arc::new(move |_chat: &str| Arc::clone(&agent))).await;
    let response = server.post_chat(&user_request("capped-1", "Trams?")).await;
    let (events, done) = read_sse(response, usize::MAX).await;
    assert!(done, "the stream ends");
    let steps = types(&events)
        .iter()
        .filter(|t| **t == "finish-step")
        .count();
    assert_eq!(steps, 2, "two steps ran: {:?}", types(&events));
    let errors: Vec<&Value> = events.iter().filter(|e| e["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{events:?}");
    assert_eq!(
        errors[0]["errorText"],
        "budget exceeded: the turn's token budget is used up (220 tokens spent of 150 tokens); no further model call is made"
    );
    // A client that reconnects is served the same stop from the log.
    let from_log = turns_from_log(&server.log, "capped-1").await;
    let last = from_log.last().expect("the turn");
    assert!(last.contains(errors[0]), "{last:?}");
}
