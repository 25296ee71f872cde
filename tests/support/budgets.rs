//! An agent with a spend cap: a scripted model, a `lookup` tool, and a [`Budget`] on its
//! session configuration (optionally an agent tool asking a capped sub-agent).

use std::sync::Arc;

use async_trait::async_trait;
use mull::core::{BudgetLimits, Envelope, Event, LanguageModel, PriceTable};
use mull::engine::{Agent, Budget, SessionConfig, Tool, ToolSet};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;

use super::tools::echo_lookup;

/// An agent on `model` whose sessions are held to `budget`.
pub struct Capped {
    pub name: &'static str,
    pub model: ScriptedModel,
    pub budget: Option<Budget>,
    pub tools: ToolSet,
}

impl Capped {
    /// `name` on `model` with the `lookup` tool, held to `budget`.
    pub fn new(name: &'static str, model: ScriptedModel, budget: Option<Budget>) -> Capped {
        Capped {
            name,
            model,
            budget,
            tools: ToolSet::new().with(echo_lookup()),
        }
    }

    /// Adds a tool.
    pub fn with_tool(mut self, tool: Arc<dyn Tool>) -> Capped {
        self.tools = self.tools.with(tool);
        self
    }
}

#[async_trait]
impl Agent for Capped {
    fn name(&self) -> &str {
        self.name
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        self.tools.clone()
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        match &self.budget {
            Some(budget) => session.budget(budget.clone()),
            None => session,
        }
    }
}

/// A model whose every step looks a word up and reports `input` + `output` tokens.
pub fn looking_up(model_id: &str, steps: usize, input: u64, output: u64) -> ScriptedModel {
    let mut builder = ScriptedModel::builder(model_id);
    for n in 0..steps {
        builder = builder.step(|s| {
            s.tool_call(&format!("call_{n}"), "lookup", json!({"word": "tram"}))
                .usage(input, output)
        });
    }
    builder.build()
}

/// One dollar per thousand tokens, in and out, for `model_id`: easy sums.
pub fn dear_prices(model_id: &str) -> PriceTable {
    PriceTable::new()
        .parse(&format!(
            r#"{{"models": {{"{model_id}": {{"input": 1000.0, "output": 1000.0}}}}}}"#
        ))
        .expect("a valid price file")
}

/// What a `budget_exceeded` event said.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeded {
    pub scope: String,
    pub measure: String,
    pub limit: f64,
    pub spent: f64,
    pub remaining: BudgetLimits,
    pub call: String,
    pub step: Option<u32>,
}

/// Every `budget_exceeded` of `events`, in order.
pub fn exceeded(events: &[Envelope]) -> Vec<Exceeded> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::BudgetExceeded {
                scope,
                measure,
                limit,
                spent,
                remaining,
                call,
                step,
                ..
            } => Some(Exceeded {
                scope: mull::core::wire_name(scope),
                measure: mull::core::wire_name(measure),
                limit: *limit,
                spent: *spent,
                remaining: *remaining,
                call: mull::core::wire_name(call),
                step: *step,
            }),
            _ => None,
        })
        .collect()
}
