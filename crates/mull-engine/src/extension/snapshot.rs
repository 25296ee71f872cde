//! What extension hooks see: JSON-safe snapshots of the engine's contexts, in Think's
//! shapes and camelCase field names.

use mull_core::{StreamPart, Usage};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What an extension's `before_turn` sees: Think's `TurnContextSnapshot`
/// (`{ system, toolNames, messageCount, continuation, body?, modelId }`) plus `activeTools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnSnapshot {
    /// The system prompt in effect so far.
    pub system: String,
    /// Every tool of the turn, merged.
    pub tool_names: Vec<String>,
    /// The tools the model may call so far; `null` means all of `tool_names`.
    pub active_tools: Option<Vec<String>>,
    /// How many model messages the first step would send.
    pub message_count: u32,
    /// Whether this turn continues the previous one.
    pub continuation: bool,
    /// Custom fields of the caller's request (absent when the request had none).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub body: Value,
    /// The model the turn uses.
    pub model_id: String,
}

/// What an extension's `before_tool_call` sees (Think's
/// `{ toolName, toolCallId, input, stepNumber, dynamic? }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallSnapshot {
    pub tool_name: String,
    pub tool_call_id: String,
    /// The input the model provided.
    pub input: Value,
    /// The step the call occurs in.
    pub step_number: u32,
    /// Whether the tool was registered at runtime.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dynamic: bool,
}

/// What an extension's `after_tool_call` sees: the outcome as the model sees it (Think's
/// `{ toolName, toolCallId, input, stepNumber, durationMs, success, output? | error?, dynamic? }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultSnapshot {
    pub tool_name: String,
    pub tool_call_id: String,
    /// The input the model emitted.
    pub input: Value,
    pub step_number: u32,
    /// Wall time of execute; 0 when it did not run.
    pub duration_ms: u64,
    /// False when execute (or the agent's `before_tool_call`) failed.
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dynamic: bool,
}

/// Token counts of a step; absent counts mean the provider did not say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageSnapshot {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
}

impl From<&Usage> for UsageSnapshot {
    fn from(u: &Usage) -> UsageSnapshot {
        UsageSnapshot {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            total_tokens: u.total_tokens,
            reasoning_tokens: u.reasoning_tokens,
            cached_input_tokens: u.cached_input_tokens,
        }
    }
}

/// What an extension's `on_step_finish` sees (Think's `{ stepNumber, finishReason, text,
/// reasoningText, toolCallCount, toolResultCount, usage, providerMetadata }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepSnapshot {
    pub step_number: u32,
    /// The unified finish reason (`stop`, `length`, `tool-calls`, …).
    pub finish_reason: String,
    pub text: String,
    pub reasoning_text: Option<String>,
    pub tool_call_count: u32,
    pub tool_result_count: u32,
    pub usage: UsageSnapshot,
    pub provider_metadata: Option<Value>,
}

/// What an extension's `on_chunk` sees: minimal, because it fires per token (Think's
/// `{ type, text?, toolName?, toolCallId? }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChunkSnapshot {
    /// The stream part's type (`text-delta`, `tool-call`, …).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl From<&StreamPart> for ChunkSnapshot {
    fn from(part: &StreamPart) -> ChunkSnapshot {
        let (text, tool_name, tool_call_id) = match part {
            StreamPart::TextDelta { text, .. } | StreamPart::ReasoningDelta { text, .. } => {
                (Some(text.clone()), None, None)
            }
            StreamPart::ToolInputStart { call_id, tool_name }
            | StreamPart::ToolCall {
                call_id, tool_name, ..
            }
            | StreamPart::ToolResult {
                call_id, tool_name, ..
            }
            | StreamPart::ToolError {
                call_id, tool_name, ..
            } => (None, Some(tool_name.clone()), Some(call_id.clone())),
            StreamPart::ToolInputDelta { call_id, delta } => {
                (Some(delta.clone()), None, Some(call_id.clone()))
            }
            StreamPart::ToolInputEnd { call_id } => (None, None, Some(call_id.clone())),
            _ => (None, None, None),
        };
        ChunkSnapshot {
            kind: part.kind().to_owned(),
            text,
            tool_name,
            tool_call_id,
        }
    }
}
