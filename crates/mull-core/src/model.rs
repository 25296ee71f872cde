//! The interface every model provider implements, and the request the engine sends it.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_core::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stream::StreamPart;

/// The stream of parts a model produces for one step.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<StreamPart, ModelError>> + Send>>;

/// A language model that streams one step at a time.
#[async_trait]
pub trait LanguageModel: Send + Sync {
    /// The provider's name (`openai`, `anthropic`, `scripted` …).
    fn provider(&self) -> &str;
    /// The model's id as the provider names it.
    fn model_id(&self) -> &str;
    /// Where the provider is reached, as host and port (the GenAI conventions'
    /// `server.address` and `server.port`); `None` for a model not reached over a network.
    fn server(&self) -> Option<(String, u16)> {
        None
    }
    /// Starts one model call. Errors before the first part (a refused request) come back here;
    /// errors later come through the stream.
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError>;
}

/// Sampling and transport settings of one model call (TurnConfig's call settings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Extra request headers. Only their names reach the log; values may be secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Provider-specific options, passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_options: Option<Value>,
}

impl CallSettings {
    /// The settings with header values replaced, fit for the log.
    pub fn redacted(&self) -> CallSettings {
        let mut out = self.clone();
        for value in out.headers.values_mut() {
            *value = "[redacted]".to_owned();
        }
        out
    }
}

/// Which tools the model may or must call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool must be called.
    Tool { tool_name: String },
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the input, shared: the same schema goes into every step's request.
    pub input_schema: Arc<Value>,
}

/// Who speaks in a model message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelRole {
    System,
    User,
    Assistant,
    Tool,
}

/// One piece of a model message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ModelContent {
    Text {
        text: String,
    },
    Reasoning {
        text: String,
    },
    File {
        media_type: String,
        url: String,
    },
    ToolCall {
        call_id: String,
        tool_name: String,
        input: Value,
    },
    ToolResult {
        call_id: String,
        tool_name: String,
        output: Value,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// A message in the form providers take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMessage {
    pub role: ModelRole,
    pub content: Vec<ModelContent>,
}

impl ModelMessage {
    /// A message with one text part.
    pub fn text(role: ModelRole, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![ModelContent::Text { text: text.into() }],
        }
    }

    /// Rough size in characters, for truncation and token estimates.
    pub fn char_len(&self) -> usize {
        self.content
            .iter()
            .map(|c| match c {
                ModelContent::Text { text } | ModelContent::Reasoning { text } => text.len(),
                ModelContent::File { url, .. } => url.len(),
                ModelContent::ToolCall { input, .. } => input.to_string().len(),
                ModelContent::ToolResult { output, .. } => output.to_string().len(),
            })
            .sum()
    }
}

/// Everything one model call needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    pub system: Option<String>,
    pub messages: Vec<ModelMessage>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub settings: CallSettings,
    /// Structured-output schema for the turn, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// What kind of failure a model call met; drives retries and error classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelErrorKind {
    /// The request was malformed or refused (4xx other than the ones below).
    InvalidRequest,
    /// 401 / 403.
    Auth,
    /// 429.
    RateLimit,
    /// 5xx, network failures, cut streams: worth retrying.
    Transient,
    /// The stream itself was malformed (bad SSE, bad JSON).
    Protocol,
    /// Anything else.
    Other,
}

/// A failed model call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    pub kind: ModelErrorKind,
    pub message: String,
    /// HTTP status, when there was one.
    pub status: Option<u16>,
    /// How long the provider asked us to wait before retrying.
    pub retry_after: Option<Duration>,
    /// The provider's error body, when there was one.
    pub body: Option<String>,
}

impl ModelError {
    /// An error of `kind` with a message.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
            body: None,
        }
    }

    /// Whether retrying the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ModelErrorKind::RateLimit | ModelErrorKind::Transient
        )
    }
}

/// A [`ModelError`] as the log keeps it: everything `classify_chat_error` and `on_chat_error`
/// may read, so a replay can fail a step with the same error the model gave, and the dashboard
/// can show the provider's status and body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelErrorRecord {
    pub kind: ModelErrorKind,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

impl From<&ModelError> for ModelErrorRecord {
    fn from(error: &ModelError) -> Self {
        ModelErrorRecord {
            kind: error.kind,
            message: error.message.clone(),
            status: error.status,
            retry_after_ms: error
                .retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            body: error.body.clone(),
        }
    }
}

impl From<ModelErrorRecord> for ModelError {
    fn from(record: ModelErrorRecord) -> Self {
        ModelError {
            kind: record.kind,
            message: record.message,
            status: record.status,
            retry_after: record.retry_after_ms.map(Duration::from_millis),
            body: record.body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_hash_ignores_header_values_but_not_content() {
        let mut a = ModelRequest {
            system: Some("be brief".into()),
            messages: vec![ModelMessage::text(ModelRole::User, "hi")],
            ..ModelRequest::default()
        };
        a.settings
            .headers
            .insert("authorization".into(), "Bearer one".into());
        let mut b = a.clone();
        b.settings
            .headers
            .insert("authorization".into(), "Bearer two".into());
        assert_eq!(a.canonical_hash(), b.canonical_hash());
        assert_eq!(a.canonical_hash().len(), 64);
        b.messages.push(ModelMessage::text(ModelRole::User, "more"));
        assert_ne!(a.canonical_hash(), b.canonical_hash());
    }
}
