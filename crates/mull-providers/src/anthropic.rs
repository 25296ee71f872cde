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
//! signature it was streamed with, which a [`ModelContent::Reasoning`] does not carry.
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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use eventsource_stream::Event as SseEvent;
use futures::Stream;
use mull_core::{
    CallWarning, Clock, FinishReason, LanguageModel, ModelContent, ModelError, ModelErrorKind,
    ModelRequest, ModelRole, ModelStream, StreamPart, SystemClock, ToolChoice, Usage,
};
use serde_json::{json, Map, Value};

use crate::http::{self, HttpOptions, Secret, WireDecoder};

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
        let opening = http::opening_parts(warnings(&request), response.headers());
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

/// Decodes a Messages SSE byte stream into stream parts, exactly as the client does with a
/// response body, so the decoder can be exercised (or fuzzed) without HTTP. `provider` names
/// the source in error messages; a failed read of `bytes` is a `Transient` cut connection, bad
/// provider output a `Protocol` error, and the first error ends the stream.
pub fn decode_sse<S, B, E>(provider: impl Into<Arc<str>>, bytes: S) -> ModelStream
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    let provider = provider.into();
    http::decode_sse(provider.clone(), bytes, MessagesDecoder::new(provider))
}

/// The settings of `request` the Messages API has no field for (not sent), as warnings the
/// step record shows.
pub fn warnings(request: &ModelRequest) -> Vec<CallWarning> {
    let s = &request.settings;
    let unsupported = [
        ("presence_penalty", s.presence_penalty.is_some()),
        ("frequency_penalty", s.frequency_penalty.is_some()),
        ("seed", s.seed.is_some()),
    ];
    unsupported
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(setting, _)| CallWarning::UnsupportedSetting {
            setting: setting.into(),
            details: Some("the Messages API has no such field; it was not sent".into()),
        })
        .collect()
}

