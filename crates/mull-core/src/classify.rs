//! Mapping raw provider errors to provider-agnostic categories.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{ModelError, ModelErrorKind};

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

/// How an error is told apart, strongest evidence first: a rate limit, an auth failure or a
/// provider's own "this is a rate limit" type is never an overflow, whatever its message says
/// ("429 too many tokens per minute" is about a quota, and compacting the conversation would not
/// help); a provider's overflow code is one; only then are messages read.
pub fn default_context_overflow_classifier<'a>(
    error: impl Into<ErrorInput<'a>>,
) -> Option<ChatErrorClassification> {
    let verdict = match error.into() {
        ErrorInput::Model(e) => classify_model_error(e),
        ErrorInput::Text(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => classify_json(&v),
            _ => classify_text(s),
        },
        ErrorInput::Json(v) => classify_json(v),
    };
    (verdict == Verdict::Overflow).then_some(ChatErrorClassification::ContextOverflow)
}

/// What one piece of evidence says; `Undecided` passes the question to the next, weaker one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Overflow,
    NotOverflow,
    Undecided,
}

fn classify_model_error(e: &ModelError) -> Verdict {
    if matches!(e.kind, ModelErrorKind::RateLimit | ModelErrorKind::Auth) {
        return Verdict::NotOverflow;
    }
    if let Some(status) = e.status {
        if let Some(v) = classify_status(status) {
            return v;
        }
    }
    let body = e
        .body
        .as_deref()
        .and_then(|b| serde_json::from_str::<Value>(b).ok());
    if let Some(body) = &body {
        match classify_structure(body) {
            Verdict::Undecided => {}
            decided => return decided,
        }
    }
    match classify_text(&e.message) {
        Verdict::Undecided => {}
        decided => return decided,
    }
    match (&body, e.body.as_deref()) {
        (Some(body), _) => classify_text(&message_text(body)),
        (None, Some(raw)) => classify_text(raw),
        (None, None) => Verdict::Undecided,
    }
}

fn classify_json(v: &Value) -> Verdict {
    match classify_structure(v) {
        Verdict::Undecided => classify_text(&message_text(v)),
        decided => decided,
    }
}

/// 429 is a rate limit and 401/403 a refusal, whatever the body says.
fn classify_status(status: u16) -> Option<Verdict> {
    matches!(status, 401 | 403 | 429).then_some(Verdict::NotOverflow)
}

/// Error types and codes providers put in their JSON bodies (lower case). A rate limit wins over
/// an overflow code: a body naming both is about the quota.
const RATE_LIMIT_CODES: &[&str] = &[
    "rate_limit",
    "resource_exhausted",
    "insufficient_quota",
    "throttling",
    "too_many_requests",
    "overloaded",
];
/// Whole-field rate-limit types: OpenAI's tokens-per-minute limit has `"type": "tokens"`.
const RATE_LIMIT_TYPES: &[&str] = &["tokens", "requests"];
const OVERFLOW_CODES: &[&str] = &[
    "context_length_exceeded",
    "string_above_max_length",
    "model_context_window_exceeded",
];

/// Reads the structured fields of a provider's body: `type`, `code` and `status`, at the top
/// level and under `error` (OpenAI, Anthropic, Google, Mistral and the compatible servers put
/// them there). A numeric `code` is an HTTP status (Google).
fn classify_structure(v: &Value) -> Verdict {
    let mut fields = Vec::new();
    for object in [Some(v), v.get("error")].into_iter().flatten() {
        for key in ["type", "code", "status", "__type"] {
            match object.get(key) {
                Some(Value::String(s)) => fields.push(s.to_ascii_lowercase()),
                Some(Value::Number(n)) => {
                    if let Some(v) = n
                        .as_u64()
                        .and_then(|n| u16::try_from(n).ok())
                        .and_then(classify_status)
                    {
                        return v;
                    }
                }
                _ => {}
            }
        }
    }
    if fields.iter().any(|f| {
        RATE_LIMIT_TYPES.contains(&f.as_str()) || RATE_LIMIT_CODES.iter().any(|c| f.contains(c))
    }) {
        return Verdict::NotOverflow;
    }
    if fields
        .iter()
        .any(|f| OVERFLOW_CODES.iter().any(|c| f.contains(c)))
    {
        return Verdict::Overflow;
    }
    Verdict::Undecided
}

/// The human-readable message of a JSON body (`message`, `error.message`, or `error` itself
/// when it is a string), else the whole body as text.
fn message_text(v: &Value) -> String {
    let candidates = [
        v.get("error").and_then(|e| e.get("message")),
        v.get("message"),
        v.get("error"),
        v.get("detail"),
    ];
    for c in candidates.into_iter().flatten() {
        if let Value::String(s) = c {
            return s.clone();
        }
    }
    v.to_string()
}

/// Phrases that mark a rate limit or quota in a message (lower case); they are read before the
/// overflow phrases, since rate-limit texts often speak of tokens ("tokens per minute").
const RATE_LIMIT_PHRASES: &[&str] = &[
    "rate limit",
    "rate_limit",
    "ratelimit",
    "too many requests",
    "per min",
    "per day",
    "per second",
    "tpm",
    "rpm",
    "quota",
    "throttl",
    "resource exhausted",
    "resource has been exhausted",
    "resource_exhausted",
    "please wait before",
    "try again in",
    "overloaded",
];

