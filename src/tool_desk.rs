//! The tool desk: a small agent whose `before_tool_call` policy shows every kind of decision —
//! a blocked call (`delete_file`), a substituted one (`weather` on the first step, served from
//! a cache), a tool that fails (`status_page`) and one that simply runs (`search`). The
//! recorded fixtures in `fixtures/` (besides the demo's) were made with it, so `mull replay
//! --check` can re-execute them.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use mull_core::LanguageModel;
use mull_engine::{
    Agent, FnTool, HookResult, ToolCallContext, ToolCallDecision, ToolError, ToolSet,
};

/// The agent's name in the log.
pub const NAME: &str = "tool-desk";

#[derive(Deserialize, schemars::JsonSchema)]
struct Query {
    query: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
    when: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct FilePath {
    path: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Nothing {}

/// The tool desk over `model`.
pub struct ToolDesk {
    model: Arc<dyn LanguageModel>,
}

impl ToolDesk {
    /// The desk answering with `model`.
    pub fn new(model: Arc<dyn LanguageModel>) -> ToolDesk {
        ToolDesk { model }
    }
}

#[async_trait]
impl Agent for ToolDesk {
    fn name(&self) -> &str {
        NAME
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn system_prompt(&self) -> String {
        "You are a helpful assistant.".into()
    }
    fn tools(&self) -> ToolSet {
        let search = FnTool::new("search", "Web search.", |q: Query, _| async move {
            Ok::<Value, ToolError>(json!({"results": [
                {"title": format!("{} - official site", q.query), "url": "https://www.louvre.fr/en/visit"}
            ]}))
        })
        .shared();
        let weather = FnTool::new("weather", "Forecast.", |c: City, _| async move {
            Ok::<Value, ToolError>(
                json!({"city": c.city, "when": c.when, "high_c": 19, "sky": "light rain"}),
            )
        })
        .shared();
        let delete = FnTool::new(
            "delete_file",
            "Deletes a file.",
            |f: FilePath, _| async move { Ok::<Value, ToolError>(json!({"deleted": f.path})) },
        )
        .shared();
        let status = FnTool::new(
            "status_page",
            "Reads the status page.",
            |_: Nothing, _| async move {
                Err::<Value, ToolError>("status page timed out after 3000 ms".into())
            },
        )
        .shared();
        ToolSet::new()
            .with(search)
            .with(weather)
            .with(delete)
            .with(status)
    }
    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        Ok(match ctx.tool_name.as_str() {
            "delete_file" => Some(ToolCallDecision::Block { reason: None }),
            "weather" if ctx.step_number == 0 => Some(ToolCallDecision::Substitute {
                output: json!({"city": "Oslo", "high_c": 4, "sky": "snow", "cached": true}),
                input: None,
            }),
            _ => None,
        })
    }
}
