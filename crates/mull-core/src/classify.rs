//! Mapping raw provider errors to provider-agnostic categories.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::ModelError;

/// What kind of failure a turn error is, as `classify_chat_error` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatErrorClassification {
    /// The prompt no longer fits the model's context window.
    ContextOverflow,
    RateLimit,
    Transient,
    Fatal,
    Unknown,
}

/// The forms an error reaches a classifier in: a model error, a message, or a JSON body.
#[derive(Debug, Clone, Copy)]
pub enum ErrorInput<'a> {
    Model(&'a ModelError),
    Text(&'a str),
    Json(&'a Value),
}

impl<'a> From<&'a ModelError> for ErrorInput<'a> {
    fn from(e: &'a ModelError) -> Self {
        ErrorInput::Model(e)
    }
}
impl<'a> From<&'a str> for ErrorInput<'a> {
    fn from(s: &'a str) -> Self {
        ErrorInput::Text(s)
    }
}
impl<'a> From<&'a String> for ErrorInput<'a> {
    fn from(s: &'a String) -> Self {
        ErrorInput::Text(s)
    }
}
impl<'a> From<&'a Value> for ErrorInput<'a> {
    fn from(v: &'a Value) -> Self {
        ErrorInput::Json(v)
    }
}

/// Phrases the major providers use when a prompt exceeds the context window (lower case).
const OVERFLOW_PHRASES: &[&str] = &[
    // Anthropic
    "prompt is too long",
    // OpenAI
    "context_length_exceeded",
    "maximum context length",
    "reduce the length of",
    // Google
    "exceeds the maximum number of tokens",
    "input token count",
    // Others (Bedrock, Mistral, local servers …)
    "input is too long",
    "too many tokens",
    "too many input tokens",
    "context window",
];

/// Recognises context-overflow errors of Anthropic, OpenAI, Google and others by their
/// messages, case-insensitively. Anything else (rate limits, timeouts, auth, 5xx, network)
/// gets `None`, so the turn ends as usual.
pub fn default_context_overflow_classifier<'a>(
    error: impl Into<ErrorInput<'a>>,
) -> Option<ChatErrorClassification> {
    let text = match error.into() {
        ErrorInput::Model(e) => {
            let mut t = e.message.clone();
            if let Some(body) = &e.body {
                t.push(' ');
                t.push_str(body);
            }
            t
        }
        ErrorInput::Text(s) => s.to_owned(),
        ErrorInput::Json(v) => v.to_string(),
    };
    let lower = text.to_lowercase();
    OVERFLOW_PHRASES
        .iter()
        .any(|p| lower.contains(p))
        .then_some(ChatErrorClassification::ContextOverflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelErrorKind;
    use serde_json::json;

    #[test]
    fn matches_each_providers_overflow_message() {
        for msg in [
            "prompt is too long: 212345 tokens > 200000 maximum",
            "Error code: context_length_exceeded",
            "This model's maximum context length is 128000 tokens",
            "Please reduce the length of the messages or completion.",
            "The input token count (1200000) exceeds the maximum number of tokens allowed",
            "Input is too long for requested model.",
            "Too many tokens in request",
            "too many input tokens",
            "Request exceeds the CONTEXT WINDOW of this model",
        ] {
            assert_eq!(
                default_context_overflow_classifier(msg),
                Some(ChatErrorClassification::ContextOverflow),
                "{msg}"
            );
        }
    }

    #[test]
    fn ignores_other_failures() {
        for msg in [
            "Rate limit exceeded, retry after 20s",
            "Request timed out",
            "401 Unauthorized: invalid x-api-key",
            "500 Internal Server Error",
            "error sending request: connection refused",
        ] {
            assert_eq!(default_context_overflow_classifier(msg), None, "{msg}");
        }
    }

    #[test]
    fn accepts_json_and_model_errors() {
        let body =
            json!({"error": {"type": "invalid_request_error", "message": "prompt is too long"}});
        assert!(default_context_overflow_classifier(&body).is_some());
        let mut err = ModelError::new(ModelErrorKind::InvalidRequest, "HTTP 400");
        assert!(default_context_overflow_classifier(&err).is_none());
        err.body = Some(r#"{"code":"context_length_exceeded"}"#.into());
        assert!(default_context_overflow_classifier(&err).is_some());
    }
}
