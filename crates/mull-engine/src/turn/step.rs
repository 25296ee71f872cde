//! The steps of a turn: `before_step`, the model call with its retries and stall watchdog,
//! each part logged, sent and observed, the step record and `on_step_finish`, stop conditions.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mull_core::{
    to_model_messages, ErrorStage, Event, LanguageModel, ModelMessage, ModelRequest, ModelRole,
    ModelStream, RequestSummary, StepReport, StreamPart, UIMessage, UIPart,
};
use serde_json::json;
use tracing::Instrument;

use super::assemble::resolve_model;
use super::run::{Next, PendingCall, ResponseMeta, StepEnd, StepParts, StepsEnd, ToolEnd, TurnRun};
use crate::config::{ResolvedTurn, StepConfig, SystemPrompt};
use crate::context::PrepareStepContext;
use crate::error::{ChatError, EngineError};
use crate::hooks::Observed;
use crate::transform::apply_all;

impl TurnRun<'_> {
    pub(super) async fn run_steps(
        &mut self,
        resolved: &ResolvedTurn,
    ) -> Result<StepsEnd, EngineError> {
        let mut resolved = std::borrow::Cow::Borrowed(resolved);
        let overridden = resolved
            .overrides
            .iter()
            .any(|o| o == "messages" || o.ends_with(":messages"));
        let mut compactions = 0;
        let mut step = 0;
        loop {
            let span = tracing::info_span!(
                "chat",
                otel.name = tracing::field::Empty,
                otel.kind = "client",
                gen_ai.operation.name = "chat",
                gen_ai.provider.name = tracing::field::Empty,
                gen_ai.request.model = tracing::field::Empty,
                server.address = tracing::field::Empty,
                server.port = tracing::field::Empty,
                gen_ai.conversation.id = %self.parts.session_id(),
                gen_ai.request.stream = true,
                gen_ai.response.finish_reasons = tracing::field::Empty,
                gen_ai.response.id = tracing::field::Empty,
                gen_ai.response.model = tracing::field::Empty,
                gen_ai.response.time_to_first_chunk = tracing::field::Empty,
                gen_ai.usage.input_tokens = tracing::field::Empty,
                gen_ai.usage.output_tokens = tracing::field::Empty,
                gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
                gen_ai.usage.cache_write.input_tokens = tracing::field::Empty,
                gen_ai.usage.reasoning.output_tokens = tracing::field::Empty,
                gen_ai.conversation.compacted = tracing::field::Empty,
                error.type = tracing::field::Empty,
                otel.status_description = tracing::field::Empty,
                mull.step = i64::from(step),
            );
            if compactions > 0 {
                span.record("gen_ai.conversation.compacted", true);
            }
            match self
                .run_step(&resolved, step, &span)
                .instrument(span.clone())
                .await?
            {
                StepEnd::Continue => {
                    // No gate: calling the model again leaves nothing behind; the step's
                    // events commit with the batch or the next gate.
                    step += 1;
                    let last = self.steps.last();
                    let tid = Some(self.turn_id.as_str());
                    let guarded = self
                        .parts
                        .compactor()
                        .proactive(tid, last, &mut compactions, overridden)
                        .await?;
                    if let Some(messages) = guarded {
                        resolved.to_mut().messages = messages;
                    }
                }
                StepEnd::Stop => return Ok(StepsEnd::Completed),
                StepEnd::Aborted => return Ok(StepsEnd::Aborted),
                StepEnd::Failed(error) => {
                    super::failure::mark_span(&span, &error);
                    return Ok(StepsEnd::Failed(error));
                }
            }
        }
    }

    pub(super) async fn run_step(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        span: &tracing::Span,
    ) -> Result<StepEnd, EngineError> {
        if self.spec.signal.is_cancelled() {
            return Ok(StepEnd::Aborted);
        }
        let call = match self.configure_step(resolved, step, span).await? {
            Ok(call) => call,
            Err(end) => return Ok(end),
        };
        let parts = match self.stream_step(resolved, step, span, &call).await? {
            Ok(parts) => parts,
            Err(end) => return Ok(end),
        };
        self.finish_step(resolved, step, span, call, parts).await
    }

    /// Starts step `step`: `step_started`, `before_step` and its config merged over the turn's,
    /// the model request built, `step_configured` recorded. `Err` is how the step ends when it
    /// cannot start (a failed `before_step`, an unknown model, a malformed config).
    async fn configure_step(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        span: &tracing::Span,
    ) -> Result<Result<StepCall, StepEnd>, EngineError> {
        self.append(Event::StepStarted { step })?;
        let mut messages = resolved.messages.clone();
        let so_far = self.parts.recorder.read(|s| {
            s.draft
                .as_ref()
                .filter(|d| d.id == self.message_id)
                .map(|d| to_model_messages(std::slice::from_ref(d)))
                .unwrap_or_default()
        });
        messages.extend(so_far);
        let (config, step_model) = match self.before_step(resolved, step, &messages).await? {
            Ok(configured) => configured,
            Err(end) => return Ok(Err(end)),
        };
        let overrides = step_overrides(&config);
        let StepConfig {
            tool_choice,
            active_tools,
            system,
            messages: step_messages,
            context,
            provider_options,
            ..
        } = config;
        if let Some(context) = context {
            self.tool_context = context;
        }
        let active_tools = active_tools.or_else(|| resolved.active_tools.clone());
        let tool_choice = tool_choice.unwrap_or_else(|| resolved.tool_choice.clone());
        let (request, recorded_system, messages) = match step_request(
            resolved,
            StepRequest {
                system,
                messages: step_messages.unwrap_or(messages),
                provider_options,
                active_tools: &active_tools,
                tool_choice,
            },
        ) {
            Ok(built) => built,
            Err(message) => {
                return Ok(Err(StepEnd::Failed(
                    self.error(ErrorStage::Stream, message),
                )))
            }
        };
        // Summarised (and hashed) before the call starts: a step cut short is identified too.
        let summary = self.summaries.summarize(&request);
        // The budget check before the step's call: a used-up limit ends the turn here.
        if let Some(error) = crate::budget::before_call(
            self.parts.recorder,
            self.parts.config,
            self.tid(),
            mull_core::ModelCallKind::Step,
            Some(step),
        )? {
            return Ok(Err(StepEnd::Failed(error)));
        }
        // When the provider names no time for its response, the response is dated when the
        // call started (as the AI SDK does): this event's time, so no extra clock read.
        let call_started = std::time::Instant::now();
        let opened_at = self
            .parts
            .recorder
            .append(
                self.tid(),
                Event::StepConfigured {
                    step,
                    model_id: step_model.model_id().to_owned(),
                    active_tools: active_tools.clone(),
                    tool_choice: request.tool_choice.clone(),
                    system: recorded_system,
                    message_count: u32::try_from(messages.len()).unwrap_or(u32::MAX),
                    overrides,
                    request_hash: Some(summary.hash.clone()),
                },
            )?
            .at;
        span.record(
            "otel.name",
            tracing::field::display(format!("chat {}", step_model.model_id())),
        );
        span.record("gen_ai.provider.name", step_model.provider());
        span.record("gen_ai.request.model", step_model.model_id());
        if let Some((address, port)) = step_model.server() {
            span.record("server.address", address.as_str());
            span.record("server.port", i64::from(port));
        }
        Ok(Ok(StepCall {
            model: step_model,
            request,
            summary,
            opened_at,
            active_tools,
            messages,
            started: call_started,
        }))
    }

    /// `before_step` on the step's conversation, and the model its config chooses (the turn's
    /// when it chooses none). `Err` is how the step ends when either fails.
    async fn before_step(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        messages: &[ModelMessage],
    ) -> Result<Result<(StepConfig, Arc<dyn LanguageModel>), StepEnd>, EngineError> {
        let prepare = PrepareStepContext {
            steps: self.steps.clone(),
            step_number: step,
            model: Arc::clone(&resolved.model),
            messages: messages.to_vec(),
            context: self.tool_context.clone(),
        };
        let config = match self
            .parts
            .hooks
            .guard_hook(
                self.tid(),
                crate::outside::HookPoint::BeforeStep(&prepare),
                self.parts.hooks.agent().before_step(&prepare),
            )
            .await?
        {
            Ok(config) => config.unwrap_or_default(),
            Err(text) => {
                return Ok(Err(StepEnd::Failed(self.error(
                    ErrorStage::Stream,
                    format!("before_step failed: {text}"),
                ))))
            }
        };
        let step_model = match resolve_model(self.parts, config.model.as_ref()) {
            Ok(model) => model.unwrap_or_else(|| Arc::clone(&resolved.model)),
            Err(message) => {
                return Ok(Err(StepEnd::Failed(
                    self.error(ErrorStage::Stream, message),
                )))
            }
        };
        Ok(Ok((config, step_model)))
    }

    /// Streams the step's model call: each part logged, shown and observed, each tool call
    /// handled as it arrives. `Err` is how the step ends when the stream does not (an abort, a
    /// stall, an error).
    async fn stream_step(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        span: &tracing::Span,
        call: &StepCall,
    ) -> Result<Result<StepParts, StepEnd>, EngineError> {
        let mut stream = match self
            .open_stream(resolved, step, &call.model, &call.request)
            .await?
        {
            Ok(stream) => stream,
            Err(end) => return Ok(Err(end)),
        };
        let mut parts = StepParts::default();
        let mut first_chunk_seen = false;
        let stall = Duration::from_millis(resolved.stall_timeout_ms);
        // One wait on the abort for the whole step, not a new one per part: each new wait
        // registers with the token (a lock) and unregisters when dropped (another).
        let signal = self.spec.signal.clone();
        let mut aborted = std::pin::pin!(signal.cancelled());
        loop {
            let next = tokio::select! {
                biased;
                _ = &mut aborted => return Ok(Err(StepEnd::Aborted)),
                next = next_part(&mut stream, stall) => next,
            };
            let part = match next {
                Next::End => break,
                Next::Stalled => {
                    return Ok(Err(StepEnd::Failed(self.error(
                        ErrorStage::Stream,
                        format!(
                            "the model stream stalled: no part for {} ms",
                            resolved.stall_timeout_ms
                        ),
                    ))))
                }
                Next::Failed(e) => {
                    return Ok(Err(StepEnd::Failed(ChatError {
                        model_error: Some(e.clone()),
                        ..self.error(ErrorStage::Stream, e.message)
                    })))
                }
                Next::Part(part) => part,
            };
            if !first_chunk_seen && part.is_model_output() {
                first_chunk_seen = true;
                // Measured on the process's monotonic clock, not the session's: a read of the
                // injected clock is served from the log under replay, so an extra one would
                // shift every later event's time. The log's own times give re-exports theirs.
                let seconds = call.started.elapsed().as_secs_f64();
                span.record("gen_ai.response.time_to_first_chunk", seconds);
            }
            match &part {
                StreamPart::Error { message } => {
                    let message = message.clone();
                    self.emit(resolved, step, part, &mut parts).await?;
                    return Ok(Err(StepEnd::Failed(
                        self.error(ErrorStage::Stream, message),
                    )));
                }
                StreamPart::ToolCall {
                    call_id,
                    tool_name,
                    input,
                } => {
                    let (call_id, tool_name, input) =
                        (call_id.clone(), tool_name.clone(), input.clone());
                    // Think's order: the tool-call chunk is logged and sent now, and reaches
                    // on_chunk once the call's hooks ran (before its result's on_chunk).
                    for shown in self.show(resolved, step, part, &mut parts)? {
                        match &shown {
                            StreamPart::ToolCall { call_id: c, .. } if *c == call_id => {
                                parts.deferred_call =
                                    Some(Observed::chunk(step, shown, &self.spec.request_id));
                            }
                            _ => self.observe_chunk(step, shown, &mut parts).await?,
                        }
                    }
                    let call = PendingCall {
                        step,
                        call_id,
                        tool_name,
                        input_text: input,
                        active: call.active_tools.as_deref(),
                        messages: &call.messages,
                    };
                    let end = self.tool_call(resolved, call, &mut parts).await?;
                    // A call with no outcome in this step (a client tool) is observed now.
                    self.release_deferred_call(&mut parts).await?;
                    match end {
                        ToolEnd::Done => {}
                        ToolEnd::Aborted => return Ok(Err(StepEnd::Aborted)),
                        ToolEnd::Stalled(error) => return Ok(Err(StepEnd::Failed(error))),
                    }
                }
                _ => self.emit(resolved, step, part, &mut parts).await?,
            }
        }
        Ok(Ok(parts))
    }

    /// Ends the step: its record (`step_finished`), `on_step_finish`, then whether the turn
    /// goes on (stop conditions, a client call waiting, an abort).
    async fn finish_step(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        span: &tracing::Span,
        call: StepCall,
        parts: StepParts,
    ) -> Result<StepEnd, EngineError> {
        let report = StepReport {
            step,
            model_id: call.model.model_id().to_owned(),
            finish_reason: parts.finish_reason.unwrap_or_default(),
            raw_finish_reason: parts.raw_finish_reason.clone(),
            usage: parts.usage.clone(),
            warnings: parts.warnings.clone(),
            request: call.summary.to_value(),
            response: response_metadata(&parts.response, call.model.as_ref(), call.opened_at),
            provider_metadata: parts.provider_metadata.clone(),
        };
        crate::otel_fields::record_step(span, &report);
        // Not a barrier of its own: the step becomes durable before the next step starts, or
        // with the turn's end.
        let appended = self.parts.recorder.append(
            self.tid(),
            Event::StepFinished {
                record: Box::new(report),
            },
        )?;
        let Event::StepFinished { record: report } = appended.event else {
            unreachable!("the log returns the step_finished event it was given")
        };
        // The step's content is read where the log keeps it, once: the draft (its chunks) and
        // the facts (its tool calls and their results).
        let (record, reasoning, response_messages) = self.parts.recorder.read(|s| {
            let (record, reasoning) = s.step_record(&self.turn_id, &self.message_id, *report);
            let messages = s
                .draft
                .as_ref()
                .filter(|d| d.id == self.message_id)
                .map(last_step_messages)
                .unwrap_or_default();
            (record, reasoning, messages)
        });
        let step_finished = Observed::step(record, reasoning, response_messages);
        let observed = self.parts.hooks.dispatch(self.tid(), &step_finished).await;
        let Observed::Step(ctx) = step_finished else {
            unreachable!("a step_finished event is observed as a step")
        };
        self.usage.add(&ctx.record.usage);
        let last_step = parts.waits_for_client || ctx.record.tool_calls.is_empty();
        // The hooks have seen the record; the turn keeps it (not a copy) for its result.
        self.steps.push(ctx.record);
        observed?;
        // An abort while `on_step_finish` ran (or cut it off) ends the turn here.
        if self.spec.signal.is_cancelled() {
            return Ok(StepEnd::Aborted);
        }
        if last_step {
            return Ok(StepEnd::Stop);
        }
        if resolved.stop_when.iter().any(|c| c.matches(&self.steps)) {
            return Ok(StepEnd::Stop);
        }
        Ok(StepEnd::Continue)
    }

    /// Starts the model call, retrying retryable errors (each retry a `model_retried` event).
    pub(super) async fn open_stream(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        model: &Arc<dyn LanguageModel>,
        request: &ModelRequest,
    ) -> Result<Result<ModelStream, StepEnd>, EngineError> {
        let mut retries = 0u32;
        loop {
            let call = tokio::select! {
                biased;
                _ = self.spec.signal.cancelled() => return Ok(Err(StepEnd::Aborted)),
                call = model.stream(request.clone()) => call,
            };
            match call {
                Ok(stream) => return Ok(Ok(stream)),
                Err(e) if e.is_retryable() && retries < resolved.max_retries => {
                    // A retry is a model call: checked against the budget like the first.
                    if let Some(error) = crate::budget::before_call(
                        self.parts.recorder,
                        self.parts.config,
                        self.tid(),
                        mull_core::ModelCallKind::Retry,
                        Some(step),
                    )? {
                        return Ok(Err(StepEnd::Failed(ChatError {
                            model_error: Some(e.clone()),
                            ..error
                        })));
                    }
                    let delay = e.retry_after.unwrap_or_else(|| {
                        self.parts.options.retry_base_delay * 2u32.saturating_pow(retries)
                    });
                    retries += 1;
                    self.append(Event::ModelRetried {
                        step,
                        attempt: retries,
                        error: e.message.clone(),
                        delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    })?;
                    tokio::select! {
                        biased;
                        _ = self.spec.signal.cancelled() => return Ok(Err(StepEnd::Aborted)),
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
                Err(e) => {
                    return Ok(Err(StepEnd::Failed(ChatError {
                        model_error: Some(e.clone()),
                        ..self.error(ErrorStage::Stream, e.message)
                    })))
                }
            }
        }
    }

    /// One part: transformed, logged, sent to the client, observed by `on_chunk`.
    pub(super) async fn emit(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        part: StreamPart,
        parts: &mut StepParts,
    ) -> Result<(), EngineError> {
        // No transform can touch it: the part is shown as it is, with no list to carry it.
        if resolved.transforms.is_empty() || part.is_call_metadata() {
            let shown = self.show_one(resolved, step, part, parts)?;
            return self.observe_chunk(step, shown, parts).await;
        }
        // Transforms at work: the parts they show are observed in a future of their own, so
        // that emitting an untransformed part stays small to build and move.
        let shown = self.show(resolved, step, part, parts)?;
        Box::pin(async move {
            for shown in shown {
                self.observe_chunk(step, shown, parts).await?;
            }
            Ok(())
        })
        .await
    }

    /// Runs the transforms on `part`, logs what the user sees (after a `part_transformed`
    /// event when the transforms changed anything), folds it into the step and sends it to the
    /// client. Returns the shown parts, for `on_chunk`: every part is logged before anything
    /// observes it.
    pub(super) fn show(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        part: StreamPart,
        parts: &mut StepParts,
    ) -> Result<Vec<StreamPart>, EngineError> {
        // Call metadata describes the call, not its content: no transform sees it.
        let transformed = if part.is_call_metadata() {
            None
        } else {
            apply_all(&resolved.transforms, &part)
        };
        let to_show = match transformed {
            None => vec![part],
            Some(shown) => {
                self.append(Event::PartTransformed {
                    step,
                    original: part,
                    shown: u32::try_from(shown.len()).unwrap_or(u32::MAX),
                })?;
                shown
            }
        };
        let mut out = Vec::with_capacity(to_show.len());
        for part in to_show {
            out.push(self.show_one(resolved, step, part, parts)?);
        }
        Ok(out)
    }

    /// Logs one part the user sees as a chunk, folds it into the step and sends it to the
    /// client; hands it back for `on_chunk`.
    fn show_one(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        part: StreamPart,
        parts: &mut StepParts,
    ) -> Result<StreamPart, EngineError> {
        let appended = self.parts.recorder.append(
            self.tid(),
            Event::Chunk {
                step,
                part,
                original: None,
            },
        )?;
        // The log hands the event back: its part is reused, not copied before the append.
        let Event::Chunk { part: shown, .. } = appended.event else {
            unreachable!("the log returns the chunk event it was given")
        };
        parts.observe(&shown);
        if let Some(metadata) = resolved
            .message_metadata
            .as_ref()
            .and_then(|m| m.of(&shown))
        {
            self.append(Event::MessageMetadataUpdated { step, metadata })?;
        }
        if let Some(client) = &self.spec.client {
            if !shown.is_call_metadata() && (resolved.send_reasoning || !shown.is_reasoning()) {
                // A client that went away stops listening; the turn goes on and is logged.
                let _ = client.send(shown.clone());
            }
        }
        Ok(shown)
    }

    /// `on_chunk` (the agent's, then the extensions') for a logged part of one of the seed's
    /// chunk kinds. A result or error of the tool call whose `on_chunk` was deferred releases
    /// that call's first, so a call is always observed before its outcome.
    async fn observe_chunk(
        &mut self,
        step: u32,
        shown: StreamPart,
        parts: &mut StepParts,
    ) -> Result<(), EngineError> {
        if let StreamPart::ToolResult { call_id, .. } | StreamPart::ToolError { call_id, .. } =
            &shown
        {
            let waiting = parts.deferred_call.as_ref().is_some_and(|d| {
                matches!(d, Observed::Chunk(ctx)
                    if matches!(&ctx.chunk, StreamPart::ToolCall { call_id: c, .. } if c == call_id))
            });
            if waiting {
                // Once per tool call: in a future of its own, so that observing a chunk stays
                // small to build and move.
                Box::pin(self.release_deferred_call(parts)).await?;
            }
        }
        if !shown.is_observed_chunk() {
            return Ok(());
        }
        let observed = Observed::chunk(step, shown, &self.spec.request_id);
        self.parts.hooks.dispatch(self.tid(), &observed).await
    }

    /// `on_chunk` for the tool call deferred until its hooks ran, if one waits.
    pub(super) async fn release_deferred_call(
        &mut self,
        parts: &mut StepParts,
    ) -> Result<(), EngineError> {
        match parts.deferred_call.take() {
            Some(observed) => self.parts.hooks.dispatch(self.tid(), &observed).await,
            None => Ok(()),
        }
    }
}

/// The next part of the stream, or `Stalled` when the watchdog (if on) fires first.
async fn next_part(stream: &mut ModelStream, stall: Duration) -> Next {
    // A part that is already there needs no watchdog: the timer (a clock read and a timer
    // entry) is only set up when the stream has to be waited for.
    let ready = std::future::poll_fn(|cx| match stream.poll_next_unpin(cx) {
        std::task::Poll::Ready(next) => std::task::Poll::Ready(Some(next)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await;
    let next = match ready {
        Some(next) => {
            // A stream that is always ready (a fast provider, a scripted or replayed one)
            // would otherwise keep this thread until the turn ends: every other task woken
            // meanwhile — another connection, the log's writer — would wait for it. Spending
            // the task's cooperative budget yields to the runtime now and then, as tokio's own
            // channels and sockets do.
            tokio::task::consume_budget().await;
            next
        }
        None if stall.is_zero() => stream.next().await,
        None => match tokio::time::timeout(stall, stream.next()).await {
            Ok(next) => next,
            Err(_) => return Next::Stalled,
        },
    };
    match next {
        None => Next::End,
        Some(Ok(part)) => Next::Part(part),
        Some(Err(e)) => Next::Failed(e),
    }
}

fn step_overrides(config: &StepConfig) -> Vec<String> {
    let mut out = Vec::new();
    let fields: [(&str, bool); 7] = [
        ("model", config.model.is_some()),
        ("tool_choice", config.tool_choice.is_some()),
        ("active_tools", config.active_tools.is_some()),
        ("system", config.system.is_some()),
        ("messages", config.messages.is_some()),
        ("context", config.context.is_some()),
        ("provider_options", config.provider_options.is_some()),
    ];
    for (name, set) in fields {
        if set {
            out.push(name.to_owned());
        }
    }
    out
}

/// The step record's `response`: the provider's own response metadata (id, model, time,
/// headers) where it sent them, else what mull knows (the requested model, when the stream
/// opened).
fn response_metadata(
    meta: &ResponseMeta,
    model: &dyn LanguageModel,
    opened_at: chrono::DateTime<chrono::Utc>,
) -> serde_json::Value {
    let mut out = json!({
        "provider": model.provider(),
        "model_id": meta.model_id.as_deref().unwrap_or(model.model_id()),
        "timestamp": meta.timestamp.unwrap_or(opened_at),
    });
    if let Some(id) = &meta.id {
        out["id"] = json!(id);
    }
    if let Some(headers) = &meta.headers {
        out["headers"] = json!(headers);
    }
    if let Some(streamed) = meta.streamed {
        out["streamed"] = json!(streamed);
    }
    // Where the call went, so a re-exported trace carries it as a live one does.
    if let Some((address, port)) = model.server() {
        out["server_address"] = json!(address);
        out["server_port"] = json!(port);
    }
    out
}

/// The model messages of the draft's last step.
fn last_step_messages(draft: &UIMessage) -> Vec<ModelMessage> {
    let start = draft
        .parts
        .iter()
        .rposition(|p| matches!(p, UIPart::StepStart))
        .unwrap_or(0);
    let last = UIMessage {
        parts: draft.parts[start..].to_vec(),
        ..draft.clone()
    };
    to_model_messages(std::slice::from_ref(&last))
}

/// A step's model call as configured, for streaming it and recording the step.
struct StepCall {
    model: Arc<dyn LanguageModel>,
    request: ModelRequest,
    summary: RequestSummary,
    /// When `step_configured` was appended: the response's date when the provider names none.
    opened_at: chrono::DateTime<chrono::Utc>,
    active_tools: Option<Vec<String>>,
    /// The conversation as the model sees it for this step.
    messages: Vec<ModelMessage>,
    /// The call's start on the process's monotonic clock.
    started: std::time::Instant,
}

/// What `before_step` left for the request, over the turn's config.
struct StepRequest<'a> {
    system: Option<SystemPrompt>,
    messages: Vec<ModelMessage>,
    provider_options: Option<serde_json::Value>,
    active_tools: &'a Option<Vec<String>>,
    tool_choice: mull_core::ToolChoice,
}

/// Builds the step's model request; also hands back the system prompt as `step_configured`
/// records it, and the conversation. `Err` names a malformed `StepConfig::system`.
fn step_request(
    resolved: &ResolvedTurn,
    step: StepRequest<'_>,
) -> Result<(ModelRequest, Option<String>, Vec<ModelMessage>), String> {
    let StepRequest {
        system,
        messages,
        provider_options,
        active_tools,
        tool_choice,
    } = step;
    let (system, system_messages) = match system {
        None => (resolved.system.clone(), Vec::new()),
        Some(SystemPrompt::Text(text)) => (text, Vec::new()),
        Some(SystemPrompt::Messages(list)) => {
            if let Some(other) = list.iter().find(|m| m.role != ModelRole::System) {
                let message = format!(
                    "before_step's StepConfig::system holds a {:?} message; only system messages belong there (put others in StepConfig::messages)",
                    other.role
                );
                return Err(message);
            }
            (String::new(), list)
        }
    };
    let mut settings = resolved.settings.clone();
    if provider_options.is_some() {
        settings.provider_options = provider_options;
    }
    let sent: Vec<ModelMessage> = if system_messages.is_empty() {
        messages.clone()
    } else {
        system_messages
            .iter()
            .cloned()
            .chain(messages.iter().cloned())
            .collect()
    };
    let recorded_system = if system_messages.is_empty() {
        (!system.is_empty()).then(|| system.clone())
    } else {
        Some(SystemPrompt::Messages(system_messages).text())
    };
    let request = ModelRequest {
        system: (!system.is_empty()).then_some(system),
        messages: sent,
        tools: resolved.tools.specs(active_tools.as_deref()),
        tool_choice,
        settings,
        output_schema: resolved.output.clone(),
    };
    Ok((request, recorded_system, messages))
}
