//! A deterministic, scriptable model for tests, demos and benchmarks.
//!
//! A [`ScriptedModel`] holds a queue of scripted steps; each call to
//! [`LanguageModel::stream`] consumes the next one. A step either answers with a stream of parts
//! (text, reasoning, tool calls with streamed input, sources, raw parts, in-band errors, stream
//! failures, pauses) or refuses the request with a [`ModelError`]. Every request received is
//! recorded, so a test can assert that call settings arrived unchanged.
//!
//! ```
//! use mull_providers::scripted::ScriptedModel;
//! use serde_json::json;
//!
//! let model = ScriptedModel::builder("scripted-1")
//!     .step(|s| s.text("Let me look.").tool_call("call_1", "lookup", json!({"q": "rust"})))
//!     .step(|s| s.text("Found it.").usage(12, 3))
//!     .build();
//! assert_eq!(model.remaining_steps(), 2);
//! ```

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;
use mull_core::{
    FinishReason, LanguageModel, ModelError, ModelErrorKind, ModelRequest, ModelRole, ModelStream,
    Source, StreamPart, Usage,
};
use serde_json::Value;

/// One scripted item of a step's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedItem {
    /// A part the model emits.
    Part(StreamPart),
    /// The stream fails with this error (a cut connection, a malformed event).
    Fail(ModelError),
    /// The stream pauses this long before its next item (a stall when longer than the watchdog).
    Pause(Duration),
}

/// One scripted model call.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedStep {
    /// The call succeeds and streams these items.
    Respond(Vec<ScriptedItem>),
    /// The request itself is refused with this error; no stream is returned.
    Refuse(ModelError),
}

/// Builds the items of one step. Text and reasoning become start/delta/end blocks; tool calls
/// stream their input in two deltas before the complete call; a finish part with the step's
/// usage closes the stream unless the step ended with an error.
#[derive(Debug, Clone, Default)]
pub struct StepScript {
    items: Vec<ScriptedItem>,
    usage: Usage,
    finish_reason: Option<FinishReason>,
    raw_finish_reason: Option<String>,
    provider_metadata: Option<Value>,
    no_finish: bool,
    blocks: u32,
    has_tool_call: bool,
    ended_in_error: bool,
}

impl StepScript {
    fn next_block_id(&mut self, prefix: &str) -> String {
        let id = format!("{prefix}_{}", self.blocks);
        self.blocks += 1;
        id
    }

    /// A text block holding `text` as one delta.
    pub fn text(self, text: impl Into<String>) -> Self {
        let text = text.into();
        self.text_deltas([text])
    }

    /// A text block streamed as the given deltas.
    pub fn text_deltas<I, S>(mut self, deltas: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let id = self.next_block_id("txt");
        let deltas = deltas.into_iter();
        // Start, deltas, end and the finish that usually follows: one allocation, not several.
        self.items.reserve(deltas.size_hint().0 + 3);
        self.items
            .push(part(StreamPart::TextStart { id: id.clone() }));
        for text in deltas {
            self.items.push(part(StreamPart::TextDelta {
                id: id.clone(),
                text: text.into(),
            }));
        }
        self.items.push(part(StreamPart::TextEnd { id }));
        self
    }

    /// A reasoning block holding `text` as one delta.
    pub fn reasoning(mut self, text: impl Into<String>) -> Self {
        let id = self.next_block_id("rsn");
        self.items
            .push(part(StreamPart::ReasoningStart { id: id.clone() }));
        self.items.push(part(StreamPart::ReasoningDelta {
            id: id.clone(),
            text: text.into(),
        }));
        self.items.push(part(StreamPart::ReasoningEnd { id }));
        self
    }

    /// A tool call whose input is `input` rendered as JSON, streamed in two deltas.
    pub fn tool_call(self, call_id: &str, tool_name: &str, input: Value) -> Self {
        self.tool_call_text(call_id, tool_name, &input.to_string())
    }

