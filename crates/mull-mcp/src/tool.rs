//! One tool of an MCP server, as a mull [`Tool`]: named so it cannot clash, with the server's
//! schema, calling the server when it runs.

use std::sync::Arc;

use async_trait::async_trait;
use mull_engine::{Tool, ToolError, ToolExecution, ToolOutput};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool as RemoteTool};
use rmcp::ServiceError;
use serde_json::Value;

use crate::connection::Shared;

/// The name a turn offers an MCP server's tool by: `tool_<server>_<name>`, the server's name
/// with `-` removed (as Think names them).
pub fn tool_name(server: &str, tool: &str) -> String {
    let server: String = server.chars().filter(|c| *c != '-').collect();
    format!("tool_{server}_{tool}")
}

pub(crate) struct McpTool {
    server: Arc<Shared>,
    /// The name the server knows the tool by.
    remote_name: String,
    /// The name the model calls it by.
    name: String,
    description: String,
    schema: Arc<Value>,
}

impl McpTool {
    pub(crate) fn new(server: Arc<Shared>, tool: &RemoteTool) -> McpTool {
        McpTool {
            name: format!("tool_{}_{}", server.key, tool.name),
            remote_name: tool.name.to_string(),
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            schema: Arc::new(Value::Object((*tool.input_schema).clone())),
            server,
        }
    }

    async fn call(&self, input: Value) -> Result<Value, String> {
        let server = &self.server;
        let arguments = match input {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(format!(
                    "MCP server {:?}: tool {:?} takes an object as input, not {other}",
                    server.name, self.remote_name
                ))
            }
        };
        let peer = server.peer().await?;
        let request =
            CallToolRequestParams::new(self.remote_name.clone()).with_arguments(arguments);
        let answered = tokio::time::timeout(server.call_timeout, peer.call_tool(request)).await;
        let result = match answered {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => {
                let message = server
                    .failure(&format!(
                        "failed while running tool {:?}: {e}",
                        self.remote_name
                    ))
                    .await;
                if matches!(
                    e,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                ) {
                    // The server is gone: the next call starts (or reaches) it again. This
                    // call is not retried — the server may have run it before it died.
                    server.discard().await;
                }
                return Err(message);
            }
            Err(_) => {
                return Err(format!(
                    "MCP server {:?} did not answer tool {:?} within {} ms",
                    server.name,
                    self.remote_name,
                    server.call_timeout.as_millis()
                ))
            }
        };
        if result.is_error == Some(true) {
            return Err(format!(
                "MCP server {:?}: tool {:?} failed: {}",
                server.name,
                self.remote_name,
                text_of(&result)
            ));
        }
        serde_json::to_value(&result).map_err(|e| {
            format!(
                "MCP server {:?}: the result of tool {:?} is not JSON: {e}",
                server.name, self.remote_name
            )
        })
    }
}

/// The text blocks of a result, joined (what an error result says).
fn text_of(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect();
    if texts.is_empty() {
        "(no text)".to_owned()
    } else {
        texts.join("\n")
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Arc<Value> {
        Arc::clone(&self.schema)
    }

    fn is_dynamic(&self) -> bool {
        true
    }

    async fn execute(&self, input: Value, call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        // An aborted turn stops waiting; dropping the request tells the server it is cancelled.
        tokio::select! {
            biased;
            _ = call.cancel.cancelled() => Err(format!(
                "MCP server {:?}: tool {:?} was cancelled with the turn",
                self.server.name, self.remote_name
            )
            .into()),
            result = self.call(input) => match result {
                Ok(value) => Ok(ToolOutput::Value(value)),
                Err(message) => Err(message.into()),
            },
        }
    }
}
