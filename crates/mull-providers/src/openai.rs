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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use eventsource_stream::Event as SseEvent;
use futures::Stream;
use mull_core::{
    CallWarning, Clock, FinishReason, LanguageModel, ModelContent, ModelError, ModelErrorKind,
    ModelMessage, ModelRequest, ModelRole, ModelStream, StreamPart, SystemClock, ToolChoice, Usage,
};
use serde_json::{json, Map, Value};

use crate::http::{self, HttpOptions, Secret, WireDecoder};
use crate::probe;

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
        }
    }
}

/// A [`LanguageModel`] that streams from a Chat Completions endpoint.
pub struct OpenAiModel {
    config: OpenAiConfig,
    client: reqwest::Client,
    clock: Arc<dyn Clock>,
    provider: Arc<str>,
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
        })
    }

    /// Uses `clock` to turn `Retry-After` dates into waits.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
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

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = self.request_body(&request);
        let builder = self
            .post(&body, &request)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let response = http::send(&self.provider, builder, self.clock.as_ref()).await?;
        let opening = http::opening_parts(warnings(&self.config, &request), response.headers());
        let stream = decode_sse(self.provider.clone(), http::response_bytes(response));
        // Ended with no answer: ask once without streaming what the server objects to.
        let probe = self.post(&probe_body(&self.config, body), &request);
        let (provider, clock) = (self.provider.clone(), Arc::clone(&self.clock));
        let stream = probe::probe_when_ended_early(stream, move || async move {
            probe::send_probe(&provider, probe, clock.as_ref()).await
        });
        Ok(http::prepend(opening, stream))
    }
}

impl OpenAiModel {
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
fn probe_body(config: &OpenAiConfig, mut body: Value) -> Value {
    if let Value::Object(fields) = &mut body {
        fields.insert("stream".into(), json!(false));
        fields.remove("stream_options");
        fields.insert(config.max_tokens_field.name().into(), json!(1));
    }
    body
}

/// Decodes a Chat Completions SSE byte stream into stream parts, exactly as the client does with a
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
    http::decode_sse(
        provider.clone(),
        bytes,
        ChatCompletionsDecoder::new(provider),
    )
}

/// What the server is not sent of `request`, as warnings the step record shows.
pub fn warnings(config: &OpenAiConfig, request: &ModelRequest) -> Vec<CallWarning> {
    let mut out = Vec::new();
    if !config.send_top_k && request.settings.top_k.is_some() {
        out.push(CallWarning::UnsupportedSetting {
            setting: "top_k".into(),
            details: Some(format!(
                "{} does not accept top_k; it was not sent",
                config.provider_name
            )),
        });
    }
    out
}

/// Maps a [`ModelRequest`] to a streaming Chat Completions body.
pub fn request_body(config: &OpenAiConfig, request: &ModelRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("messages".into(), Value::Array(messages(request)));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool { tool_name } => {
                json!({"type": "function", "function": {"name": tool_name}})
            }
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "response_format".into(),
            json!({
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": schema, "strict": false}
            }),
        );
    }
    let s = &request.settings;
    if let Some(max) = s.max_output_tokens {
        body.insert(config.max_tokens_field.name().into(), json!(max));
    }
    insert_some(&mut body, "temperature", s.temperature);
    insert_some(&mut body, "top_p", s.top_p);
    if config.send_top_k {
        insert_some(&mut body, "top_k", s.top_k);
    } else if s.top_k.is_some() {
        // Not sent: the step record's warnings say so (see `warnings`).
    }
    insert_some(&mut body, "presence_penalty", s.presence_penalty);
    insert_some(&mut body, "frequency_penalty", s.frequency_penalty);
    if !s.stop_sequences.is_empty() {
        body.insert("stop".into(), json!(s.stop_sequences));
    }
    insert_some(&mut body, "seed", s.seed);
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(Value::Object(options)) = &s.provider_options {
        for (key, value) in options {
            body.insert(key.clone(), value.clone());
        }
    }
    Value::Object(body)
}

fn insert_some<T: serde::Serialize>(body: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(value) = value {
        body.insert(key.into(), json!(value));
    }
}

fn messages(request: &ModelRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        out.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        push_message(message, &mut out);
    }
    out
}