/// Maps a [`ModelRequest`] to a streaming Messages body for `model`.
pub fn request_body(model: &str, request: &ModelRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    let s = &request.settings;
    body.insert(
        "max_tokens".into(),
        json!(s.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    let mut system: Vec<String> = request.system.iter().cloned().collect();
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in &request.messages {
        let role = match message.role {
            ModelRole::System => {
                system.extend(message.content.iter().filter_map(|c| match c {
                    ModelContent::Text { text } => Some(text.clone()),
                    _ => None,
                }));
                continue;
            }
            ModelRole::User | ModelRole::Tool => "user",
            ModelRole::Assistant => "assistant",
        };
        let blocks: Vec<Value> = message.content.iter().filter_map(content_block).collect();
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last_role, last)) if *last_role == role => last.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if let Some(schema) = &request.output_schema {
        // Structured output the way the Messages API allows it: one tool whose input schema is
        // the output's, forced, whose input the decoder turns into the answer's text. The
        // step's own tools are not offered on such a call (as the AI SDK does).
        body.insert(
            "tools".into(),
            json!([{
                "name": JSON_TOOL,
                "description": "Respond with a JSON object.",
                "input_schema": schema,
            }]),
        );
        body.insert(
            "tool_choice".into(),
            json!({"type": "tool", "name": JSON_TOOL}),
        );
    } else if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool { tool_name } => json!({"type": "tool", "name": tool_name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(t) = s.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = s.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(k) = s.top_k {
        body.insert("top_k".into(), json!(k));
    }
    if !s.stop_sequences.is_empty() {
        body.insert("stop_sequences".into(), json!(s.stop_sequences));
    }
    // Penalties and seed are not sent: `warnings` reports each one.
    body.insert("stream".into(), json!(true));
    if let Some(Value::Object(options)) = &s.provider_options {
        for (key, value) in options {
            body.insert(key.clone(), value.clone());
        }
    }
    Value::Object(body)
}

/// One content item as a Messages content block; reasoning is dropped (see the module docs).
fn content_block(content: &ModelContent) -> Option<Value> {
    match content {
        ModelContent::Text { text } => Some(json!({"type": "text", "text": text})),
        ModelContent::Reasoning { .. } => None,
        ModelContent::File { media_type, url } => {
            let kind = if media_type.starts_with("image/") {
                "image"
            } else {
                "document"
            };
            let source = match url
                .strip_prefix("data:")
                .and_then(|rest| rest.split_once(";base64,"))
            {
                Some((data_type, data)) => {
                    let data_type = if data_type.is_empty() {
                        media_type.as_str()
                    } else {
                        data_type
                    };
                    json!({"type": "base64", "media_type": data_type, "data": data})
                }
                None => json!({"type": "url", "url": url}),
            };
            Some(json!({"type": kind, "source": source}))
        }
        ModelContent::ToolCall {
            call_id,
            tool_name,
            input,
        } => Some(json!({"type": "tool_use", "id": call_id, "name": tool_name, "input": input})),
        ModelContent::ToolResult {
            call_id,
            output,
            is_error,
            ..
        } => {
            let text = match output {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut block = json!({"type": "tool_result", "tool_use_id": call_id, "content": text});
            if *is_error {
                block["is_error"] = json!(true);
            }
            Some(block)
        }
    }
}

/// What an open content block is, by its index.
#[derive(Debug)]
enum Block {
    Text {
        id: String,
    },
    Reasoning {
        id: String,
    },
    Tool {
        call_id: String,
        tool_name: String,
        json: String,
    },
    /// The forced [`JSON_TOOL`] of a structured-output request: its input is the answer.
    JsonAnswer {
        id: String,
    },
    /// A block type this module passes over (redacted thinking, server tools …).
    Ignored,
}

/// The tool that carries a structured answer (see [`request_body`]).
pub const JSON_TOOL: &str = "json";

/// Turns Messages stream events into stream parts.
pub(crate) struct MessagesDecoder {
    provider: Arc<str>,
    /// The request asked for structured output: the forced [`JSON_TOOL`]'s input is the
    /// answer's text, and its `tool_use` stop is the answer's end.
    json_tool: bool,
    blocks: BTreeMap<u64, Block>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read: Option<u64>,
    cache_creation: Option<u64>,
    stop_reason: Option<String>,
    signatures: Map<String, Value>,
    redacted_thinking: Vec<Value>,
    started: bool,
    done: bool,
}

impl MessagesDecoder {
    pub(crate) fn new(provider: Arc<str>) -> Self {
        Self {
            provider,
            json_tool: false,
            blocks: BTreeMap::new(),
            input_tokens: None,
            output_tokens: None,
            cache_read: None,
            cache_creation: None,
            stop_reason: None,
            signatures: Map::new(),
            redacted_thinking: Vec::new(),
            started: false,
            done: false,
        }
    }

    /// Decodes the answer of a request that asked for structured output (`on`).
    pub(crate) fn answering_with_json_tool(mut self, on: bool) -> Self {
        self.json_tool = on;
        self
    }

    fn protocol(&self, what: String) -> ModelError {
        ModelError::new(
            ModelErrorKind::Protocol,
            format!("{}: {what}", self.provider),
        )
    }

    /// Reads the optional field `key` of the part of a `event` at `at`, as
    /// [`http::optional_field`].
    fn field<'v, T>(
        &self,
        event: &str,
        parent: &'v Value,
        at: &str,
        key: &str,
        expected: &str,
        read: impl FnOnce(&'v Value) -> Option<T>,
    ) -> Result<Option<T>, ModelError> {
        http::optional_field(&self.provider, event, parent, at, key, expected, read)
    }

    /// Reads the field `key` that a known `event` must carry, as [`http::required_field`].
    fn required<'v, T>(
        &self,
        event: &str,
        parent: &'v Value,
        at: &str,
        key: &str,
        expected: &str,
        read: impl FnOnce(&'v Value) -> Option<T>,
    ) -> Result<T, ModelError> {
        http::required_field(&self.provider, event, parent, at, key, expected, read)
    }

    fn read_usage(&mut self, event: &str, at: &str, usage: &Value) -> Result<(), ModelError> {
        let count = |key: &str| self.field(event, usage, at, key, "an integer", Value::as_u64);
        let (input, output, cache_read, cache_creation) = (
            count("input_tokens")?,
            count("output_tokens")?,
            count("cache_read_input_tokens")?,
            count("cache_creation_input_tokens")?,
        );
        if let Some(n) = input {
            self.input_tokens = Some(n);
        }
        if let Some(n) = output {
            self.output_tokens = Some(n);
        }
        if let Some(n) = cache_read {
            self.cache_read = Some(n);
        }
        if let Some(n) = cache_creation {
            self.cache_creation = Some(n);
        }
        Ok(())
    }

    fn block_start(
        &mut self,
        index: u64,
        block: &Value,
        out: &mut Vec<StreamPart>,
    ) -> Result<(), ModelError> {
        const EVENT: &str = "content_block_start";
        const AT: &str = "content_block";
        let kind = self.required(EVENT, block, AT, "type", "a string", Value::as_str)?;
        let state = match kind {
            "text" => {
                let text = self.field(EVENT, block, AT, "text", "a string", Value::as_str)?;
                let id = format!("text-{index}");
                out.push(StreamPart::TextStart { id: id.clone() });
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    out.push(StreamPart::TextDelta {
                        id: id.clone(),
                        text: text.to_owned(),
                    });
                }
                Block::Text { id }
            }
            "thinking" => {
                let text = self.field(EVENT, block, AT, "thinking", "a string", Value::as_str)?;
                let id = format!("reasoning-{index}");
                out.push(StreamPart::ReasoningStart { id: id.clone() });
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    out.push(StreamPart::ReasoningDelta {
                        id: id.clone(),
                        text: text.to_owned(),
                    });
                }
                Block::Reasoning { id }
            }
            "tool_use" => {
                let call_id = self
                    .required(EVENT, block, AT, "id", "a string", Value::as_str)?
                    .to_owned();
                let tool_name = self
                    .required(EVENT, block, AT, "name", "a string", Value::as_str)?
                    .to_owned();
                if self.json_tool && tool_name == JSON_TOOL {
                    // The structured answer: its input streams as the answer's text.
                    let id = format!("text-{index}");
                    out.push(StreamPart::TextStart { id: id.clone() });
                    self.blocks.insert(index, Block::JsonAnswer { id });
                    return Ok(());
                }
                out.push(StreamPart::ToolInputStart {
                    call_id: call_id.clone(),
                    tool_name: tool_name.clone(),
                });
                Block::Tool {
                    call_id,
                    tool_name,
                    json: String::new(),
                }
            }
            "redacted_thinking" => {
                if let Some(data) = block.get("data") {
                    self.redacted_thinking.push(data.clone());
                }
                Block::Ignored
            }
            _ => Block::Ignored,
        };
        self.blocks.insert(index, state);
        Ok(())
    }

    fn block_delta(
        &mut self,
        index: u64,
        delta: &Value,
        out: &mut Vec<StreamPart>,
    ) -> Result<(), ModelError> {
        let Some(block) = self.blocks.get_mut(&index) else {
            return Err(self.protocol(format!(
                "content_block_delta for block {index}, which was never started"
            )));
        };
        const EVENT: &str = "content_block_delta";
        let kind = http::required_field(
            &self.provider,
            EVENT,
            delta,
            "delta",
            "type",
            "a string",
            Value::as_str,
        )?;
        // Each known delta type carries its content in one string field; unknown types carry
        // whatever they like and are passed over below.
        let content_key = match kind {
            "text_delta" => Some("text"),
            "thinking_delta" => Some("thinking"),
            "signature_delta" => Some("signature"),
            "input_json_delta" => Some("partial_json"),
            _ => None,
        };
        let content = match content_key {
            Some(key) => http::required_field(
                &self.provider,
                EVENT,
                delta,
                "delta",
                key,
                "a string",
                Value::as_str,
            )?
            .to_owned(),
            None => String::new(),
        };
        match (kind, block) {
            ("text_delta", Block::Text { id }) => {
                let text = content;
                if !text.is_empty() {
                    out.push(StreamPart::TextDelta {
                        id: id.clone(),
                        text,
                    });
                }
            }
            ("thinking_delta", Block::Reasoning { id }) => {
                let text = content;
                if !text.is_empty() {
                    out.push(StreamPart::ReasoningDelta {
                        id: id.clone(),
                        text,
                    });
                }
            }
            ("signature_delta", Block::Reasoning { id }) => {
                let id = id.clone();
                let previous = self
                    .signatures
                    .get(&id)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                self.signatures.insert(id, json!(previous + &content));
            }
            ("input_json_delta", Block::JsonAnswer { id }) if !content.is_empty() => {
                out.push(StreamPart::TextDelta {
                    id: id.clone(),
                    text: content,
                });
            }
            ("input_json_delta", Block::JsonAnswer { .. }) => {}
            ("input_json_delta", Block::Tool { call_id, json, .. }) => {
                let partial = content;
                if !partial.is_empty() {
                    json.push_str(&partial);
                    out.push(StreamPart::ToolInputDelta {
                        call_id: call_id.clone(),
                        delta: partial,
                    });
                }
            }
            (_, Block::Ignored) => {}
            ("text_delta" | "thinking_delta" | "signature_delta" | "input_json_delta", other) => {
                let found = format!("{other:?}");
                return Err(self.protocol(format!("`{kind}` for block {index}, which is {found}")));
            }
            // Delta types this build does not know (citations …) are passed over.
            _ => {}
        }
        Ok(())
    }

    fn block_stop(&mut self, index: u64, out: &mut Vec<StreamPart>) -> Result<(), ModelError> {
        let Some(block) = self.blocks.remove(&index) else {
            return Err(self.protocol(format!(
                "content_block_stop for block {index}, which was never started"
            )));
        };
        match block {
            Block::Text { id } | Block::JsonAnswer { id } => out.push(StreamPart::TextEnd { id }),
            Block::Reasoning { id } => out.push(StreamPart::ReasoningEnd { id }),
            Block::Tool {
                call_id,
                tool_name,
                json,
            } => {
                out.push(StreamPart::ToolInputEnd {
                    call_id: call_id.clone(),
                });
                // A tool without parameters streams no input at all: its input is `{}`.
                let input = if json.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    json
                };
                out.push(StreamPart::ToolCall {
                    call_id,
                    tool_name,
                    input,
                });
            }
            Block::Ignored => {}
        }
        Ok(())
    }

    fn finish(&mut self) -> StreamPart {
        self.done = true;
        let input = match (self.input_tokens, self.cache_read, self.cache_creation) {
            (None, None, None) => None,
            (a, b, c) => Some(a.unwrap_or(0) + b.unwrap_or(0) + c.unwrap_or(0)),
        };
        let usage = Usage {
            input_tokens: input,
            output_tokens: self.output_tokens,
            total_tokens: match (input, self.output_tokens) {
                (None, None) => None,
                (i, o) => Some(i.unwrap_or(0) + o.unwrap_or(0)),
            },
            reasoning_tokens: None,
            cached_input_tokens: self.cache_read,
        };
        let mut meta = Map::new();
        // The seed's (and the AI SDK's) names, beside the API's own that older readers use.
        if let Some(n) = self.cache_creation {
            meta.insert("cache_creation_input_tokens".into(), json!(n));
            meta.insert("cacheCreationInputTokens".into(), json!(n));
        }
        if let Some(n) = self.cache_read {
            meta.insert("cache_read_input_tokens".into(), json!(n));
            meta.insert("cacheReadInputTokens".into(), json!(n));
        }
        if !self.signatures.is_empty() {
            meta.insert(
                "thinking_signatures".into(),
                Value::Object(std::mem::take(&mut self.signatures)),
            );
        }
        if !self.redacted_thinking.is_empty() {
            meta.insert(
                "redacted_thinking".into(),
                Value::Array(std::mem::take(&mut self.redacted_thinking)),
            );
        }
        let raw = self.stop_reason.clone();
        let finish_reason = match raw.as_deref() {
            // The forced answer tool ends the answer, not a step that calls tools.
            Some("tool_use") if self.json_tool => FinishReason::Stop,
            raw => raw.map_or(FinishReason::Unknown, stop_reason),
        };
        StreamPart::Finish {
            finish_reason,
            raw_finish_reason: raw,
            usage,
            provider_metadata: (!meta.is_empty()).then(|| json!({ "anthropic": meta })),
        }
    }
}

impl WireDecoder for MessagesDecoder {
    fn event(&mut self, event: &SseEvent) -> Result<Vec<StreamPart>, ModelError> {
        let mut out = Vec::new();
        if event.data.trim().is_empty() {
            return Ok(out);
        }
        let data = http::parse_data(&self.provider, event)?;
        if !data.is_object() {
            return Err(http::wrong_shape(
                &self.provider,
                &event.event,
                &format!("data should be an object, found {}", http::json_kind(&data)),
            ));
        }
        // The `type` field inside the data is authoritative; the SSE event name mirrors it.
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let index = |decoder: &Self| {
            decoder.required(kind, &data, "", "index", "an integer", Value::as_u64)
        };
        match kind {
            "message_start" => {
                self.started = true;
                let message =
                    self.field(kind, &data, "", "message", "an object", http::as_object)?;
                if let Some(message) = message {
                    let id =
                        self.field(kind, message, "message", "id", "a string", Value::as_str)?;
                    let model =
                        self.field(kind, message, "message", "model", "a string", Value::as_str)?;
                    out.push(StreamPart::ResponseMetadata {
                        id: id.map(str::to_owned),
                        model_id: model.map(str::to_owned),
                        timestamp: None,
                        headers: None,
                    });
                    let usage = self.field(
                        kind,
                        message,
                        "message",
                        "usage",
                        "an object",
                        http::as_object,
                    )?;
                    if let Some(usage) = usage {
                        self.read_usage(kind, "message.usage", usage)?;
                    }
                }
            }
            "content_block_start" => {
                let i = index(self)?;
                let block = self.required(
                    kind,
                    &data,
                    "",
                    "content_block",
                    "an object",
                    http::as_object,
                )?;
                self.block_start(i, block, &mut out)?;
            }
            "content_block_delta" => {
                let i = index(self)?;
                let delta =
                    self.required(kind, &data, "", "delta", "an object", http::as_object)?;
                self.block_delta(i, delta, &mut out)?;
            }
            "content_block_stop" => {
                let i = index(self)?;
                self.block_stop(i, &mut out)?;
            }
            "message_delta" => {
                if let Some(delta) =
                    self.field(kind, &data, "", "delta", "an object", http::as_object)?
                {
                    let reason = self.field(
                        kind,
                        delta,
                        "delta",
                        "stop_reason",
                        "a string",
                        Value::as_str,
                    )?;
                    if let Some(reason) = reason {
                        self.stop_reason = Some(reason.to_owned());
                    }
                }
                if let Some(usage) =
                    self.field(kind, &data, "", "usage", "an object", http::as_object)?
                {
                    self.read_usage(kind, "usage", usage)?;
                }
            }
            "message_stop" => {
                let open: Vec<u64> = self.blocks.keys().copied().collect();
                for i in open {
                    self.block_stop(i, &mut out)?;
                }
                out.push(self.finish());
            }
            "error" => {
                let error = data.get("error").unwrap_or(&data);
                return Err(http::in_band_error(&self.provider, error, &event.data));
            }
            // `ping` keeps the connection alive; unknown events may be added by the API.
            _ => {}
        }
        Ok(out)
    }

    fn end(&mut self) -> Result<Vec<StreamPart>, ModelError> {
        let what = if self.started {
            "message_stop"
        } else {
            "message_start"
        };
        Err(self.protocol(format!("stream ended before {what}")))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// Maps a Messages `stop_reason` to [`FinishReason`].
fn stop_reason(raw: &str) -> FinishReason {
    match raw {
        "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_map() {
        assert_eq!(stop_reason("end_turn"), FinishReason::Stop);
        assert_eq!(stop_reason("stop_sequence"), FinishReason::Stop);
        assert_eq!(stop_reason("max_tokens"), FinishReason::Length);
        assert_eq!(stop_reason("tool_use"), FinishReason::ToolCalls);
        assert_eq!(stop_reason("refusal"), FinishReason::ContentFilter);
        assert_eq!(stop_reason("something_new"), FinishReason::Other);
    }

    #[test]
    fn data_urls_become_base64_sources() {
        let block = content_block(&ModelContent::File {
            media_type: "image/png".into(),
            url: "data:image/png;base64,AAAA".into(),
        });
        assert_eq!(
            block,
            Some(
                json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}})
            )
        );
        let block = content_block(&ModelContent::File {
            media_type: "application/pdf".into(),
            url: "https://example.invalid/a.pdf".into(),
        });
        assert_eq!(
            block,
            Some(
                json!({"type": "document", "source": {"type": "url", "url": "https://example.invalid/a.pdf"}})
            )
        );
    }

    #[test]
    fn debug_output_hides_the_key() {
        let model =
            AnthropicModel::new(AnthropicConfig::new("claude", Secret::new("sk-ant-secret")))
                .expect("client builds");
        assert!(!format!("{model:?}").contains("sk-ant-secret"));
    }
}
