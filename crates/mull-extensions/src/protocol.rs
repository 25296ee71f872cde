//! The wire protocol between the host and an extension process: JSON-RPC 2.0, one JSON object
//! per line, over the child's stdin (host → extension) and stdout (extension → host). Stderr is
//! the extension's own log. docs/extension-protocol.md describes it; its schemas come from
//! [`schemas`] and a test keeps them current.

use mull_engine::{
    ChunkSnapshot, ExtensionHook, StepSnapshot, ToolCallSnapshot, ToolResultSnapshot,
    TurnConfigPatch, TurnSnapshot,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::manifest::{Manifest, Permissions};

/// The protocol version `initialize` announces.
pub const PROTOCOL_VERSION: u32 = 1;

/// Method names.
pub mod method {
    /// Host → extension, first message after start.
    pub const INITIALIZE: &str = "initialize";
    /// Host → extension, one per hook call (the hook's snake_case name).
    pub const BEFORE_TURN: &str = "before_turn";
    pub const BEFORE_TOOL_CALL: &str = "before_tool_call";
    pub const AFTER_TOOL_CALL: &str = "after_tool_call";
    pub const ON_STEP_FINISH: &str = "on_step_finish";
    pub const ON_CHUNK: &str = "on_chunk";
    /// Host → extension, a batch of chunks (batched `on_chunk` subscriptions).
    pub const ON_CHUNK_BATCH: &str = "on_chunk_batch";
    /// Host → extension notification: exit now.
    pub const SHUTDOWN: &str = "shutdown";
    /// Extension → host, during a hook call.
    pub const HOST_READ_MESSAGES: &str = "host/read_messages";
    pub const HOST_READ_CONTEXT_BLOCK: &str = "host/read_context_block";
    pub const HOST_WRITE_CONTEXT_BLOCK: &str = "host/write_context_block";
}

/// JSON-RPC error codes the host answers host calls with.
pub mod code {
    /// The line was not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// No such host method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params do not match the method.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The manifest does not grant the permission the call needs.
    pub const PERMISSION_DENIED: i64 = -32001;
    /// The session offers no such facility.
    pub const UNSUPPORTED: i64 = -32002;
    /// The host understood the call but refused it (unknown block, over budget).
    pub const REJECTED: i64 = -32003;
}

/// `initialize` params: who the extension is to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InitializeParams {
    pub protocol_version: u32,
    pub name: String,
    pub hooks: Vec<ExtensionHook>,
    pub permissions: Permissions,
    /// `"none"`, `"step"`, or a number of chunks per `on_chunk_batch`.
    pub chunk_batch: Value,
}

impl InitializeParams {
    /// The params the host sends for `manifest`.
    pub fn for_manifest(manifest: &Manifest) -> InitializeParams {
        use crate::manifest::ChunkBatching;
        InitializeParams {
            protocol_version: PROTOCOL_VERSION,
            name: manifest.name.clone(),
            hooks: manifest.hooks.clone(),
            permissions: manifest.permissions.clone(),
            chunk_batch: match manifest.chunk_batching() {
                Ok(ChunkBatching::Every(n)) => json!(n.get()),
                Ok(ChunkBatching::PerStep) => json!("step"),
                _ => json!("none"),
            },
        }
    }
}

/// `initialize` result: any object (its fields are informational).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InitializeResult {
    /// The name the extension calls itself, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `on_chunk_batch` params: chunks in stream order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChunkBatch {
    pub chunks: Vec<ChunkSnapshot>,
}

/// `host/read_messages` result: the conversation as UI messages (mull's `UIMessage` shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadMessagesResult {
    pub messages: Vec<serde_json::Map<String, Value>>,
}

/// `host/read_context_block` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadContextBlockParams {
    pub name: String,
}

/// `host/read_context_block` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadContextBlockResult {
    /// `null` when the block is empty.
    pub text: Option<String>,
}

/// `host/write_context_block` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WriteContextBlockParams {
    pub name: String,
    pub text: String,
}

/// A message read from the extension's stdout.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A reply to one of the host's requests.
    Reply {
        id: Value,
        result: Result<Value, RpcError>,
    },
    /// A host call the extension makes (it expects a reply when `id` is set).
    Call {
        id: Option<Value>,
        method: String,
        params: Value,
    },
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl Incoming {
    /// Reads one line; `Err` says why it is not a JSON-RPC 2.0 message.
    pub fn parse(line: &str) -> Result<Incoming, String> {
        let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e})"))?;
        let Value::Object(mut object) = value else {
            return Err("not a JSON object".into());
        };
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err("no \"jsonrpc\": \"2.0\"".into());
        }
        let id = object.remove("id");
        if let Some(method) = object.remove("method") {
            let Value::String(method) = method else {
                return Err("\"method\" is not a string".into());
            };
            let params = object.remove("params").unwrap_or(Value::Null);
            return Ok(Incoming::Call { id, method, params });
        }
        let id = id.ok_or("neither \"method\" nor \"id\"")?;
        if let Some(error) = object.remove("error") {
            let error: RpcError = serde_json::from_value(error)
                .map_err(|e| format!("\"error\" is not {{code, message}} ({e})"))?;
            return Ok(Incoming::Reply {
                id,
                result: Err(error),
            });
        }
        match object.remove("result") {
            Some(result) => Ok(Incoming::Reply {
                id,
                result: Ok(result),
            }),
            None => Err("a reply with neither \"result\" nor \"error\"".into()),
        }
    }
}

