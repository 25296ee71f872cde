//! A `before_turn` reply: the scalar fields an extension may set, how a reply is read (an
//! unknown field or a wrong type names the field), and how it changes the turn.

use std::collections::BTreeMap;
use std::time::Duration;

use mull_core::{ModelMessage, ToolChoice};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::ResolvedTurn;
use crate::stop::step_count_is;

/// A tool choice as the AI SDK writes it: `"auto"`, `"none"`, `"required"`, or
/// `{ "type": "tool", "toolName": "search" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ToolChoicePatch {
    /// `"auto"`, `"none"` or `"required"`.
    Mode(ToolChoiceMode),
    /// One tool, forced.
    Tool(ForcedTool),
}

/// The tool choices that name no tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceMode {
    Auto,
    None,
    Required,
}

/// `{ "type": "tool", "toolName": … }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForcedTool {
    #[serde(rename = "type")]
    pub kind: ForcedToolKind,
    pub tool_name: String,
}

/// The only `type` a forced tool choice has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ForcedToolKind {
    Tool,
}

impl From<ToolChoicePatch> for ToolChoice {
    fn from(c: ToolChoicePatch) -> ToolChoice {
        match c {
            ToolChoicePatch::Mode(ToolChoiceMode::Auto) => ToolChoice::Auto,
            ToolChoicePatch::Mode(ToolChoiceMode::None) => ToolChoice::None,
            ToolChoicePatch::Mode(ToolChoiceMode::Required) => ToolChoice::Required,
            ToolChoicePatch::Tool(ForcedTool { tool_name, .. }) => ToolChoice::Tool { tool_name },
        }
    }
}

/// Time limits an extension may set for the turn (Think's `TimeoutConfiguration`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimeoutPatch {
    /// The whole turn must end within this many ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<u64>,
    /// No gap between two stream parts may be longer (the stall watchdog; 0 turns it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_ms: Option<u64>,
}

/// What an extension's `before_turn` may return: the scalar part of Think's TurnConfig, with
/// its field names (`activeTools`, `maxSteps`, `toolChoice` …).
///
/// `model`, `tools`, `stopWhen`, `experimental_transform` and `output` are accepted so a
/// Think-shaped reply decodes, and ignored: they are code or live objects, which an extension
/// cannot own. Any other field, or a value of the wrong type, makes the reply fail as a whole
/// ([`TurnConfigPatch::from_json`] names the field), so a misspelt field is never silently
/// dropped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnConfigPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Model messages in mull's `ModelMessage` shape (`{role, content: [...]}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<Map<String, Value>>>")]
    pub messages: Option<Vec<ModelMessage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoicePatch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_reasoning: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<TimeoutPatch>,
    /// The stall watchdog for this turn, in ms (0 turns it off); wins over `timeout.chunkMs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_stream_stall_timeout_ms: Option<u64>,
    /// Merged into the turn's headers key by key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Merged into the turn's provider options key by key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_options: Option<Map<String, Value>>,
    /// Ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Value>,
    /// Ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// Ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_when: Option<Value>,
    /// Ignored (Think's `experimental_transform`).
    #[serde(
        rename = "experimental_transform",
        skip_serializing_if = "Option::is_none"
    )]
    pub transforms: Option<Value>,
    /// Ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
}

/// A `before_turn` reply that is not a [`TurnConfigPatch`], naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The reply is not a JSON object (nor `null`).
    #[error("the reply is {0}, not an object or null")]
    NotAnObject(&'static str),
    /// Think's TurnConfig has no field of that name.
    #[error(
        "field {field:?} is not a TurnConfig field (they are camelCase, e.g. \"activeTools\")"
    )]
    UnknownField { field: String },
    /// The field's value has the wrong type or shape.
    #[error("field {field:?}: {problem}")]
    BadValue { field: String, problem: String },
}

impl TurnConfigPatch {
    /// Every field name a reply may use.
    pub const FIELDS: [&'static str; 24] = [
        "system",
        "messages",
        "activeTools",
        "toolChoice",
        "maxSteps",
        "sendReasoning",
        "maxOutputTokens",
        "temperature",
        "topP",
        "topK",
        "presencePenalty",
        "frequencyPenalty",
        "stopSequences",
        "seed",
        "maxRetries",
        "timeout",
        "chatStreamStallTimeoutMs",
        "headers",
        "providerOptions",
        "model",
        "tools",
        "stopWhen",
        "experimental_transform",
        "output",
    ];

