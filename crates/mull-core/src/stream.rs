//! The parts a model streams during one step, as the engine logs them.
//!
//! The shapes follow the AI SDK's stream parts (text and reasoning in start/delta/end blocks,
//! tool input streamed before the complete call, a finish part with usage) so that a UI message
//! stream can be built from the log without loss.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token usage of one model call (or a sum of them). Absent counts mean the provider did not say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Generated tokens, reasoning included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Input plus output, as the provider reported it or as summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Output tokens spent on reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Input tokens served from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
}

impl Usage {
    /// Adds `other` into `self`; a count known on either side stays known.
    pub fn add(&mut self, other: &Usage) {
        fn sum(a: &mut Option<u64>, b: Option<u64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0) + b);
            }
        }
        sum(&mut self.input_tokens, other.input_tokens);
        sum(&mut self.output_tokens, other.output_tokens);
        sum(&mut self.total_tokens, other.total_tokens);
        sum(&mut self.reasoning_tokens, other.reasoning_tokens);
        sum(&mut self.cached_input_tokens, other.cached_input_tokens);
    }

    /// Total tokens: the reported total, else input + output.
    pub fn total(&self) -> u64 {
        self.total_tokens
            .unwrap_or(self.input_tokens.unwrap_or(0) + self.output_tokens.unwrap_or(0))
    }
}

/// Why a model stopped generating, unified across providers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// A natural end of the answer.
    Stop,
    /// The output token limit was reached.
    Length,
    /// The provider filtered the content.
    ContentFilter,
    /// The model called tools and expects their results.
    ToolCalls,
    /// The stream ended with an error.
    Error,
    /// A reason the provider named that maps to nothing above.
    Other,
    /// The provider gave no reason.
    #[default]
    Unknown,
}

impl FinishReason {
    /// The kebab-case name used on the wire and in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content-filter",
            FinishReason::ToolCalls => "tool-calls",
            FinishReason::Error => "error",
            FinishReason::Other => "other",
            FinishReason::Unknown => "unknown",
        }
    }
}

/// A citation the model used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source_type", rename_all = "snake_case")]
pub enum Source {
    /// A web page.
    Url {
        id: String,
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// A document the provider holds.
    Document {
        id: String,
        media_type: String,
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
}

/// What a provider warns about a call it accepted (the AI SDK's `CallWarning`): a setting or tool
/// it does not support and ignored, or anything else worth telling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CallWarning {
    /// A call setting the provider does not support was not sent (e.g. `top_k` on OpenAI).
    UnsupportedSetting {
        setting: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<String>,
    },
    /// A tool the provider cannot offer the model.
    UnsupportedTool {
        tool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<String>,
    },
    /// Any other warning.
    Other { message: String },
}

/// One part of a model's stream, or of a tool's output stream, as logged in a `chunk` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamPart {
    /// The model call was accepted; first part of a provider's stream. Carries what the provider
    /// warned about the request. Only the step record reads it (never `on_chunk` or a client).
    StreamStart {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<CallWarning>,
    },
    /// What the provider said about its response, as it became known: several parts may come,
    /// each filling what the earlier ones lacked. Only the step record reads it (never
    /// `on_chunk` or a client).
    ResponseMetadata {
        /// The provider's response id (`msg_…`, `chatcmpl-…`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The model that answered, as the provider names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_id: Option<String>,
        /// When the provider says it created the response.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<DateTime<Utc>>,
        /// The HTTP response headers (names lower-case; cookies left out).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        headers: Option<BTreeMap<String, String>>,
        /// `Some(false)` when the answer was served without streaming: the server was asked
        /// for one JSON response (configured so, or because its stream ended empty) and the
        /// parts were made from it. Absent for a streamed answer, and in logs written before
        /// the field existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        streamed: Option<bool>,
    },
    /// A text block opens.
    TextStart { id: String },
    /// More text for an open block.
    TextDelta { id: String, text: String },
    /// A text block closes.
    TextEnd { id: String },
    /// A reasoning block opens.
    ReasoningStart { id: String },
    /// More reasoning for an open block.
    ReasoningDelta { id: String, text: String },
    /// A reasoning block closes.
    ReasoningEnd { id: String },
    /// A citation.
    Source { source: Source },
    /// A generated file (data is base64 or a URL).
    File { media_type: String, data: String },
    /// The model starts streaming the input of a tool call.
    ToolInputStart { call_id: String, tool_name: String },
    /// More JSON text of a tool call's input.
    ToolInputDelta { call_id: String, delta: String },
    /// The tool call's input is complete.
    ToolInputEnd { call_id: String },
    /// A complete tool call. `input` is the JSON text exactly as the model produced it, so
    /// invalid JSON is kept as evidence rather than lost.
    ToolCall {
        call_id: String,
        tool_name: String,
        input: String,
    },
    /// A tool's result; `preliminary` results come from streaming tools before their final one.
    ToolResult {
        call_id: String,
        tool_name: String,
        output: Value,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        preliminary: bool,
    },
    /// A tool failed (invalid input, execute error, or a client's error result).
    ToolError {
        call_id: String,
        tool_name: String,
        error: String,
    },
    /// A provider-specific raw event, passed through untouched.
    Raw { value: Value },
    /// An in-band error from the provider; nothing after it in the step is used.
    Error { message: String },
    /// The end of the model's stream for this step.
    Finish {
        finish_reason: FinishReason,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw_finish_reason: Option<String>,
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<Value>,
    },
}

