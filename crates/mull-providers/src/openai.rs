//! OpenAI Chat Completions over streaming SSE, for OpenAI and the servers that copy its API
//! (llama.cpp's `llama-server`, vLLM, Ollama's `/v1`, LM Studio …).
//!
//! **Request.** `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage: true`. The system prompt is the first `system` message;
//! assistant tool calls become `tool_calls` (`arguments` is JSON text) and tool results
//! `role: "tool"` messages; an assistant message's `content` is always a string (`""` beside
//! tool calls, which every compatible server accepts; several fail on `null`); tools are `{"type": "function", "function": {name, description,
//! parameters}}`; the output schema becomes `response_format: json_schema`. Every call setting is
//! sent under its Chat Completions name (`max_output_tokens` goes to `max_completion_tokens` for
//! OpenAI, `max_tokens` for other servers — see [`MaxTokensField`]; `top_k` only where the server
//! accepts it); `provider_options` (an object) is merged into the top level of the body, its keys
//! winning. Reasoning from earlier turns is not sent back: the API has no field for it.
//!
//! **Stream.** Each `data:` line is one `chat.completion.chunk`; `data: [DONE]` ends the stream.
//! `delta.content` becomes text-start/delta/end, `delta.reasoning_content` (or `delta.reasoning`,
//! as some local servers name it) reasoning-start/delta/end, and `delta.tool_calls` fragments are
//! assembled by `index` into tool-input-start/delta/end followed by one tool-call with the
//! complete JSON text. The usage chunk (empty `choices`) fills the finish part's usage, with
//! `prompt_tokens_details.cached_tokens` and `completion_tokens_details.reasoning_tokens`.
//!
//! **Errors.** HTTP failures map as described in [`crate::http`]. An `error` object in a data line
//! ends the stream with an error whose kind follows its `type` / `code` and whose body is the
//! line. Invalid JSON in a data line, a chunk whose known fields have the wrong type (`choices` not a
//! list, a `delta` that is not an object, `content` that is not a string …) is a `Protocol` error
//! naming the field. Unknown fields are ignored. A stream that ends before any `finish_reason` or
//! `[DONE]` (an empty 200 included) is followed by one non-streaming probe of the same request,
//! whose answer becomes the error (the crate's `probe` module): an overflow refused only
//! without streaming is then classified as one.
//!
//! **Streaming or not** ([`Streaming`]). By default a stream that ends empty — before any text,
//! reasoning or tool call — is not a failure yet: the whole request goes again without
//! streaming, and when that is answered its `chat.completion` becomes the same parts a stream
//! would have given (the response metadata marked `streamed: false` in the log), and this model
//! sends its later calls without streaming, so they do not pay for the empty stream again.
//! llama-cpp-python's server needs this: it cannot stream an automatic tool choice.
//! [`Streaming::Off`] asks without streaming from the first call; [`Streaming::On`] never falls
//! back (an empty stream is then explained by the probe above).
//!
//! **Usage.** Asked for in the stream with `stream_options.include_usage`; a server that ignores
//! it (llama-cpp-python does) leaves the finish part's counts absent — recorded as unknown,
//! never estimated. Answers without streaming carry `usage` in the body.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use mull_core::{
    Clock, LanguageModel, ModelError, ModelErrorKind, ModelRequest, ModelStream, StreamPart,
    SystemClock,
};
use serde_json::{json, Value};

use crate::http::{self, HttpOptions, Secret};
use crate::probe;

mod request;
mod stream;

pub use request::{request_body, warnings};
pub use stream::decode_sse;
#[cfg(test)]
pub(crate) use stream::ChatCompletionsDecoder;

/// OpenAI's own endpoint, used when no base URL is given.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// Which body field carries the output token limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_completion_tokens`: OpenAI's current name, required by its reasoning models.
    MaxCompletionTokens,
    /// `max_tokens`: the older name that llama.cpp, vLLM and Ollama read.
    MaxTokens,
}

impl MaxTokensField {
    /// The body field's name.
    pub fn name(self) -> &'static str {
        match self {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        }
    }
}

