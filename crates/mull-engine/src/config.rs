//! What `before_turn` and `before_step` may change: [`TurnConfig`] for the whole turn and
//! [`StepConfig`] for one step, and how a TurnConfig merges into the defaults (`ResolvedTurn`).
//!
//! Merge rules (Think's): scalar fields replace the default; `tools` are added to the turn's
//! tools (winning on a name clash); `stop_when` adds to `step_count_is(max_steps)`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mull_core::{
    CallSettings, LanguageModel, ModelMessage, StreamPart, ToolChoice, TurnConfigRecord,
};
use serde_json::Value;

use crate::stop::{step_count_is, StopCondition};
use crate::tool::ToolSet;
use crate::transform::StreamTransform;

/// A model override: a model, or an id the agent's `resolve_model` turns into one.
#[derive(Clone)]
pub enum ModelChoice {
    /// A model id, resolved by `Agent::resolve_model`; an id it does not know fails the turn.
    Id(String),
    /// A model.
    Model(Arc<dyn LanguageModel>),
}

impl std::fmt::Debug for ModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelChoice::Id(id) => write!(f, "Id({id})"),
            ModelChoice::Model(m) => write!(f, "Model({}/{})", m.provider(), m.model_id()),
        }
    }
}

/// Time limits of a turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeout {
    /// The whole turn (every step, tool and retry) must end within this.
    pub total: Option<Duration>,
    /// No gap between two stream parts may be longer than this (the stall watchdog).
    pub chunk: Option<Duration>,
}

/// Metadata for the turn's assistant message, from each stream part the user sees (the AI
/// SDK's `messageMetadata`): return the keys to shallow-merge into the message's metadata, or
/// `None` for nothing. Each answer is a `message_metadata_updated` event, so the metadata is
/// persisted with the message and reaches clients as the AI SDK's `message-metadata` chunk.
///
/// ```
/// # use mull_engine::{MessageMetadata, TurnConfig};
/// # use mull_core::StreamPart;
/// let config = TurnConfig {
///     message_metadata: Some(MessageMetadata::new(|part| match part {
///         StreamPart::Finish { usage, .. } => {
///             let mut keys = serde_json::Map::new();
///             keys.insert("outputTokens".into(), serde_json::json!(usage.output_tokens));
///             Some(keys)
///         }
///         _ => None,
///     })),
///     ..TurnConfig::default()
/// };
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct MessageMetadata(Arc<MetadataFn>);

type MetadataFn = dyn Fn(&StreamPart) -> Option<serde_json::Map<String, Value>> + Send + Sync;

impl MessageMetadata {
    /// Metadata from `f`, called with every part the user sees, in order.
    pub fn new(
        f: impl Fn(&StreamPart) -> Option<serde_json::Map<String, Value>> + Send + Sync + 'static,
    ) -> MessageMetadata {
        MessageMetadata(Arc::new(f))
    }

    /// The keys to merge for `part` (`None` also for an empty answer).
    pub(crate) fn of(&self, part: &StreamPart) -> Option<serde_json::Map<String, Value>> {
        (self.0)(part).filter(|keys| !keys.is_empty())
    }
}

impl std::fmt::Debug for MessageMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MessageMetadata(..)")
    }
}

/// Overrides `before_turn` returns. Every field is optional; set only what you change.
#[derive(Clone, Default, Debug)]
pub struct TurnConfig {
    pub model: Option<ModelChoice>,
    pub system: Option<String>,
    pub messages: Option<Vec<ModelMessage>>,
    /// Extra tools, merged into the turn's tools (they win on a name clash).
    pub tools: Option<ToolSet>,
    pub active_tools: Option<Vec<String>>,
    pub tool_choice: Option<ToolChoice>,
    pub max_steps: Option<u32>,
    /// Extra stop conditions, added to `step_count_is(max_steps)`.
    pub stop_when: Vec<StopCondition>,
    pub send_reasoning: Option<bool>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub stop_sequences: Option<Vec<String>>,
    pub seed: Option<u64>,
    pub max_retries: Option<u32>,
    pub timeout: Option<Timeout>,
    /// The stall watchdog for this turn in ms; 0 disables it.
    pub chat_stream_stall_timeout_ms: Option<u64>,
    pub headers: Option<BTreeMap<String, String>>,
    pub provider_options: Option<Value>,
    /// Stream transforms, applied in order.
    pub transforms: Vec<StreamTransform>,
    /// Structured-output JSON Schema for the turn.
    pub output: Option<Value>,
    /// Metadata for the assistant message from each stream part (see [`MessageMetadata`]).
    pub message_metadata: Option<MessageMetadata>,
}

