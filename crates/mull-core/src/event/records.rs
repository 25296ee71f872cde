//! The records events carry whole: what a turn ran with, how a step's model call ended, and
//! the full step record `on_step_finish` receives.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{CallSettings, ToolChoice};
use crate::stream::{CallWarning, FinishReason, Source, Usage};

/// The merged TurnConfig of a turn, as data: what the turn actually ran with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnConfigRecord {
    pub provider: String,
    pub model_id: String,
    pub system: Option<String>,
    /// Model messages handed to the model on the first step.
    pub message_count: u32,
    /// Every tool of the turn, after merging.
    pub tool_names: Vec<String>,
    /// The tools the model may call, when limited.
    pub active_tools: Option<Vec<String>>,
    pub tool_choice: ToolChoice,
    pub max_steps: u32,
    /// Descriptions of every stop condition, `step_count_is(max_steps)` first.
    pub stop_when: Vec<String>,
    pub send_reasoning: bool,
    /// Call settings (header values redacted).
    pub settings: CallSettings,
    pub max_retries: u32,
    /// Whole-turn timeout.
    pub timeout_ms: Option<u64>,
    /// Longest gap allowed between two parts of the stream (0 = off).
    pub stall_timeout_ms: u64,
    /// Names of the stream transforms, in order.
    pub transforms: Vec<String>,
    /// Structured-output schema, when set.
    pub output_schema: Option<Value>,
    /// Which fields `before_turn` (or an extension) changed, e.g. `"system"`, `"ext:policy:max_steps"`.
    pub overrides: Vec<String>,
    /// Why an outside tool source (an MCP server) offered fewer tools than it has, one sentence
    /// naming the source each; empty when every source listed normally.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_problems: Vec<String>,
}

/// A tool call as a step record lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub call_id: String,
    pub tool_name: String,
    pub input: Value,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dynamic: bool,
}

/// A tool result as a step record lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultRecord {
    pub call_id: String,
    pub tool_name: String,
    pub input: Value,
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How one step's model call ended, as its `step_finished` records it.
///
/// The log keeps a step's content once: its text, reasoning, sources and files are its
/// chunks, its tool calls and results their `tool_call_started` and `tool_call_finished`
/// events. The report adds what only the end of the call tells (the finish reason, the usage,
/// what was sent and what answered); [`StepRecord`] puts the two together for
/// `on_step_finish`. Logs written when the report repeated the content still read: the
/// repeated fields are ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    pub step: u32,
    pub model_id: String,
    pub finish_reason: FinishReason,
    pub raw_finish_reason: Option<String>,
    pub usage: Usage,
    /// What the provider warned about the call (from its `stream-start` part).
    pub warnings: Vec<CallWarning>,
    /// What was sent, without secrets: a [`RequestSummary`](crate::RequestSummary) (hash,
    /// settings, tool names, message count, a digest per message), not the whole request.
    /// Logs written before the summary existed hold the whole redacted request here.
    pub request: Value,
    /// Response metadata (provider ids, model, timing).
    pub response: Value,
    pub provider_metadata: Option<Value>,
}

/// The full record of one step, as `on_step_finish` receives it: the step's
/// [`StepReport`] with its content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u32,
    pub model_id: String,
    pub text: String,
    pub reasoning_text: Option<String>,
    pub sources: Vec<Source>,
    /// Generated files as (media type, data).
    pub files: Vec<(String, String)>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub tool_results: Vec<ToolResultRecord>,
    pub finish_reason: FinishReason,
    pub raw_finish_reason: Option<String>,
    pub usage: Usage,
    /// What the provider warned about the call (from its `stream-start` part).
    pub warnings: Vec<CallWarning>,
    /// What was sent, as [`StepReport::request`] says.
    pub request: Value,
    /// Response metadata (provider ids, model, timing).
    pub response: Value,
    pub provider_metadata: Option<Value>,
}

impl StepRecord {
    /// The record of a step whose end `report` tells, with no content yet.
    pub fn from_report(report: StepReport) -> StepRecord {
        let StepReport {
            step,
            model_id,
            finish_reason,
            raw_finish_reason,
            usage,
            warnings,
            request,
            response,
            provider_metadata,
        } = report;
        StepRecord {
            step,
            model_id,
            finish_reason,
            raw_finish_reason,
            usage,
            warnings,
            request,
            response,
            provider_metadata,
            ..StepRecord::default()
        }
    }
}
