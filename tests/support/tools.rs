//! Tools the test agents share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mull::engine::{FnTool, Tool, ToolCallContext, ToolCallDecision};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// A `lookup` tool that counts its executions in `executions` and answers
/// `{"found": found(input)}`.
pub fn counting_lookup<I>(
    executions: &Arc<AtomicUsize>,
    found: impl Fn(I) -> Value + Send + Sync + 'static,
) -> FnTool
where
    I: JsonSchema + DeserializeOwned + Send + 'static,
{
    let executions = Arc::clone(executions);
    let found = Arc::new(found);
    FnTool::new("lookup", "Looks a query up.", move |input: I, _| {
        let executions = Arc::clone(&executions);
        let found = Arc::clone(&found);
        async move {
            executions.fetch_add(1, Ordering::SeqCst);
            Ok(json!({ "found": found(input) }))
        }
    })
}

/// A `lookup` tool that answers `{"found": input}` for any object input.
pub fn echo_lookup() -> Arc<dyn Tool> {
    FnTool::new(
        "lookup",
        "Looks a word up.",
        |input: Value, _call| async move { Ok(json!({ "found": input })) },
    )
    .with_schema(json!({"type": "object"}))
    .shared()
}

/// The "changed policy" of the replay tests: when `block` is set, every `lookup` call is
/// blocked with the reason "No lookups.".
pub fn block_lookups(block: bool, ctx: &ToolCallContext) -> Option<ToolCallDecision> {
    (block && ctx.tool_name == "lookup").then(|| ToolCallDecision::Block {
        reason: Some("No lookups.".to_owned()),
    })
}
