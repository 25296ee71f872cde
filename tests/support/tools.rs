//! Tools the test agents share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mull::engine::FnTool;
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