/// Phrases the major providers use when a prompt exceeds the context window (lower case).
const OVERFLOW_PHRASES: &[&str] = &[
    // Anthropic
    "prompt is too long",
    // OpenAI, vLLM, Mistral, OpenRouter
    "context_length_exceeded",
    "maximum context length",
    "reduce the length of",
    // OpenAI Responses
    "exceeds the context window",
    // Google
    "exceeds the maximum number of tokens",
    "input token count",
    // xAI
    "maximum prompt length",
    // llama.cpp
    "exceeds the available context size",
    // Others (Bedrock, local servers …)
    "input is too long",
    "too many tokens",
    "too many input tokens",
    "context window",
];

fn classify_text(text: &str) -> Verdict {
    let lower = text.to_lowercase();
    let words = || lower.split(|c: char| !c.is_ascii_alphanumeric());
    if words().any(|w| w == "429")
        || RATE_LIMIT_PHRASES.iter().any(|p| {
            if p.len() <= 3 {
                words().any(|w| w == *p)
            } else {
                lower.contains(p)
            }
        })
    {
        return Verdict::NotOverflow;
    }
    if OVERFLOW_PHRASES.iter().any(|p| lower.contains(p)) {
        Verdict::Overflow
    } else {
        Verdict::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    /// Messages and bodies as providers send them. `true`: compacting the conversation would
    /// help; `false`: it would not (rate limits that speak of tokens first among them).
    const REAL_MESSAGES: &[(&str, bool)] = &[
        // Anthropic
        (r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#, true),
        (r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (4f1c) of 40,000 input tokens per minute. For details, refer to: https://docs.anthropic.com/en/api/rate-limits."}}"#, false),
        (r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#, false),
        (r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet"}}"#, false),
        // OpenAI
        (r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#, true),
        ("Your input exceeds the context window of this model. Please adjust your input and try again.", true),
        (r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 28000, Requested 5000. Please try again in 6s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#, false),
        (r#"{"error":{"message":"Request too large for gpt-4 in organization org-abc on tokens per min (TPM): Limit 10000, Requested 12000. The input or output tokens must be reduced in order to run successfully.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#, false),
        (r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#, false),
        (r#"{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}"#, false),
        // Azure OpenAI
        ("Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds.", false),
        // Google Gemini
        (r#"{"error":{"code":400,"message":"The input token count (1196265) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#, true),
        (r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#, false),
        (r#"{"error":{"code":429,"message":"You exceeded your current quota. Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 250000","status":"RESOURCE_EXHAUSTED"}}"#, false),
        // Amazon Bedrock
        ("ValidationException: Input is too long for requested model.", true),
        ("ThrottlingException: Too many tokens, please wait before trying again.", false),
        ("ThrottlingException: Too many requests, please wait before trying again.", false),
        // Mistral, vLLM, xAI, llama.cpp, OpenRouter
        ("Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length", true),
        ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4500 in the messages, 500 in the completion).", true),
        ("This model's maximum prompt length is 131072 but the request contains 150000 tokens.", true),
        (r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#, true),
        ("Requests rate limit exceeded", false),
        // Groq
        ("Rate limit reached for model `llama3-70b-8192` in organization `org_x` on tokens per minute (TPM): Limit 6000, Used 0, Requested 7000. Please try again in 10s.", false),
        // The hostile case that started this table, and plain failures.
        ("429 too many tokens per minute", false),
        ("HTTP 429: too many tokens", false),
        ("Request timed out", false),
        ("500 Internal Server Error", false),
        ("error sending request: connection refused", false),
    ];

    #[test]
    fn real_provider_messages_table() {
        let mut wrong = Vec::new();
        for (message, overflow) in REAL_MESSAGES {
            let got = default_context_overflow_classifier(*message).is_some();
            if got != *overflow {
                wrong.push(format!("expected overflow={overflow}: {message}"));
            }
        }
        assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
    }

    #[test]
    fn status_and_kind_come_before_the_message() {
        // A rate limit whose message reads like an overflow.
        let mut err = ModelError::new(ModelErrorKind::RateLimit, "too many tokens");
        assert_eq!(default_context_overflow_classifier(&err), None);
        err.kind = ModelErrorKind::Other;
        err.status = Some(429);
        assert_eq!(default_context_overflow_classifier(&err), None);
        err.status = Some(400);
        assert!(default_context_overflow_classifier(&err).is_some());
        // The body's structure decides over the message, both ways.
        let mut err = ModelError::new(ModelErrorKind::InvalidRequest, "prompt is too long");
        err.body = Some(r#"{"error":{"type":"rate_limit_error","message":"x"}}"#.into());
        assert_eq!(default_context_overflow_classifier(&err), None);
        let mut err = ModelError::new(ModelErrorKind::InvalidRequest, "HTTP 400");
        err.body = Some(r#"{"error":{"code":"context_length_exceeded","message":"x"}}"#.into());
        assert!(default_context_overflow_classifier(&err).is_some());
        // A token count containing the digits 429 is not a status.
        assert!(default_context_overflow_classifier("prompt is too long: 204299 tokens").is_some());
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