/// A request line (without the newline).
pub fn request_line(id: u64, method: &str, params: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A notification line (without the newline).
pub fn notification_line(method: &str, params: &Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// A reply line to a host call (without the newline).
pub fn reply_line(id: &Value, result: Result<Value, RpcError>) -> String {
    match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string(),
    }
}

/// One documented schema: a title, what it is for, and the schema itself.
pub struct DocumentedSchema {
    pub title: &'static str,
    pub role: &'static str,
    pub schema: Value,
}

fn schema<T: JsonSchema>(title: &'static str, role: &'static str) -> DocumentedSchema {
    DocumentedSchema {
        title,
        role,
        schema: serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null),
    }
}

/// The schema of every snapshot, reply and host call on the wire, in documentation order.
pub fn schemas() -> Vec<DocumentedSchema> {
    vec![
        schema::<Manifest>("Manifest", "the manifest file (TOML or JSON)"),
        schema::<InitializeParams>("InitializeParams", "`initialize` params"),
        schema::<InitializeResult>("InitializeResult", "`initialize` result"),
        schema::<TurnSnapshot>("TurnSnapshot", "`before_turn` params"),
        schema::<Option<TurnConfigPatch>>(
            "TurnConfigPatch",
            "`before_turn` result (`null`: change nothing)",
        ),
        schema::<ToolCallSnapshot>("ToolCallSnapshot", "`before_tool_call` params"),
        schema::<ToolResultSnapshot>("ToolResultSnapshot", "`after_tool_call` params"),
        schema::<StepSnapshot>("StepSnapshot", "`on_step_finish` params"),
        schema::<ChunkSnapshot>("ChunkSnapshot", "`on_chunk` params"),
        schema::<ChunkBatch>("ChunkBatch", "`on_chunk_batch` params"),
        schema::<ReadMessagesResult>("ReadMessagesResult", "`host/read_messages` result"),
        schema::<ReadContextBlockParams>(
            "ReadContextBlockParams",
            "`host/read_context_block` params",
        ),
        schema::<ReadContextBlockResult>(
            "ReadContextBlockResult",
            "`host/read_context_block` result",
        ),
        schema::<WriteContextBlockParams>(
            "WriteContextBlockParams",
            "`host/write_context_block` params (result: `null`)",
        ),
    ]
}

/// The marker lines around the generated schema section of docs/extension-protocol.md.
pub const SCHEMAS_BEGIN: &str = "<!-- schemas:begin (generated by `cargo run -p mull-extensions --example protocol_schemas`) -->";
/// See [`SCHEMAS_BEGIN`].
pub const SCHEMAS_END: &str = "<!-- schemas:end -->";

/// The generated schema section, markers included.
pub fn schemas_markdown() -> String {
    let mut out = String::new();
    out.push_str(SCHEMAS_BEGIN);
    out.push('\n');
    for s in schemas() {
        let pretty = serde_json::to_string_pretty(&s.schema).unwrap_or_default();
        out.push_str(&format!(
            "\n### {} — {}\n\n```json\n{pretty}\n```\n",
            s.title, s.role
        ));
    }
    out.push('\n');
    out.push_str(SCHEMAS_END);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_replies_and_calls() {
        assert_eq!(
            Incoming::parse(r#"{"jsonrpc":"2.0","id":3,"result":null}"#).unwrap(),
            Incoming::Reply {
                id: json!(3),
                result: Ok(Value::Null)
            }
        );
        assert_eq!(
            Incoming::parse(r#"{"jsonrpc":"2.0","id":"x1","method":"host/read_messages"}"#)
                .unwrap(),
            Incoming::Call {
                id: Some(json!("x1")),
                method: "host/read_messages".into(),
                params: Value::Null
            }
        );
        let err = Incoming::parse(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}"#)
            .unwrap();
        assert!(matches!(
            err,
            Incoming::Reply {
                result: Err(RpcError { code: -1, .. }),
                ..
            }
        ));
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(Incoming::parse("hello").unwrap_err().contains("not JSON"));
        assert!(Incoming::parse("[1]").unwrap_err().contains("object"));
        assert!(Incoming::parse(r#"{"id":1,"result":1}"#)
            .unwrap_err()
            .contains("2.0"));
        assert!(Incoming::parse(r#"{"jsonrpc":"2.0","id":1}"#).is_err());
    }

    #[test]
    fn every_schema_is_an_object_schema() {
        for s in schemas() {
            assert!(s.schema.is_object(), "{} has no schema", s.title);
        }
    }
}
