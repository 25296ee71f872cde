//! The response side: a Messages SSE stream decoded into [`StreamPart`]s.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use eventsource_stream::Event as SseEvent;
use futures::Stream;
use mull_core::{FinishReason, ModelError, ModelErrorKind, ModelStream, StreamPart, Usage};
use serde_json::{json, Map, Value};

use crate::http::{self, WireDecoder};

use super::JSON_TOOL;

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
                        streamed: None,
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
pub(super) fn stop_reason(raw: &str) -> FinishReason {
    match raw {
        "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}
