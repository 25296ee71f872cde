//! Anthropic's Messages API over streaming SSE.
//!
//! **Request.** `POST {base_url}/messages` with `x-api-key`, `anthropic-version: 2023-06-01` and
//! `stream: true`. The system prompt (and any system-role messages) goes in the top-level
//! `system`; consecutive messages of one role are merged, since the API wants user and assistant
//! turns to alternate; tool calls are `tool_use` blocks and tool results `tool_result` blocks in a
//! user turn; tools are `{name, description, input_schema}`; tool choice maps to
//! `auto` / `none` / `any` / `tool`. `max_tokens` is required by the API: without
//! `max_output_tokens` it is [`DEFAULT_MAX_TOKENS`]. `temperature`, `top_p`, `top_k` and
//! `stop_sequences` are sent; the API has no penalties, seed or output-schema field, so those
//! settings are not sent. `provider_options` (an object) is merged into the top level of the body.
//! Reasoning from earlier turns is not sent back: a thinking block is only accepted with the
//! signature it was streamed with, which a
//! [`ModelContent::Reasoning`](mull_core::ModelContent::Reasoning) does not carry.
//!
//! **Stream.** `message_start` carries the input usage; `content_block_start` / `_delta` /
//! `_stop` carry text (`text_delta`), tool input (`input_json_delta`, completed into one
//! tool-call with the whole JSON text at `content_block_stop`) and thinking (`thinking_delta`;
//! `signature_delta` is kept in the finish part's provider metadata under
//! `anthropic.thinking_signatures`, keyed by reasoning block id, and redacted thinking under
//! `anthropic.redacted_thinking`); `message_delta` carries the stop reason and output usage;
//! `message_stop` ends the stream and emits the finish part. `ping` is ignored, as are event and
//! block types this build does not know (the API may add them). Input usage is reported the way
//! mull counts it: `input_tokens` includes cache reads and cache writes,
//! `cached_input_tokens` is `cache_read_input_tokens`, and both cache counts are also in the
//! provider metadata.
//!
//! **Errors.** HTTP failures map as described in [`crate::http`] (Anthropic's 529 "overloaded" is a
//! 5xx, so `Transient`). An `error` event ends the stream with an error whose kind follows its
//! `error.type` (`overloaded_error` → `Transient`, `rate_limit_error` → `RateLimit` …) and whose
//! body is the event data. Invalid JSON, a known event whose fields have the wrong type or are
//! missing (a `content_block_delta` without a `delta` object, a `text_delta` whose `text` is not a
//! string, a `tool_use` block without `id` or `name` …), a delta for a block that was never
//! started, or a stream that ends before `message_stop` is a `Protocol` error naming the event and
//! field. Unknown events, block types, delta types and fields are ignored.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use mull_core::{
    Clock, LanguageModel, ModelError, ModelErrorKind, ModelRequest, ModelStream, SystemClock,
};
use serde_json::Value;

use crate::http::{self, HttpOptions, Secret};

mod request;
mod stream;

pub use request::{request_body, warnings};
pub use stream::decode_sse;
pub(crate) use stream::MessagesDecoder;

/// Anthropic's own endpoint, used when no base URL is given.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The API version this module speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when the call settings give none (the API requires the field). 4096 is within
/// every current Claude model's output limit.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Where and how to reach the Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// The API root, e.g. `https://api.anthropic.com/v1`; `/messages` is appended.
    pub base_url: String,
    /// The model id sent in the body.
    pub model: String,
    /// Sent as `x-api-key`.
    pub api_key: Secret,
    /// Timeouts.
    pub http: HttpOptions,
}

impl AnthropicConfig {
    /// Settings for Anthropic's endpoint.
    pub fn new(model: impl Into<String>, api_key: Secret) -> Self {
        Self {
            base_url: ANTHROPIC_BASE_URL.into(),
            model: model.into(),
            api_key,
            http: HttpOptions::default(),
        }
    }
}

/// A [`LanguageModel`] that streams from the Messages API.
pub struct AnthropicModel {
    config: AnthropicConfig,
    client: reqwest::Client,
    clock: Arc<dyn Clock>,
    provider: Arc<str>,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// A model for `config`, measuring `Retry-After` dates against the system clock.
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        let client = http::build_client(config.http).map_err(|e| {
            ModelError::new(
                ModelErrorKind::Other,
                format!("anthropic: cannot build HTTP client: {e}"),
            )
        })?;
        Ok(Self {
            config,
            client,
            clock: Arc::new(SystemClock),
            provider: Arc::from("anthropic"),
        })
    }

    /// Uses `clock` to turn `Retry-After` dates into waits.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The JSON body this model sends for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> Value {
        request_body(&self.config.model, request)
    }
}

#[async_trait]
impl LanguageModel for AnthropicModel {
    fn provider(&self) -> &str {
        &self.provider
    }

    fn model_id(&self) -> &str {
        &self.config.model
    }

    fn server(&self) -> Option<(String, u16)> {
        crate::http::server_of(&self.config.base_url)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = self.request_body(&request);
        let url = format!("{}/messages", self.config.base_url.trim_end_matches('/'));
        let mut builder = self
            .client
            .post(url)
            .header("x-api-key", self.config.api_key.expose())
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body);
        for (name, value) in &request.settings.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let response = http::send(&self.provider, builder, self.clock.as_ref()).await?;
        let opening = http::opening_parts(warnings(&request), response.headers(), None);
        let decoder = MessagesDecoder::new(self.provider.clone())
            .answering_with_json_tool(request.output_schema.is_some());
        let stream = http::decode_sse(
            self.provider.clone(),
            http::response_bytes(response),
            decoder,
        );
        Ok(http::prepend(opening, stream))
    }
}

/// The tool that carries a structured answer (see [`request_body`]).
pub const JSON_TOOL: &str = "json";

#[cfg(test)]
mod tests;
