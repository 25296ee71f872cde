//! The response side: a Chat Completions SSE stream decoded into [`StreamPart`]s.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use eventsource_stream::Event as SseEvent;
use futures::Stream;
use mull_core::{FinishReason, ModelError, ModelErrorKind, ModelStream, StreamPart, Usage};
use serde_json::Value;

use crate::http::{self, WireDecoder};
use crate::probe;

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
                    streamed: None,
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

/// Turns one non-streaming `chat.completion` response into the parts its stream would have
/// given, by the same decoder: each choice's `message` is read as one chunk's `delta` (tool
/// calls are whole, so their position is their index), then the stream's end. The first part is
/// `response-metadata` marked `streamed: false`. A completion without `finish_reason` finishes
/// as `unknown` rather than failing: nothing is left to arrive.
pub(crate) fn completion_parts(
    provider: Arc<str>,
    completion: &Value,
) -> Result<Vec<StreamPart>, ModelError> {
    const COMPLETION: &str = "chat.completion";
    if let Some(error) = completion.get("error").filter(|e| !e.is_null()) {
        return Err(http::in_band_error(
            &provider,
            error,
            &completion.to_string(),
        ));
    }
    if !completion.is_object() {
        return Err(http::wrong_shape(
            &provider,
            COMPLETION,
            &format!(
                "the answer should be an object, found {}",
                http::json_kind(completion)
            ),
        ));
    }
    let mut chunk = completion.clone();
    if let Some(choices) = chunk.get_mut("choices").and_then(Value::as_array_mut) {
        for choice in choices.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(message) = choice.remove("message") {
                choice.insert("delta".into(), message);
            }
        }
    }
    let mut decoder = ChatCompletionsDecoder::new(provider);
    let mut out = Vec::new();
    decoder.chunk(&chunk, &mut out)?;
    decoder.finish(&mut out)?;
    match out
        .iter_mut()
        .find(|p| matches!(p, StreamPart::ResponseMetadata { .. }))
    {
        Some(StreamPart::ResponseMetadata { streamed, .. }) => *streamed = Some(false),
        _ => out.insert(
            0,
            StreamPart::ResponseMetadata {
                id: None,
                model_id: None,
                timestamp: None,
                headers: None,
                streamed: Some(false),
            },
        ),
    }
    Ok(out)
}

/// Maps a Chat Completions `finish_reason` to [`FinishReason`].
pub(super) fn finish_reason(raw: &str) -> FinishReason {
    match raw {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}
