//! Stop conditions: when the agentic loop ends before the model stops calling tools. A turn
//! always has `step_count_is(max_steps)`; `TurnConfig::stop_when` adds more, and the loop ends
//! when any one matches.

use std::sync::Arc;

use mull_core::StepRecord;

type StepTest = dyn Fn(&[StepRecord]) -> bool + Send + Sync;

/// A named predicate over the steps completed so far.
#[derive(Clone)]
pub struct StopCondition {
    name: String,
    test: Arc<StepTest>,
}

impl StopCondition {
    /// A custom condition; `name` is what the log records for it.
    pub fn new(
        name: impl Into<String>,
        test: impl Fn(&[StepRecord]) -> bool + Send + Sync + 'static,
    ) -> StopCondition {
        StopCondition {
            name: name.into(),
            test: Arc::new(test),
        }
    }

    /// The description recorded in `turn_configured`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the loop should stop after `steps`.
    pub fn matches(&self, steps: &[StepRecord]) -> bool {
        (self.test)(steps)
    }
}

impl std::fmt::Debug for StopCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// Stops once `n` steps have run.
pub fn step_count_is(n: u32) -> StopCondition {
    StopCondition::new(format!("step_count_is({n})"), move |steps| {
        steps.len() >= n as usize
    })
}

/// Stops once the last step called the tool `tool_name`.
pub fn has_tool_call(tool_name: &str) -> StopCondition {
    let name = tool_name.to_owned();
    StopCondition::new(format!("has_tool_call({tool_name})"), move |steps| {
        steps
            .last()
            .is_some_and(|s| s.tool_calls.iter().any(|c| c.tool_name == name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::ToolCallRecord;
    use serde_json::Value;

    #[test]
    fn conditions_look_at_the_steps_so_far() {
        let step = |tool: &str| StepRecord {
            tool_calls: vec![ToolCallRecord {
                call_id: "c".into(),
                tool_name: tool.into(),
                input: Value::Null,
                dynamic: false,
            }],
            ..StepRecord::default()
        };
        let steps = vec![step("search"), step("final_answer")];
        assert!(step_count_is(2).matches(&steps));
        assert!(!step_count_is(3).matches(&steps));
        assert!(has_tool_call("final_answer").matches(&steps));
        assert!(!has_tool_call("search").matches(&steps));
        assert_eq!(has_tool_call("x").name(), "has_tool_call(x)");
    }
}