/// A step's system prompt, as Think's `StepConfig.system` allows it: a string, or system
/// messages (sent as `system` role messages ahead of the conversation, for providers that
/// take several system blocks, e.g. with cache settings of their own).
#[derive(Clone, Debug, PartialEq)]
pub enum SystemPrompt {
    Text(String),
    /// Messages of role `system` only; any other role fails the step with a clear error.
    Messages(Vec<ModelMessage>),
}

impl SystemPrompt {
    /// The text of the prompt, system messages joined by blank lines (what `step_configured`
    /// records).
    pub fn text(&self) -> String {
        match self {
            SystemPrompt::Text(text) => text.clone(),
            SystemPrompt::Messages(messages) => messages
                .iter()
                .flat_map(|m| &m.content)
                .filter_map(|c| match c {
                    mull_core::ModelContent::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n\n"),
        }
    }
}

impl From<&str> for SystemPrompt {
    fn from(text: &str) -> SystemPrompt {
        SystemPrompt::Text(text.to_owned())
    }
}

impl From<String> for SystemPrompt {
    fn from(text: String) -> SystemPrompt {
        SystemPrompt::Text(text)
    }
}

impl From<ModelMessage> for SystemPrompt {
    fn from(message: ModelMessage) -> SystemPrompt {
        SystemPrompt::Messages(vec![message])
    }
}

impl From<Vec<ModelMessage>> for SystemPrompt {
    fn from(messages: Vec<ModelMessage>) -> SystemPrompt {
        SystemPrompt::Messages(messages)
    }
}

/// Overrides `before_step` returns for one step.
#[derive(Clone, Default, Debug)]
pub struct StepConfig {
    pub model: Option<ModelChoice>,
    pub tool_choice: Option<ToolChoice>,
    pub active_tools: Option<Vec<String>>,
    /// This step's system prompt: a string or system messages (`"…".into()` for a string).
    pub system: Option<SystemPrompt>,
    pub messages: Option<Vec<ModelMessage>>,
    /// Context passed to tool execution from this step on.
    pub context: Option<Value>,
    pub provider_options: Option<Value>,
}

/// Defaults of a turn before `before_turn` runs (the agent's settings and the assembled context).
#[derive(Clone)]
pub(crate) struct TurnDefaults {
    pub model: Arc<dyn LanguageModel>,
    pub system: String,
    pub messages: Vec<ModelMessage>,
    pub tools: ToolSet,
    pub max_steps: u32,
    pub send_reasoning: bool,
    pub max_retries: u32,
    pub stall_timeout_ms: u64,
}

/// What a turn runs with, after merging.
#[derive(Clone)]
pub(crate) struct ResolvedTurn {
    pub model: Arc<dyn LanguageModel>,
    pub system: String,
    pub messages: Vec<ModelMessage>,
    pub tools: ToolSet,
    pub active_tools: Option<Vec<String>>,
    pub tool_choice: ToolChoice,
    pub max_steps: u32,
    pub stop_when: Vec<StopCondition>,
    pub send_reasoning: bool,
    pub settings: CallSettings,
    pub max_retries: u32,
    pub total_timeout: Option<Duration>,
    pub stall_timeout_ms: u64,
    pub transforms: Vec<StreamTransform>,
    pub output: Option<Value>,
    pub message_metadata: Option<MessageMetadata>,
    pub overrides: Vec<String>,
}

impl ResolvedTurn {
    /// Merges `config` over `defaults`; `model` is the already-resolved override, if any.
    pub fn merge(
        defaults: TurnDefaults,
        config: TurnConfig,
        model: Option<Arc<dyn LanguageModel>>,
    ) -> ResolvedTurn {
        let mut overrides = Vec::new();
        let mut mark = |name: &str, set: bool| {
            if set {
                overrides.push(name.to_owned());
            }
        };
        mark("model", config.model.is_some());
        mark("system", config.system.is_some());
        mark("messages", config.messages.is_some());
        mark("tools", config.tools.is_some());
        mark("active_tools", config.active_tools.is_some());
        mark("tool_choice", config.tool_choice.is_some());
        mark("max_steps", config.max_steps.is_some());
        mark("stop_when", !config.stop_when.is_empty());
        mark("send_reasoning", config.send_reasoning.is_some());
        mark("max_output_tokens", config.max_output_tokens.is_some());
        mark("temperature", config.temperature.is_some());
        mark("top_p", config.top_p.is_some());
        mark("top_k", config.top_k.is_some());
        mark("presence_penalty", config.presence_penalty.is_some());
        mark("frequency_penalty", config.frequency_penalty.is_some());
        mark("stop_sequences", config.stop_sequences.is_some());
        mark("seed", config.seed.is_some());
        mark("max_retries", config.max_retries.is_some());
        mark("timeout", config.timeout.is_some());
        mark(
            "chat_stream_stall_timeout_ms",
            config.chat_stream_stall_timeout_ms.is_some(),
        );
        mark("headers", config.headers.is_some());
        mark("provider_options", config.provider_options.is_some());
        mark("transforms", !config.transforms.is_empty());
        mark("output", config.output.is_some());
        mark("message_metadata", config.message_metadata.is_some());

        let mut tools = defaults.tools;
        if let Some(extra) = &config.tools {
            tools.merge(extra);
        }
        let max_steps = config.max_steps.unwrap_or(defaults.max_steps);
        let mut stop_when = vec![step_count_is(max_steps)];
        stop_when.extend(config.stop_when);
        let timeout = config.timeout.unwrap_or_default();
        let stall_timeout_ms = match config.chat_stream_stall_timeout_ms {
            Some(ms) => ms,
            None => timeout
                .chunk
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(defaults.stall_timeout_ms),
        };
        ResolvedTurn {
            model: model.unwrap_or(defaults.model),
            system: config.system.unwrap_or(defaults.system),
            messages: config.messages.unwrap_or(defaults.messages),
            tools,
            active_tools: config.active_tools,
            tool_choice: config.tool_choice.unwrap_or_default(),
            max_steps,
            stop_when,
            send_reasoning: config.send_reasoning.unwrap_or(defaults.send_reasoning),
            settings: CallSettings {
                max_output_tokens: config.max_output_tokens,
                temperature: config.temperature,
                top_p: config.top_p,
                top_k: config.top_k,
                presence_penalty: config.presence_penalty,
                frequency_penalty: config.frequency_penalty,
                stop_sequences: config.stop_sequences.unwrap_or_default(),
                seed: config.seed,
                headers: config.headers.unwrap_or_default(),
                provider_options: config.provider_options,
            },
            max_retries: config.max_retries.unwrap_or(defaults.max_retries),
            total_timeout: timeout.total,
            stall_timeout_ms,
            transforms: config.transforms,
            output: config.output,
            message_metadata: config.message_metadata,
            overrides,
        }
    }

    /// The record `turn_configured` carries.
    pub fn record(&self) -> TurnConfigRecord {
        TurnConfigRecord {
            provider: self.model.provider().to_owned(),
            model_id: self.model.model_id().to_owned(),
            system: (!self.system.is_empty()).then(|| self.system.clone()),
            message_count: u32::try_from(self.messages.len()).unwrap_or(u32::MAX),
            tool_names: self.tools.names(),
            active_tools: self.active_tools.clone(),
            tool_choice: self.tool_choice.clone(),
            max_steps: self.max_steps,
            stop_when: self.stop_when.iter().map(|c| c.name().to_owned()).collect(),
            send_reasoning: self.send_reasoning,
            settings: self.settings.redacted(),
            max_retries: self.max_retries,
            timeout_ms: self
                .total_timeout
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            stall_timeout_ms: self.stall_timeout_ms,
            transforms: self
                .transforms
                .iter()
                .map(|t| t.name().to_owned())
                .collect(),
            output_schema: self.output.clone(),
            overrides: self.overrides.clone(),
            tool_problems: Vec::new(),
        }
    }
}