/// Whether a model's calls stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Streaming {
    /// Stream; when a stream ends empty and the same request without streaming is answered,
    /// use that answer and send this model's later calls without streaming.
    #[default]
    Auto,
    /// Always stream; an empty stream is an error (explained by a one-token probe).
    On,
    /// Never stream: each call is one JSON answer, turned into the same parts.
    Off,
}

impl Streaming {
    /// The name a spec option or flag gives it: `auto`, `on` or `off`.
    pub fn name(self) -> &'static str {
        match self {
            Streaming::Auto => "auto",
            Streaming::On => "on",
            Streaming::Off => "off",
        }
    }
}

impl fmt::Display for Streaming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Streaming {
    type Err = String;

    /// `auto`, `on` (or `true`) and `off` (or `false`).
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Streaming::Auto),
            "on" | "true" => Ok(Streaming::On),
            "off" | "false" => Ok(Streaming::Off),
            other => Err(format!(
                "streaming `{other}` is not one of `auto`, `on`, `off`"
            )),
        }
    }
}

/// Where and how to reach a Chat Completions server.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// The provider name reported by the model and used in error messages.
    pub provider_name: String,
    /// The API root, e.g. `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// The model id sent in the body.
    pub model: String,
    /// Sent as `Authorization: Bearer …` when present; local servers usually need none.
    pub api_key: Option<Secret>,
    /// Which field carries `max_output_tokens`.
    pub max_tokens_field: MaxTokensField,
    /// Whether to send `top_k` (OpenAI rejects it; local servers accept it).
    pub send_top_k: bool,
    /// Timeouts.
    pub http: HttpOptions,
    /// Whether calls stream (see [`Streaming`]).
    pub streaming: Streaming,
}

impl OpenAiConfig {
    /// Settings for OpenAI itself.
    pub fn openai(model: impl Into<String>, api_key: Secret) -> Self {
        Self {
            provider_name: "openai".into(),
            base_url: OPENAI_BASE_URL.into(),
            model: model.into(),
            api_key: Some(api_key),
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            send_top_k: false,
            http: HttpOptions::default(),
            streaming: Streaming::default(),
        }
    }

    /// Settings for a local or third-party server speaking the same API.
    pub fn compatible(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider_name: "openai-compatible".into(),
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            max_tokens_field: MaxTokensField::MaxTokens,
            send_top_k: true,
            http: HttpOptions::default(),
            streaming: Streaming::default(),
        }
    }
}

/// A [`LanguageModel`] that streams from a Chat Completions endpoint.
pub struct OpenAiModel {
    config: OpenAiConfig,
    client: reqwest::Client,
    clock: Arc<dyn Clock>,
    provider: Arc<str>,
    /// Set once a stream of this model ended empty and the same request without streaming
    /// was answered ([`Streaming::Auto`]): later calls go straight to non-streaming.
    streaming_failed: Arc<AtomicBool>,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// A model for `config`, measuring `Retry-After` dates against the system clock.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let client = http::build_client(config.http).map_err(|e| {
            ModelError::new(
                ModelErrorKind::Other,
                format!("{}: cannot build HTTP client: {e}", config.provider_name),
            )
        })?;
        Ok(Self {
            provider: Arc::from(config.provider_name.as_str()),
            config,
            client,
            clock: Arc::new(SystemClock),
            streaming_failed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Uses `clock` to turn `Retry-After` dates into waits.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Whether this model's next call streams: not when configured off, nor once a stream of
    /// it ended empty and the answer came without streaming.
    pub fn streams(&self) -> bool {
        match self.config.streaming {
            Streaming::On => true,
            Streaming::Off => false,
            Streaming::Auto => !self.streaming_failed.load(Ordering::Relaxed),
        }
    }

    /// The JSON body this model sends for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> Value {
        request_body(&self.config, request)
    }

    fn endpoint(&self) -> String {
        format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        )
    }
}

#[async_trait]
impl LanguageModel for OpenAiModel {
    fn provider(&self) -> &str {
        &self.config.provider_name
    }

    fn model_id(&self) -> &str {
        &self.config.model
    }