fn push_message(message: &ModelMessage, out: &mut Vec<Value>) {
    match message.role {
        ModelRole::System => {
            out.push(json!({"role": "system", "content": joined_text(&message.content)}));
        }
        ModelRole::User => {
            let parts: Vec<Value> = message.content.iter().filter_map(user_part).collect();
            let content = match parts.as_slice() {
                [only] if only["type"] == "text" => only["text"].clone(),
                _ => Value::Array(parts),
            };
            out.push(json!({"role": "user", "content": content}));
            push_tool_results(&message.content, out);
        }
        ModelRole::Assistant => {
            let text = joined_text(&message.content);
            let calls: Vec<Value> = message
                .content
                .iter()
                .filter_map(|c| match c {
                    ModelContent::ToolCall {
                        call_id,
                        tool_name,
                        input,
                    } => Some(json!({
                        "id": call_id,
                        "type": "function",
                        "function": {"name": tool_name, "arguments": input.to_string()},
                    })),
                    _ => None,
                })
                .collect();
            let mut msg = Map::new();
            msg.insert("role".into(), json!("assistant"));
            // Always a string, `""` beside tool calls: OpenAI also takes `null` there, but
            // llama.cpp's server, some vLLM versions, LM Studio and Ollama's shim fail on it.
            msg.insert("content".into(), json!(text));
            if !calls.is_empty() {
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            out.push(Value::Object(msg));
            push_tool_results(&message.content, out);
        }
        ModelRole::Tool => push_tool_results(&message.content, out),
    }
}

fn push_tool_results(content: &[ModelContent], out: &mut Vec<Value>) {
    for c in content {
        if let ModelContent::ToolResult {
            call_id, output, ..
        } = c
        {
            let text = match output {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text}));
        }
    }
}

fn joined_text(content: &[ModelContent]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            ModelContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

fn user_part(content: &ModelContent) -> Option<Value> {
    match content {
        ModelContent::Text { text } => Some(json!({"type": "text", "text": text})),
        ModelContent::File { media_type, url } if media_type.starts_with("image/") => {
            Some(json!({"type": "image_url", "image_url": {"url": url}}))
        }
        ModelContent::File { url, .. } => Some(json!({"type": "file", "file": {"file_data": url}})),
        _ => None,
    }
}

/// The event name used in shape errors: every data line is one of these.
const CHUNK: &str = "chat.completion.chunk";

/// One tool call being assembled from `tool_calls` fragments.
#[derive(Debug, Default)]
struct PendingCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
    started: bool,
}

/// Turns `chat.completion.chunk` events into stream parts.
pub(crate) struct ChatCompletionsDecoder {
    provider: Arc<str>,
    text_open: Option<String>,
    reasoning_open: Option<String>,
    blocks: u32,
    calls: BTreeMap<u64, PendingCall>,
    finish_reason: Option<String>,
    calls_flushed: bool,
    usage: Usage,
    done: bool,
    /// Whether any event arrived: a stream that ends with none was an empty 200.
    any_event: bool,
    /// Whether the response's id, model and time were passed on (from the first chunk).
    metadata_sent: bool,
}

impl ChatCompletionsDecoder {
    pub(crate) fn new(provider: Arc<str>) -> Self {
        Self {
            provider,
            text_open: None,
            reasoning_open: None,
            blocks: 0,
            calls: BTreeMap::new(),
            finish_reason: None,
            calls_flushed: false,
            usage: Usage::default(),
            done: false,
            any_event: false,
            metadata_sent: false,
        }
    }

    fn next_id(&mut self, kind: &str) -> String {
        let id = format!("{kind}-{}", self.blocks);
        self.blocks += 1;
        id
    }

    /// Reads the optional field `key` of the part of a chunk at `at`, as [`http::optional_field`].
    fn field<'v, T>(
        &self,
        parent: &'v Value,
        at: &str,
        key: &str,
        expected: &str,
        read: impl FnOnce(&'v Value) -> Option<T>,
    ) -> Result<Option<T>, ModelError> {
        http::optional_field(&self.provider, CHUNK, parent, at, key, expected, read)
    }

