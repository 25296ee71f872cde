//! The agents that ship with mull, by the name they write in the log: what `mull replay
//! --check` re-executes a recorded session with. A session recorded by any other agent is
//! re-executed from the code that has that agent ([`mull_engine::replay::reexecute`]).

use std::sync::Arc;

use mull_engine::Agent;
use mull_providers::scripted::ScriptedModel;

/// The names of the built-in agents.
pub const BUILT_IN: &[&str] = &[
    crate::demo::AGENT_NAME,
    crate::demo::RESEARCH_AGENT_NAME,
    crate::tool_desk::NAME,
];

/// The built-in agent called `name`, unpaced (a replay serves its model's output from the log,
/// so the model it is built with never answers).
pub fn built_in(name: &str) -> Option<Arc<dyn Agent>> {
    match name {
        crate::demo::AGENT_NAME => Some(crate::demo::agent()),
        crate::demo::RESEARCH_AGENT_NAME => Some(crate::demo::research_agent()),
        crate::tool_desk::NAME => Some(Arc::new(crate::tool_desk::ToolDesk::new(Arc::new(
            ScriptedModel::builder("scripted-1").build(),
        )))),
        _ => None,
    }
}