    fn server(&self) -> Option<(String, u16)> {
        crate::http::server_of(&self.config.base_url)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = self.request_body(&request);
        if !self.streams() {
            return self.complete(body, &request).await;
        }
        let builder = self
            .post(&body, &request)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let response = http::send(&self.provider, builder, self.clock.as_ref()).await?;
        let opening =
            http::opening_parts(warnings(&self.config, &request), response.headers(), None);
        let stream = decode_sse(self.provider.clone(), http::response_bytes(response));
        // Ended with no answer: ask once without streaming what the server objects to — or,
        // when nothing streamed and falling back is allowed, for the answer itself.
        let probe = self.post(&probe_body(&self.config, body.clone()), &request);
        let whole = (self.config.streaming == Streaming::Auto)
            .then(|| self.post(&non_streaming_body(body), &request));
        let (provider, clock) = (self.provider.clone(), Arc::clone(&self.clock));
        let streaming_failed = Arc::clone(&self.streaming_failed);
        let stream = probe::on_ended_early(stream, move |ended, content_seen| async move {
            let whole = whole.filter(|_| !content_seen);
            let Some(whole) = whole else {
                let answer = probe::send_after_empty_stream(&provider, probe, clock.as_ref());
                return Err(probe::explain(ended, answer.await.map(drop)));
            };
            match answer_parts(&provider, whole, clock.as_ref()).await {
                Ok((_, parts)) => {
                    streaming_failed.store(true, Ordering::Relaxed);
                    tracing::warn!(
                        provider = %provider,
                        "{}; the same request without streaming was answered and is used; \
                         this model's later calls will not stream",
                        ended.message
                    );
                    Ok(parts)
                }
                Err(error) => Err(probe::explain(ended, Err(error))),
            }
        });
        Ok(http::prepend(opening, stream))
    }
}

/// The JSON answer of a non-streaming `request` as stream parts, with the response's headers.
async fn answer_parts(
    provider: &Arc<str>,
    request: reqwest::RequestBuilder,
    clock: &dyn Clock,
) -> Result<(reqwest::header::HeaderMap, Vec<StreamPart>), ModelError> {
    let response = probe::send_after_empty_stream(provider, request, clock).await?;
    let headers = response.headers().clone();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| http::transport_error(provider, &e))?;
    let completion: Value = serde_json::from_slice(&bytes).map_err(|e| {
        let text = String::from_utf8_lossy(&bytes);
        let mut shown: String = text.chars().take(200).collect();
        if shown.len() < text.len() {
            shown.push('…');
        }
        ModelError::new(
            ModelErrorKind::Protocol,
            format!("{provider}: the answer without streaming is not JSON ({e}): {shown}"),
        )
    })?;
    let parts = stream::completion_parts(Arc::clone(provider), &completion)?;
    Ok((headers, parts))
}

impl OpenAiModel {
    /// One call without streaming: the JSON answer as the parts a stream would have given.
    async fn complete(
        &self,
        body: Value,
        request: &ModelRequest,
    ) -> Result<ModelStream, ModelError> {
        let post = self.post(&non_streaming_body(body), request);
        let (headers, parts) = answer_parts(&self.provider, post, self.clock.as_ref()).await?;
        let mut all = http::opening_parts(warnings(&self.config, request), &headers, Some(false));
        all.extend(parts);
        Ok(Box::pin(futures::stream::iter(all.into_iter().map(Ok))))
    }

    /// A POST of `body` to the endpoint with the key and the request's headers.
    fn post(&self, body: &Value, request: &ModelRequest) -> reqwest::RequestBuilder {
        let mut builder = self.client.post(self.endpoint()).json(body);
        if let Some(key) = &self.config.api_key {
            builder = builder.bearer_auth(key.expose());
        }
        for (name, value) in &request.settings.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder
    }
}

/// The streaming `body` as the non-streaming probe sends it: the same request, one output token.
fn probe_body(config: &OpenAiConfig, body: Value) -> Value {
    let mut body = non_streaming_body(body);
    if let Value::Object(fields) = &mut body {
        fields.insert(config.max_tokens_field.name().into(), json!(1));
    }
    body
}

/// The streaming `body` as the same request without streaming (no `stream_options` either:
/// a non-streaming answer carries its usage in the body).
fn non_streaming_body(mut body: Value) -> Value {
    if let Value::Object(fields) = &mut body {
        fields.insert("stream".into(), json!(false));
        fields.remove("stream_options");
    }
    body
}

#[cfg(test)]
mod tests;
