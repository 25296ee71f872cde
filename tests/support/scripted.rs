//! Agents answering from a scripted model: one that only talks ([`Chatty`]) and one with a
//! client tool that asks the user ([`Asker`]).

use std::sync::Arc;

use mull::core::{LanguageModel, ToolSpec};
use mull::engine::{Agent, ToolSet};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;

/// An agent answering from its scripted model, one step per turn.
pub struct Chatty {
    model: ScriptedModel,
}

#[async_trait::async_trait]
impl Agent for Chatty {
    fn name(&self) -> &str {
        "chatty"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
}

/// An agent whose next `turns` answers are each `deltas` text deltas long.
pub fn chatty(deltas: usize, turns: usize) -> Arc<Chatty> {
    let mut model = ScriptedModel::builder("m");
    for _ in 0..turns {
        model = model.step(|s| s.text_deltas((0..deltas).map(|i| format!("{i} "))));
    }
    Arc::new(Chatty {
        model: model.build(),
    })
}

/// An agent with one client tool, `ask` (the user answers it), answering from its script.
pub struct Asker {
    model: ScriptedModel,
}

impl Asker {
    /// An asker answering from `model`.
    pub fn new(model: &ScriptedModel) -> Arc<Asker> {
        Arc::new(Asker {
            model: model.clone(),
        })
    }
}

#[async_trait::async_trait]
impl Agent for Asker {
    fn name(&self) -> &str {
        "asker"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }
    fn tools(&self) -> ToolSet {
        ToolSet::new().with_client(ToolSpec {
            name: "ask".to_owned(),
            description: "Asks the user".to_owned(),
            input_schema: json!({"type": "object", "properties": {}}).into(),
        })
    }
}