    /// A tool call whose input is exactly `input_text` (which need not be valid JSON).
    pub fn tool_call_text(mut self, call_id: &str, tool_name: &str, input_text: &str) -> Self {
        self.has_tool_call = true;
        self.items.push(part(StreamPart::ToolInputStart {
            call_id: call_id.to_owned(),
            tool_name: tool_name.to_owned(),
        }));
        let mut split = input_text.len() / 2;
        while !input_text.is_char_boundary(split) {
            split -= 1;
        }
        for delta in [&input_text[..split], &input_text[split..]] {
            if !delta.is_empty() {
                self.items.push(part(StreamPart::ToolInputDelta {
                    call_id: call_id.to_owned(),
                    delta: delta.to_owned(),
                }));
            }
        }
        self.items.push(part(StreamPart::ToolInputEnd {
            call_id: call_id.to_owned(),
        }));
        self.items.push(part(StreamPart::ToolCall {
            call_id: call_id.to_owned(),
            tool_name: tool_name.to_owned(),
            input: input_text.to_owned(),
        }));
        self
    }

    /// A web citation.
    pub fn source_url(mut self, id: &str, url: &str, title: Option<&str>) -> Self {
        self.items.push(part(StreamPart::Source {
            source: Source::Url {
                id: id.to_owned(),
                url: url.to_owned(),
                title: title.map(str::to_owned),
            },
        }));
        self
    }

    /// A generated file.
    pub fn file(mut self, media_type: &str, data: &str) -> Self {
        self.items.push(part(StreamPart::File {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        }));
        self
    }

    /// A provider-specific raw part.
    pub fn raw(mut self, value: Value) -> Self {
        self.items.push(part(StreamPart::Raw { value }));
        self
    }

    /// Any part, verbatim.
    pub fn part(mut self, stream_part: StreamPart) -> Self {
        self.items.push(part(stream_part));
        self
    }

    /// An in-band error part (the provider reports a failure inside the stream). No finish part
    /// is added after it.
    pub fn error(mut self, message: impl Into<String>) -> Self {
        self.items.push(part(StreamPart::Error {
            message: message.into(),
        }));
        self.ended_in_error = true;
        self
    }

    /// The stream fails with `error` here (as a transport failure would). No finish part is
    /// added after it.
    pub fn fail(mut self, error: ModelError) -> Self {
        self.items.push(ScriptedItem::Fail(error));
        self.ended_in_error = true;
        self
    }

    /// The stream goes quiet for `pause` before its next item.
    pub fn pause(mut self, pause: Duration) -> Self {
        self.items.push(ScriptedItem::Pause(pause));
        self
    }

    /// Input and output token counts of the step (total is their sum).
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Usage {
            input_tokens: Some(input_tokens),
            output_tokens: Some(output_tokens),
            total_tokens: Some(input_tokens + output_tokens),
            ..self.usage
        };
        self
    }

    /// The full usage record of the step.
    pub fn usage_full(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The finish reason; by default `tool-calls` when the step called a tool, else `stop`.
    pub fn finish(mut self, reason: FinishReason) -> Self {
        self.finish_reason = Some(reason);
        self
    }

    /// The provider's own finish reason string.
    pub fn raw_finish_reason(mut self, raw: impl Into<String>) -> Self {
        self.raw_finish_reason = Some(raw.into());
        self
    }

    /// Provider metadata carried by the finish part.
    pub fn provider_metadata(mut self, metadata: Value) -> Self {
        self.provider_metadata = Some(metadata);
        self
    }

    /// Ends the stream without a finish part (a provider that just stops).
    pub fn no_finish(mut self) -> Self {
        self.no_finish = true;
        self
    }

    fn into_items(mut self) -> Vec<ScriptedItem> {
        if !self.no_finish && !self.ended_in_error {
            let finish_reason = self.finish_reason.unwrap_or(if self.has_tool_call {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            });
            self.items.push(part(StreamPart::Finish {
                finish_reason,
                raw_finish_reason: self.raw_finish_reason,
                usage: self.usage,
                provider_metadata: self.provider_metadata,
            }));
        }
        self.items
    }
}

