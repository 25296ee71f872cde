//! Full-text search over a session's conversation, for the application
//! ([`Session::search`](crate::Session::search)) and for the model (the `search_messages`
//! tool, offered when `configure_session` asks for it). The index itself is
//! `memory/search_index.rs`.
//!
//! Queries are words, all of which must occur (stemmed, case- and accent-insensitive); FTS5
//! operators are not interpreted, so any text a user or a model types is a valid query.
//! Results come best first (BM25), each with a snippet that brackets the matched words.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::recorder::Recorder;
use crate::runtime::search_index::SearchIndex;
use crate::session_config::SessionConfig;
use crate::tool::{Tool, ToolError, ToolExecution, ToolOutput};

pub use crate::runtime::search_index::{message_text, SearchError, SearchHit};

/// The name of the tool through which the model searches the session.
pub const SEARCH_TOOL: &str = "search_messages";

/// The messages of the conversation that contain every word of `query`, best first, at most
/// `limit` of them.
pub(crate) fn search(
    recorder: &Recorder,
    index: &SearchIndex,
    query: &str,
    limit: usize,
) -> Result<Vec<SearchHit>, SearchError> {
    let messages = recorder.read(|s| s.messages.clone());
    index.run(recorder.session_id(), &messages, query, limit)
}

/// The `search_messages` tool: the model searches its own conversation.
struct SearchTool {
    /// Weak: the tool answers only while its session is open.
    recorder: Weak<Recorder>,
    index: Arc<SearchIndex>,
}

/// The search tool, when the session offers it.
pub(crate) fn search_tool(
    recorder: &Arc<Recorder>,
    config: &SessionConfig,
    index: &Arc<SearchIndex>,
) -> Option<Arc<dyn Tool>> {
    config.search_tool.then(|| {
        Arc::new(SearchTool {
            recorder: Arc::downgrade(recorder),
            index: Arc::clone(index),
        }) as Arc<dyn Tool>
    })
}

/// Results the tool returns when the model does not ask for a number.
const DEFAULT_TOOL_LIMIT: u64 = 5;

#[async_trait]
impl Tool for SearchTool {
    fn name(&self) -> &str {
        SEARCH_TOOL
    }
    fn description(&self) -> &str {
        "Searches this conversation's earlier messages (including summaries of compacted \
         parts) for messages containing every given word; returns the best matches with a \
         snippet each."
    }
    fn input_schema(&self) -> Arc<Value> {
        Arc::new(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words that must all occur."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}
            },
            "required": ["query"],
            "additionalProperties": false
        }))
    }
    async fn execute(&self, input: Value, _call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let recorder = self
            .recorder
            .upgrade()
            .ok_or("the session of this tool is closed")?;
        let query = input.get("query").and_then(Value::as_str).unwrap_or("");
        let limit = input
            .get("limit")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_TOOL_LIMIT);
        let hits = search(
            &recorder,
            &self.index,
            query,
            usize::try_from(limit).unwrap_or(50),
        )?;
        Ok(ToolOutput::Value(json!({
            "results": hits
                .iter()
                .map(|h| json!({"message_id": h.message_id, "role": h.role, "snippet": h.snippet}))
                .collect::<Vec<_>>()
        })))
    }
}
