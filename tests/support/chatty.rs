//! An agent that only talks: each turn's answer is a run of text deltas from a scripted model.

use std::sync::Arc;

use mull::core::LanguageModel;
use mull::engine::Agent;
use mull::providers::scripted::ScriptedModel;

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