fn part(p: StreamPart) -> ScriptedItem {
    ScriptedItem::Part(p)
}

/// Builds a [`ScriptedModel`].
#[derive(Debug, Clone)]
pub struct ScriptedModelBuilder {
    provider: String,
    model_id: String,
    steps: Vec<ScriptedStep>,
    part_delay: Duration,
    by_conversation: bool,
}

impl ScriptedModelBuilder {
    /// Adds a step built by `f`.
    pub fn step(mut self, f: impl FnOnce(StepScript) -> StepScript) -> Self {
        self.steps
            .push(ScriptedStep::Respond(f(StepScript::default()).into_items()));
        self
    }

    /// Adds a step whose request is refused with `error`.
    pub fn refuse(mut self, error: ModelError) -> Self {
        self.steps.push(ScriptedStep::Refuse(error));
        self
    }

    /// Adds a step refused the way a provider refuses a prompt that exceeds its context window.
    pub fn refuse_context_overflow(self) -> Self {
        let mut error = ModelError::new(
            ModelErrorKind::InvalidRequest,
            "prompt is too long: 212345 tokens > 200000 maximum",
        );
        error.status = Some(400);
        self.refuse(error)
    }

    /// Adds a step verbatim.
    pub fn raw_step(mut self, step: ScriptedStep) -> Self {
        self.steps.push(step);
        self
    }

    /// Waits this long before every part (zero by default), for realistic pacing.
    pub fn part_delay(mut self, delay: Duration) -> Self {
        self.part_delay = delay;
        self
    }

    /// Plays the step numbered by how many assistant messages the request already holds,
    /// instead of the next unplayed one.
    ///
    /// A script then follows the conversation rather than the calls this value has seen: a
    /// session reopened by another process (or after a server evicted it) with a fresh model
    /// carries on where its conversation is, and a retried call gets the same step again.
    /// Each scripted step must leave exactly one assistant message behind, as a step of text
    /// and tool calls does.
    pub fn by_conversation(mut self) -> Self {
        self.by_conversation = true;
        self
    }

    /// Names the provider (`scripted` by default).
    pub fn provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }

    /// The model.
    pub fn build(self) -> ScriptedModel {
        ScriptedModel {
            provider: self.provider,
            model_id: self.model_id,
            part_delay: self.part_delay,
            by_conversation: self.by_conversation,
            inner: Arc::new(Mutex::new(Inner {
                steps: self.steps.into(),
                requests: Vec::new(),
            })),
        }
    }
}

#[derive(Debug)]
struct Inner {
    steps: VecDeque<ScriptedStep>,
    requests: Vec<ModelRequest>,
}

/// A model that plays back scripted steps, one per call, and records the requests it received.
/// Clones share the script and the record.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    provider: String,
    model_id: String,
    part_delay: Duration,
    by_conversation: bool,
    inner: Arc<Mutex<Inner>>,
}