impl StreamPart {
    /// Whether the part is the model's output (text, reasoning, tool-call content, sources,
    /// files), not call metadata or a tool's result: what the GenAI conventions' "first chunk"
    /// and "time per output chunk" count, live and in a re-export alike.
    pub fn is_model_output(&self) -> bool {
        matches!(
            self,
            StreamPart::TextDelta { .. }
                | StreamPart::ReasoningDelta { .. }
                | StreamPart::ToolInputDelta { .. }
                | StreamPart::ToolCall { .. }
                | StreamPart::Source { .. }
                | StreamPart::File { .. }
        )
    }

    /// The part's kebab-case type name, as in the log and the AI SDK.
    pub fn kind(&self) -> &'static str {
        match self {
            StreamPart::StreamStart { .. } => "stream-start",
            StreamPart::ResponseMetadata { .. } => "response-metadata",
            StreamPart::TextStart { .. } => "text-start",
            StreamPart::TextDelta { .. } => "text-delta",
            StreamPart::TextEnd { .. } => "text-end",
            StreamPart::ReasoningStart { .. } => "reasoning-start",
            StreamPart::ReasoningDelta { .. } => "reasoning-delta",
            StreamPart::ReasoningEnd { .. } => "reasoning-end",
            StreamPart::Source { .. } => "source",
            StreamPart::File { .. } => "file",
            StreamPart::ToolInputStart { .. } => "tool-input-start",
            StreamPart::ToolInputDelta { .. } => "tool-input-delta",
            StreamPart::ToolInputEnd { .. } => "tool-input-end",
            StreamPart::ToolCall { .. } => "tool-call",
            StreamPart::ToolResult { .. } => "tool-result",
            StreamPart::ToolError { .. } => "tool-error",
            StreamPart::Raw { .. } => "raw",
            StreamPart::Error { .. } => "error",
            StreamPart::Finish { .. } => "finish",
        }
    }

    /// Whether `on_chunk` (and an extension's `on_chunk`) sees this part: exactly the kinds of the
    /// `ChunkContext` of Think (text-delta, reasoning-delta, source, tool-call, tool-input-start,
    /// tool-input-delta, tool-result, raw). Every other part is still logged and streamed.
    pub fn is_observed_chunk(&self) -> bool {
        matches!(
            self,
            StreamPart::TextDelta { .. }
                | StreamPart::ReasoningDelta { .. }
                | StreamPart::Source { .. }
                | StreamPart::ToolCall { .. }
                | StreamPart::ToolInputStart { .. }
                | StreamPart::ToolInputDelta { .. }
                | StreamPart::ToolResult { .. }
                | StreamPart::Raw { .. }
        )
    }

    /// Whether the part describes the call rather than its content (`stream-start`,
    /// `response-metadata`): it goes into the step record and the log, never to a client.
    pub fn is_call_metadata(&self) -> bool {
        matches!(
            self,
            StreamPart::StreamStart { .. } | StreamPart::ResponseMetadata { .. }
        )
    }

    /// Whether the part is reasoning (hidden from clients when `send_reasoning` is off).
    pub fn is_reasoning(&self) -> bool {
        matches!(
            self,
            StreamPart::ReasoningStart { .. }
                | StreamPart::ReasoningDelta { .. }
                | StreamPart::ReasoningEnd { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_serialize_with_kebab_types() {
        let part = StreamPart::TextDelta {
            id: "t0".into(),
            text: "hi".into(),
        };
        let json = serde_json::to_string(&part).unwrap_or_default();
        assert_eq!(json, r#"{"type":"text-delta","id":"t0","text":"hi"}"#);
        assert_eq!(part.kind(), "text-delta");
    }

    #[test]
    fn preliminary_is_omitted_when_false() {
        let part = StreamPart::ToolResult {
            call_id: "c".into(),
            tool_name: "t".into(),
            output: Value::Null,
            preliminary: false,
        };
        let json = serde_json::to_string(&part).unwrap_or_default();
        assert!(!json.contains("preliminary"));
        let back: StreamPart = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, part);
    }

    #[test]
    fn call_metadata_parts_round_trip_and_old_shapes_still_decode() {
        let start = StreamPart::StreamStart {
            warnings: vec![CallWarning::UnsupportedSetting {
                setting: "top_k".into(),
                details: None,
            }],
        };
        let json = serde_json::to_string(&start).unwrap_or_default();
        assert_eq!(
            json,
            r#"{"type":"stream-start","warnings":[{"type":"unsupported-setting","setting":"top_k"}]}"#
        );
        let back: StreamPart = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, start);
        // A metadata part with nothing known is just its type.
        let empty: StreamPart =
            serde_json::from_str(r#"{"type":"response-metadata"}"#).expect("decodes");
        assert!(empty.is_call_metadata() && !empty.is_observed_chunk());
        let finish: StreamPart =
            serde_json::from_str(r#"{"type":"finish","finish_reason":"stop","usage":{}}"#)
                .expect("an older finish decodes");
        assert!(!finish.is_observed_chunk());
    }

    #[test]
    fn usage_adds_known_counts() {
        let mut a = Usage {
            input_tokens: Some(10),
            ..Usage::default()
        };
        a.add(&Usage {
            input_tokens: Some(5),
            cached_input_tokens: Some(3),
            ..Usage::default()
        });
        assert_eq!(a.input_tokens, Some(15));
        assert_eq!(a.cached_input_tokens, Some(3));
        assert_eq!(a.output_tokens, None);
        assert_eq!(a.total(), 15);
    }
}