    /// Maps Chat Completions usage (including its detail objects) to [`Usage`]. A count that is
    /// there but not a non-negative integer is a wrong-shaped chunk, as in every other field.
    fn usage_from(&self, usage: &Value) -> Result<Usage, ModelError> {
        let count = |at: &str, parent: &Value, key: &str| {
            self.field(parent, at, key, "a non-negative integer", Value::as_u64)
        };
        let details = |key: &str| self.field(usage, "usage", key, "an object", http::as_object);
        let completion = details("completion_tokens_details")?;
        let prompt = details("prompt_tokens_details")?;
        Ok(Usage {
            input_tokens: count("usage", usage, "prompt_tokens")?,
            output_tokens: count("usage", usage, "completion_tokens")?,
            total_tokens: count("usage", usage, "total_tokens")?,
            reasoning_tokens: match completion {
                Some(d) => count("usage.completion_tokens_details", d, "reasoning_tokens")?,
                None => None,
            },
            cached_input_tokens: match prompt {
                Some(d) => count("usage.prompt_tokens_details", d, "cached_tokens")?,
                None => None,
            },
        })
    }

    fn chunk(&mut self, chunk: &Value, out: &mut Vec<StreamPart>) -> Result<(), ModelError> {
        if !chunk.is_object() {
            return Err(http::wrong_shape(
                &self.provider,
                CHUNK,
                &format!("data should be an object, found {}", http::json_kind(chunk)),
            ));
        }
        if !self.metadata_sent {
            let id = self.field(chunk, "", "id", "a string", Value::as_str)?;
            let model = self.field(chunk, "", "model", "a string", Value::as_str)?;
            let created = self.field(chunk, "", "created", "an integer", Value::as_i64)?;
            if id.is_some() || model.is_some() || created.is_some() {
                self.metadata_sent = true;
                out.push(StreamPart::ResponseMetadata {
                    id: id.map(str::to_owned),
                    model_id: model.map(str::to_owned),
                    timestamp: created.and_then(|secs| chrono::DateTime::from_timestamp(secs, 0)),
                    headers: None,
                });
            }
        }
        if let Some(usage) = self.field(chunk, "", "usage", "an object", http::as_object)? {
            self.usage = self.usage_from(usage)?;
        }
        let Some(choices) = self.field(chunk, "", "choices", "an array", Value::as_array)? else {
            return Ok(());
        };
        // Only the first choice is streamed; mull never asks for `n > 1`.
        let mut first = None;
        for (position, choice) in choices.iter().enumerate() {
            let at = format!("choices[{position}]");
            if !choice.is_object() {
                return Err(http::wrong_shape(
                    &self.provider,
                    CHUNK,
                    &format!(
                        "`{at}` should be an object, found {}",
                        http::json_kind(choice)
                    ),
                ));
            }
            let index = self.field(choice, &at, "index", "an integer", Value::as_u64)?;
            if index.unwrap_or(0) == 0 && first.is_none() {
                first = Some((at, choice));
            }
        }
        let Some((at, choice)) = first else {
            return Ok(());
        };
        if let Some(delta) = self.field(choice, &at, "delta", "an object", http::as_object)? {
            let at = format!("{at}.delta");
            let mut reasoning = None;
            for key in ["reasoning_content", "reasoning"] {
                if let Some(text) = self.field(delta, &at, key, "a string", Value::as_str)? {
                    reasoning = reasoning.or(Some(text));
                }
            }
            if let Some(text) = reasoning.filter(|s| !s.is_empty()) {
                let id = match &self.reasoning_open {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_id("reasoning");
                        out.push(StreamPart::ReasoningStart { id: id.clone() });
                        self.reasoning_open = Some(id.clone());
                        id
                    }
                };
                out.push(StreamPart::ReasoningDelta {
                    id,
                    text: text.to_owned(),
                });
            }
            if let Some(text) = self
                .field(delta, &at, "content", "a string", Value::as_str)?
                .filter(|s| !s.is_empty())
            {
                self.close_reasoning(out);
                let id = match &self.text_open {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_id("text");
                        out.push(StreamPart::TextStart { id: id.clone() });
                        self.text_open = Some(id.clone());
                        id
                    }
                };
                out.push(StreamPart::TextDelta {
                    id,
                    text: text.to_owned(),
                });
            }
            if let Some(calls) =
                self.field(delta, &at, "tool_calls", "an array", Value::as_array)?
            {
                self.close_reasoning(out);
                for (position, call) in calls.iter().enumerate() {
                    let at = format!("{at}.tool_calls[{position}]");
                    self.tool_call_fragment(&at, position as u64, call, out)?;
                }
            }
        }
        if let Some(reason) = self.field(choice, &at, "finish_reason", "a string", Value::as_str)? {
            self.finish_reason = Some(reason.to_owned());
            self.flush_blocks(out)?;
        }
        Ok(())
    }

    fn tool_call_fragment(
        &mut self,
        at: &str,
        position: u64,
        call: &Value,
        out: &mut Vec<StreamPart>,
    ) -> Result<(), ModelError> {
        if self.calls_flushed {
            return Err(ModelError::new(
                ModelErrorKind::Protocol,
                format!("{}: tool call fragment after finish_reason", self.provider),
            ));
        }
        if !call.is_object() {
            return Err(http::wrong_shape(
                &self.provider,
                CHUNK,
                &format!(
                    "`{at}` should be an object, found {}",
                    http::json_kind(call)
                ),
            ));
        }
        let index = self
            .field(call, at, "index", "an integer", Value::as_u64)?
            .unwrap_or(position);
        let id = self.field(call, at, "id", "a string", Value::as_str)?;
        let function = self.field(call, at, "function", "an object", http::as_object)?;
        let at = format!("{at}.function");
        let (name, arguments) = match function {
            Some(function) => (
                self.field(function, &at, "name", "a string", Value::as_str)?,
                self.field(function, &at, "arguments", "a string", Value::as_str)?,
            ),
            None => (None, None),
        };
        let arguments = arguments.unwrap_or("");
        let pending = self.calls.entry(index).or_default();
        if let Some(id) = id.filter(|s| !s.is_empty()) {
            pending.id.get_or_insert_with(|| id.to_owned());
        }
        if let Some(name) = name.filter(|s| !s.is_empty()) {
            pending.name.get_or_insert_with(|| name.to_owned());
        }
        if !pending.started {
            pending.arguments.push_str(arguments);
            if let Some(name) = pending.name.clone() {
                // Some local servers send no call id; a stable one keeps the call addressable.
                let call_id = pending
                    .id
                    .get_or_insert_with(|| format!("call_{index}"))
                    .clone();
                pending.started = true;
                out.push(StreamPart::ToolInputStart {
                    call_id: call_id.clone(),
                    tool_name: name,
                });
                if !pending.arguments.is_empty() {
                    out.push(StreamPart::ToolInputDelta {
                        call_id,
                        delta: pending.arguments.clone(),
                    });
                }
            }
        } else if !arguments.is_empty() {
            pending.arguments.push_str(arguments);
            out.push(StreamPart::ToolInputDelta {
                call_id: pending.id.clone().unwrap_or_default(),
                delta: arguments.to_owned(),
            });
        }
        Ok(())
    }

    fn close_reasoning(&mut self, out: &mut Vec<StreamPart>) {
        if let Some(id) = self.reasoning_open.take() {
            out.push(StreamPart::ReasoningEnd { id });
        }
    }

    /// Closes open blocks and completes the assembled tool calls, once.
    fn flush_blocks(&mut self, out: &mut Vec<StreamPart>) -> Result<(), ModelError> {
        self.close_reasoning(out);
        if let Some(id) = self.text_open.take() {
            out.push(StreamPart::TextEnd { id });
        }
        if self.calls_flushed {
            return Ok(());
        }
        self.calls_flushed = true;
        for (index, call) in std::mem::take(&mut self.calls) {
            let (Some(call_id), Some(tool_name), true) = (call.id, call.name, call.started) else {
                return Err(ModelError::new(
                    ModelErrorKind::Protocol,
                    format!(
                        "{}: tool call at index {index} ended without a function name",
                        self.provider
                    ),
                ));
            };
            out.push(StreamPart::ToolInputEnd {
                call_id: call_id.clone(),
            });
            out.push(StreamPart::ToolCall {
                call_id,
                tool_name,
                input: call.arguments,
            });
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<StreamPart>) -> Result<(), ModelError> {
        self.flush_blocks(out)?;
        let raw = self.finish_reason.clone();
        out.push(StreamPart::Finish {
            finish_reason: raw.as_deref().map_or(FinishReason::Unknown, finish_reason),
            raw_finish_reason: raw,
            usage: std::mem::take(&mut self.usage),
            provider_metadata: None,
        });
        self.done = true;
        Ok(())
    }
}