impl ScriptedModel {
    /// Starts a script for a model named `model_id`.
    pub fn builder(model_id: impl Into<String>) -> ScriptedModelBuilder {
        ScriptedModelBuilder {
            provider: "scripted".to_owned(),
            model_id: model_id.into(),
            steps: Vec::new(),
            part_delay: Duration::ZERO,
            by_conversation: false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().requests.clone()
    }

    /// How many scripted steps have not been consumed yet (in a script that follows the
    /// conversation, none is ever consumed).
    pub fn remaining_steps(&self) -> usize {
        self.lock().steps.len()
    }

    /// Appends steps to the script (for sessions scripted turn by turn).
    pub fn push_step(&self, f: impl FnOnce(StepScript) -> StepScript) {
        self.lock()
            .steps
            .push_back(ScriptedStep::Respond(f(StepScript::default()).into_items()));
    }
}

#[async_trait]
impl LanguageModel for ScriptedModel {
    fn provider(&self) -> &str {
        &self.provider
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let step = {
            let mut inner = self.lock();
            // Only a script that follows the conversation looks at its history.
            let answered = self.by_conversation.then(|| {
                request
                    .messages
                    .iter()
                    .filter(|m| m.role == ModelRole::Assistant)
                    .count()
            });
            inner.requests.push(request);
            let call = inner.requests.len();
            let step = match answered {
                Some(answered) => inner.steps.get(answered).cloned(),
                None => inner.steps.pop_front(),
            };
            step.ok_or_else(|| {
                let why = match answered {
                    Some(answered) => format!(
                        "the conversation holds {answered} assistant messages and the script has {} steps",
                        inner.steps.len()
                    ),
                    None => format!("call {call} has no scripted step left"),
                };
                ModelError::new(
                    ModelErrorKind::Other,
                    format!("scripted model {}: {why}", self.model_id),
                )
            })?
        };
        let items = match step {
            ScriptedStep::Refuse(error) => return Err(error),
            ScriptedStep::Respond(items) => items,
        };
        Ok(Box::pin(ScriptedStream {
            items: items.into_iter(),
            part_delay: self.part_delay,
            wait: None,
            held: None,
            failed: false,
        }))
    }
}

/// The stream of one scripted call: its items in order, waiting where the script (or the
/// model's part delay) says. A failure is the last item delivered. Written out rather than
/// composed from stream adapters: an unpaced script, the usual one, then costs no timer and no
/// per-item future.
struct ScriptedStream {
    items: std::vec::IntoIter<ScriptedItem>,
    part_delay: Duration,
    /// The wait in progress, if any.
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The part delivered once `wait` is over.
    held: Option<StreamPart>,
    failed: bool,
}

impl Stream for ScriptedStream {
    type Item = Result<StreamPart, ModelError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(wait) = this.wait.as_mut() {
                ready!(wait.as_mut().poll(cx));
                this.wait = None;
            }
            if let Some(part) = this.held.take() {
                return Poll::Ready(Some(Ok(part)));
            }
            if this.failed {
                return Poll::Ready(None);
            }
            match this.items.next() {
                None => return Poll::Ready(None),
                Some(ScriptedItem::Pause(pause)) => {
                    this.wait = Some(Box::pin(tokio::time::sleep(pause)));
                }
                Some(ScriptedItem::Part(part)) if this.part_delay.is_zero() => {
                    return Poll::Ready(Some(Ok(part)));
                }
                Some(ScriptedItem::Part(part)) => {
                    this.held = Some(part);
                    this.wait = Some(Box::pin(tokio::time::sleep(this.part_delay)));
                }
                Some(ScriptedItem::Fail(error)) => {
                    this.failed = true;
                    return Poll::Ready(Some(Err(error)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use serde_json::json;

    fn collect(model: &ScriptedModel) -> Vec<Result<StreamPart, ModelError>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async {
            match model.stream(ModelRequest::default()).await {
                Ok(s) => s.collect::<Vec<_>>().await,
                Err(e) => vec![Err(e)],
            }
        })
    }

    #[test]
    fn a_script_that_follows_the_conversation_plays_the_step_its_history_has_reached() {
        use mull_core::ModelMessage;
        let script = || {
            ScriptedModel::builder("m")
                .step(|s| s.text("first"))
                .step(|s| s.text("second"))
                .by_conversation()
                .build()
        };
        let texts = |model: &ScriptedModel, request: ModelRequest| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            rt.block_on(async {
                match model.stream(request).await {
                    Ok(s) => s
                        .filter_map(|p| async move {
                            match p {
                                Ok(StreamPart::TextDelta { text, .. }) => Some(text),
                                _ => None,
                            }
                        })
                        .collect::<Vec<_>>()
                        .await
                        .join(""),
                    Err(e) => format!("error: {e}"),
                }
            })
        };
        let user = ModelMessage::text(ModelRole::User, "hi");
        let answered = ModelRequest {
            messages: vec![
                user.clone(),
                ModelMessage::text(ModelRole::Assistant, "first"),
                user.clone(),
            ],
            ..ModelRequest::default()
        };
        // A fresh model (a reopened session) picks up at the conversation's second step, and
        // asking again with the same history gets the same step, not the next one.
        let fresh = script();
        assert_eq!(texts(&fresh, answered.clone()), "second");
        assert_eq!(texts(&fresh, answered.clone()), "second");
        assert_eq!(fresh.remaining_steps(), 2);
        let start = ModelRequest {
            messages: vec![user.clone()],
            ..ModelRequest::default()
        };
        assert_eq!(texts(&fresh, start), "first");
        // Past the script's end the error says where the conversation is.
        let mut beyond = answered;
        beyond
            .messages
            .push(ModelMessage::text(ModelRole::Assistant, "second"));
        let error = texts(&fresh, beyond);
        assert!(
            error.contains("holds 2 assistant messages and the script has 2 steps"),
            "{error}"
        );
    }

    #[test]
    fn each_call_consumes_one_step_and_records_the_request() {
        let model = ScriptedModel::builder("m")
            .step(|s| s.text("hi"))
            .step(|s| s.text("again"))
            .build();
        let first = collect(&model);
        assert_eq!(first.len(), 4, "{first:?}");
        assert!(matches!(
            first[3],
            Ok(StreamPart::Finish {
                finish_reason: FinishReason::Stop,
                ..
            })
        ));
        assert_eq!(model.remaining_steps(), 1);
        collect(&model);
        let exhausted = collect(&model);
        assert!(matches!(&exhausted[0], Err(e) if e.message.contains("call 3")));
        assert_eq!(model.requests().len(), 3);
    }

    #[test]
    fn tool_calls_stream_their_input_and_finish_with_tool_calls() {
        let model = ScriptedModel::builder("m")
            .step(|s| {
                s.tool_call("c1", "lookup", json!({"q": "rust"}))
                    .usage(5, 2)
            })
            .build();
        let parts: Vec<StreamPart> = collect(&model).into_iter().flatten().collect();
        let kinds: Vec<&str> = parts.iter().map(StreamPart::kind).collect();
        assert_eq!(
            kinds,
            [
                "tool-input-start",
                "tool-input-delta",
                "tool-input-delta",
                "tool-input-end",
                "tool-call",
                "finish"
            ]
        );
        let deltas: String = parts
            .iter()
            .filter_map(|p| match p {
                StreamPart::ToolInputDelta { delta, .. } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, r#"{"q":"rust"}"#);
        assert!(matches!(
            parts.last(),
            Some(StreamPart::Finish { finish_reason: FinishReason::ToolCalls, usage, .. })
                if usage.total_tokens == Some(7)
        ));
    }

    #[test]
    fn a_stream_failure_ends_the_stream() {
        let model = ScriptedModel::builder("m")
            .step(|s| {
                s.text("partial")
                    .fail(ModelError::new(ModelErrorKind::Transient, "cut"))
                    .text("never")
            })
            .build();
        let items = collect(&model);
        assert_eq!(items.len(), 4);
        assert!(items[3].is_err());
    }

    #[test]
    fn pauses_and_the_part_delay_come_before_their_parts_in_order() {
        let model = ScriptedModel::builder("paced")
            .part_delay(Duration::from_millis(5))
            .step(|s| {
                s.text_deltas(["a", "b"])
                    .pause(Duration::from_millis(30))
                    .text_deltas(["c"])
            })
            .build();
        let start = std::time::Instant::now();
        let parts = collect(&model);
        let elapsed = start.elapsed();
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|p| match p {
                Ok(StreamPart::TextDelta { text, .. }) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["a", "b", "c"]);
        assert!(parts.iter().all(Result::is_ok));
        // Every part waited its delay, and the pause came on top (a lower bound only: a busy
        // machine may take longer, never shorter).
        let waits = Duration::from_millis(5) * parts.len() as u32 + Duration::from_millis(30);
        assert!(elapsed >= waits, "{elapsed:?} < {waits:?}");
    }

    #[test]
    fn refused_requests_return_the_error() {
        let model = ScriptedModel::builder("m")
            .refuse_context_overflow()
            .build();
        let items = collect(&model);
        assert!(matches!(&items[0], Err(e) if e.message.contains("prompt is too long")));
    }
}