    /// Decodes a `before_turn` reply (`null`: change nothing), field by field, so an error
    /// names the field that is unknown or of the wrong type.
    pub fn from_json(reply: &Value) -> Result<Option<TurnConfigPatch>, PatchError> {
        let fields = match reply {
            Value::Null => return Ok(None),
            Value::Object(fields) => fields,
            Value::Bool(_) => return Err(PatchError::NotAnObject("a boolean")),
            Value::Number(_) => return Err(PatchError::NotAnObject("a number")),
            Value::String(_) => return Err(PatchError::NotAnObject("a string")),
            Value::Array(_) => return Err(PatchError::NotAnObject("an array")),
        };
        for (field, value) in fields {
            if !Self::FIELDS.contains(&field.as_str()) {
                return Err(PatchError::UnknownField {
                    field: field.clone(),
                });
            }
            let mut one = Map::new();
            one.insert(field.clone(), value.clone());
            serde_json::from_value::<TurnConfigPatch>(Value::Object(one)).map_err(|e| {
                PatchError::BadValue {
                    field: field.clone(),
                    problem: e.to_string(),
                }
            })?;
        }
        serde_json::from_value(reply.clone())
            .map(Some)
            .map_err(|e| PatchError::BadValue {
                field: String::new(),
                problem: e.to_string(),
            })
    }
}

/// Merges an extension's scalar fields into the turn and records them as overrides.
pub(crate) fn apply_patch(resolved: &mut ResolvedTurn, extension: &str, patch: TurnConfigPatch) {
    let mut set: Vec<&str> = Vec::new();
    let settings = &mut resolved.settings;
    macro_rules! replace {
        ($field:ident => $target:expr) => {
            if let Some(value) = patch.$field {
                $target = value.into();
                set.push(stringify!($field));
            }
        };
    }
    replace!(system => resolved.system);
    replace!(messages => resolved.messages);
    if let Some(active) = patch.active_tools {
        resolved.active_tools = Some(active);
        set.push("active_tools");
    }
    replace!(tool_choice => resolved.tool_choice);
    if let Some(max_steps) = patch.max_steps {
        resolved.max_steps = max_steps;
        // The merge puts `step_count_is(max_steps)` first; the limit moves with max_steps.
        match resolved.stop_when.first_mut() {
            Some(first) => *first = step_count_is(max_steps),
            None => resolved.stop_when.push(step_count_is(max_steps)),
        }
        set.push("max_steps");
    }
    replace!(send_reasoning => resolved.send_reasoning);
    if let Some(v) = patch.max_output_tokens {
        settings.max_output_tokens = Some(v);
        set.push("max_output_tokens");
    }
    if let Some(v) = patch.temperature {
        settings.temperature = Some(v);
        set.push("temperature");
    }
    if let Some(v) = patch.top_p {
        settings.top_p = Some(v);
        set.push("top_p");
    }
    if let Some(v) = patch.top_k {
        settings.top_k = Some(v);
        set.push("top_k");
    }
    if let Some(v) = patch.presence_penalty {
        settings.presence_penalty = Some(v);
        set.push("presence_penalty");
    }
    if let Some(v) = patch.frequency_penalty {
        settings.frequency_penalty = Some(v);
        set.push("frequency_penalty");
    }
    replace!(stop_sequences => settings.stop_sequences);
    if let Some(v) = patch.seed {
        settings.seed = Some(v);
        set.push("seed");
    }
    replace!(max_retries => resolved.max_retries);
    if let Some(timeout) = patch.timeout {
        if let Some(total) = timeout.total_ms {
            resolved.total_timeout = Some(Duration::from_millis(total));
        }
        if let Some(chunk) = timeout.chunk_ms {
            resolved.stall_timeout_ms = chunk;
        }
        set.push("timeout");
    }
    if let Some(ms) = patch.chat_stream_stall_timeout_ms {
        resolved.stall_timeout_ms = ms;
        set.push("chat_stream_stall_timeout_ms");
    }
    if let Some(headers) = patch.headers {
        settings.headers.extend(headers);
        set.push("headers");
    }
    if let Some(options) = patch.provider_options {
        let mut merged = match settings.provider_options.take() {
            Some(Value::Object(existing)) => existing,
            _ => Map::new(),
        };
        merged.extend(options);
        settings.provider_options = Some(Value::Object(merged));
        set.push("provider_options");
    }
    let ignored: Vec<&str> = [
        ("model", patch.model.is_some()),
        ("tools", patch.tools.is_some()),
        ("stop_when", patch.stop_when.is_some()),
        ("transforms", patch.transforms.is_some()),
        ("output", patch.output.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, present)| present.then_some(name))
    .collect();
    if !ignored.is_empty() {
        tracing::debug!(extension, ?ignored, "extension before_turn fields ignored");
    }
    resolved.overrides.extend(
        set.into_iter()
            .map(|field| format!("ext:{extension}:{field}")),
    );
}