impl WireDecoder for ChatCompletionsDecoder {
    fn event(&mut self, event: &SseEvent) -> Result<Vec<StreamPart>, ModelError> {
        self.any_event = true;
        let mut out = Vec::new();
        if event.data.trim() == "[DONE]" {
            self.finish(&mut out)?;
            return Ok(out);
        }
        if event.data.trim().is_empty() {
            return Ok(out);
        }
        let chunk = http::parse_data(&self.provider, event)?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(http::in_band_error(&self.provider, error, &event.data));
        }
        self.chunk(&chunk, &mut out)?;
        Ok(out)
    }

    fn end(&mut self) -> Result<Vec<StreamPart>, ModelError> {
        if self.finish_reason.is_none() {
            return Err(probe::ended_early(
                &self.provider,
                !self.any_event,
                "finish_reason or [DONE]",
            ));
        }
        let mut out = Vec::new();
        self.finish(&mut out)?;
        Ok(out)
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// Maps a Chat Completions `finish_reason` to [`FinishReason`].
fn finish_reason(raw: &str) -> FinishReason {
    match raw {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_a_warning_where_the_server_rejects_it_and_sent_where_it_accepts_it() {
        let mut request = ModelRequest::default();
        request.settings.top_k = Some(40);
        let openai = OpenAiConfig::openai("gpt-4o", Secret::new("sk-test"));
        assert!(matches!(
            &warnings(&openai, &request)[..],
            [CallWarning::UnsupportedSetting { setting, .. }] if setting == "top_k"
        ));
        assert!(request_body(&openai, &request).get("top_k").is_none());
        let local = OpenAiConfig::compatible("http://127.0.0.1:1/v1", "local");
        assert!(warnings(&local, &request).is_empty());
        assert_eq!(request_body(&local, &request)["top_k"], 40);
    }

    #[test]
    fn the_first_chunk_names_the_response() {
        let (parts, error) = decode(&[
            r#"{"id":"chatcmpl-1","model":"gpt-4o-2024-08-06","created":1733097600,"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            r#"{"id":"chatcmpl-1","model":"gpt-4o-2024-08-06","created":1733097600,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(error, None);
        let metadata: Vec<&StreamPart> = parts.iter().filter(|p| p.is_call_metadata()).collect();
        assert_eq!(
            metadata,
            [&StreamPart::ResponseMetadata {
                id: Some("chatcmpl-1".into()),
                model_id: Some("gpt-4o-2024-08-06".into()),
                timestamp: chrono::DateTime::from_timestamp(1_733_097_600, 0),
                headers: None,
            }]
        );
    }

    fn decode(lines: &[&str]) -> (Vec<StreamPart>, Option<ModelError>) {
        let mut decoder = ChatCompletionsDecoder::new(Arc::from("openai"));
        let mut parts = Vec::new();
        for data in lines {
            let event = SseEvent {
                event: "message".into(),
                data: (*data).into(),
                ..SseEvent::default()
            };
            match decoder.event(&event) {
                Ok(more) => parts.extend(more),
                Err(e) => return (parts, Some(e)),
            }
            if decoder.is_done() {
                return (parts, None);
            }
        }
        match decoder.end() {
            Ok(more) => {
                parts.extend(more);
                (parts, None)
            }
            Err(e) => (parts, Some(e)),
        }
    }

    #[test]
    fn reasoning_then_text_then_usage() {
        let (parts, error) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":1}}}"#,
            "[DONE]",
        ]);
        assert!(error.is_none());
        assert_eq!(
            parts,
            vec![
                StreamPart::ReasoningStart {
                    id: "reasoning-0".into()
                },
                StreamPart::ReasoningDelta {
                    id: "reasoning-0".into(),
                    text: "think".into()
                },
                StreamPart::ReasoningEnd {
                    id: "reasoning-0".into()
                },
                StreamPart::TextStart {
                    id: "text-1".into()
                },
                StreamPart::TextDelta {
                    id: "text-1".into(),
                    text: "Hi".into()
                },
                StreamPart::TextEnd {
                    id: "text-1".into()
                },
                StreamPart::Finish {
                    finish_reason: FinishReason::Stop,
                    raw_finish_reason: Some("stop".into()),
                    usage: Usage {
                        input_tokens: Some(9),
                        output_tokens: Some(3),
                        total_tokens: Some(12),
                        reasoning_tokens: Some(1),
                        cached_input_tokens: Some(4),
                    },
                    provider_metadata: None,
                },
            ]
        );
    }

    #[test]
    fn a_call_whose_name_comes_late_starts_when_named() {
        let (parts, error) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        assert!(error.is_none());
        assert_eq!(
            parts,
            vec![
                StreamPart::ToolInputStart {
                    call_id: "call_0".into(),
                    tool_name: "f".into()
                },
                StreamPart::ToolInputDelta {
                    call_id: "call_0".into(),
                    delta: r#"{"a":1}"#.into()
                },
                StreamPart::ToolInputEnd {
                    call_id: "call_0".into()
                },
                StreamPart::ToolCall {
                    call_id: "call_0".into(),
                    tool_name: "f".into(),
                    input: r#"{"a":1}"#.into()
                },
                StreamPart::Finish {
                    finish_reason: FinishReason::ToolCalls,
                    raw_finish_reason: Some("tool_calls".into()),
                    usage: Usage::default(),
                    provider_metadata: None,
                },
            ]
        );
    }

    #[test]
    fn a_nameless_call_is_a_protocol_error() {
        let (_, error) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert_eq!(error.map(|e| e.kind), Some(ModelErrorKind::Protocol));
    }

    #[test]
    fn a_usage_count_of_the_wrong_type_is_a_protocol_error_naming_it() {
        for (usage, named) in [
            (r#"{"prompt_tokens":"9"}"#, "`usage.prompt_tokens` should be a non-negative integer, found a string"),
            (r#"{"completion_tokens":-1}"#, "`usage.completion_tokens` should be a non-negative integer, found a number"),
            (r#"{"prompt_tokens_details":{"cached_tokens":1.5}}"#, "`usage.prompt_tokens_details.cached_tokens` should be a non-negative integer, found a number"),
            (r#"{"completion_tokens_details":[]}"#, "`usage.completion_tokens_details` should be an object, found an array"),
        ] {
            let usage_chunk = format!(r#"{{"choices":[],"usage":{usage}}}"#);
            let (_, error) = decode(&[
                r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#,
                &usage_chunk,
                "[DONE]",
            ]);
            let error = error.expect("a wrong-shaped usage fails the stream");
            assert_eq!(error.kind, ModelErrorKind::Protocol, "{usage}");
            assert!(error.message.contains(named), "{usage}: {}", error.message);
        }
    }

    #[test]
    fn a_usage_without_details_leaves_them_unknown() {
        let (parts, error) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3,"completion_tokens_details":null}}"#,
            "[DONE]",
        ]);
        assert!(error.is_none(), "{error:?}");
        let Some(StreamPart::Finish { usage, .. }) = parts.last() else {
            panic!("the stream ends with a finish part: {parts:?}");
        };
        assert_eq!(
            *usage,
            Usage {
                input_tokens: Some(2),
                output_tokens: Some(1),
                total_tokens: Some(3),
                reasoning_tokens: None,
                cached_input_tokens: None,
            }
        );
    }

    #[test]
    fn finish_reasons_map() {
        assert_eq!(finish_reason("stop"), FinishReason::Stop);
        assert_eq!(finish_reason("length"), FinishReason::Length);
        assert_eq!(finish_reason("tool_calls"), FinishReason::ToolCalls);
        assert_eq!(finish_reason("function_call"), FinishReason::ToolCalls);
        assert_eq!(finish_reason("content_filter"), FinishReason::ContentFilter);
        assert_eq!(finish_reason("eos"), FinishReason::Other);
    }

    #[test]
    fn an_assistant_message_of_tool_calls_only_has_empty_string_content() {
        let request = ModelRequest {
            messages: vec![ModelMessage {
                role: ModelRole::Assistant,
                content: vec![ModelContent::ToolCall {
                    call_id: "call_1".into(),
                    tool_name: "clock".into(),
                    input: json!({}),
                }],
            }],
            ..ModelRequest::default()
        };
        let body = request_body(
            &OpenAiConfig::compatible("http://127.0.0.1:1/v1", "m"),
            &request,
        );
        assert_eq!(body["messages"][0]["content"], json!(""));
        assert_eq!(body["messages"][0]["tool_calls"][0]["id"], json!("call_1"));
    }

    #[test]
    fn debug_output_hides_the_key() {
        let config = OpenAiConfig::openai("gpt-4o-mini", Secret::new("sk-secret-value"));
        let model = OpenAiModel::new(config).expect("client builds");
        assert!(!format!("{model:?}").contains("sk-secret-value"));
    }
}
