//! One turn, in the seed's order, for every entry path:
//!
//! ```text
//! (queue) → user_messages_saved → transcript repair → turn_started (flushed) → assemble context
//!   → before_turn → turn_configured
//!   → per step: step_started → before_step → step_configured → model call (retries)
//!       → each part: chunk event → client → on_chunk
//!       → each tool call: validate → before_tool_call → tool_decided (flushed) → execute /
//!         block / substitute → tool_call_finished → after_tool_call → tool-result chunk
//!     → step_finished → on_step_finish → stop conditions → (barrier before the next step)
//!   → assistant_message_saved → turn_finished (flushed) → [turn_failed → on_chat_error]
//! (lock released to on_chat_response) → on_chat_response → (next queued turn)
//! ```
//!
//! Every fact is appended through the session's recorder, which keeps the projection current;
//! the turn reads the draft message and the conversation from that projection.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use mull_core::{
    to_model_messages, truncate_for_context, ChatErrorClassification, CompactionReason,
    DecisionAction, EntryPath, ErrorStage, Event, FinishReason, HookName, LanguageModel,
    ModelError, ModelErrorRecord, ModelMessage, ModelRequest, ModelStream, RequestSummary, Role,
    Source, StepRecord, StreamPart, ToolCallRecord, ToolPartState, ToolResultRecord, ToolSpec,
    TurnStatus, UIMessage, UIPart, Usage,
};
use mull_store::TurnSummary;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{ModelChoice, ResolvedTurn, StepConfig, TurnDefaults};
use crate::context::{
    ChatErrorContext, ChatResponseResult, ChunkContext, PrepareStepContext, StepContext,
    ToolCallContext, ToolCallDecision, ToolCallResultContext, TurnContext,
};
use crate::error::{ChatError, EngineError, HookResult};
use crate::extension;
use crate::session::{Inner, OutcomeStatus, Session, TurnOutcome, TurnScope, TURN_SCOPE};
use crate::tool::{validate_input, ToolEntry, ToolExecution, ToolOutput, ToolSet};
use crate::transform::apply_all;

/// The text a repaired tool call shows.
pub const INTERRUPTED_TOOL_CALL: &str =
    "The tool call was interrupted before a result was recorded.";

/// Longest text or tool output (in bytes) kept whole in older messages given to the model.
pub const CONTEXT_TRUNCATE_CHARS: usize = 8_000;

/// How many of the last messages are never truncated.
pub const CONTEXT_KEEP_LAST: usize = 4;

/// Everything an entry path hands to the loop.
pub(crate) struct TurnSpec {
    pub entry: EntryPath,
    pub request_id: String,
    pub continuation: bool,
    pub body: Value,
    /// Messages to persist before the turn (none for continuations).
    pub messages: Vec<UIMessage>,
    pub signal: CancellationToken,
    /// Where a `chat` call reads its parts.
    pub client: Option<mpsc::UnboundedSender<StreamPart>>,
    pub submission_id: Option<String>,
    pub client_tools: Vec<ToolSpec>,
    pub caller_tools: ToolSet,
}

/// Runs an entry path's turn under the turn lock (or inline, inside `on_chat_response`).
pub(crate) async fn run_entry(
    inner: &Arc<Inner>,
    spec: TurnSpec,
    inline: bool,
) -> Result<TurnOutcome, EngineError> {
    let guard = if inline {
        None
    } else {
        Some(inner.queue.lock().await)
    };
    let result = run_locked(inner, &spec).await;
    inner.forget_request(&spec.request_id);
    drop(guard);
    result
}

/// How a turn ended, and what `on_chat_response` gets (None when it is not called).
struct Ended {
    outcome: TurnOutcome,
    response: Option<ChatResponseResult>,
}

async fn run_locked(inner: &Arc<Inner>, spec: &TurnSpec) -> Result<TurnOutcome, EngineError> {
    let scope = TurnScope {
        session_id: inner.session_id.clone(),
        request_id: spec.request_id.clone(),
        responding: false,
    };
    let ended = TURN_SCOPE
        .scope(scope.clone(), run_attempts(inner, spec))
        .await?;
    inner.forget_request(&spec.request_id);
    if let Some(response) = ended.response {
        let responding = TurnScope {
            responding: true,
            ..scope
        };
        TURN_SCOPE
            .scope(responding, async {
                observe(
                    inner,
                    None,
                    HookName::OnChatResponse,
                    inner.agent.on_chat_response(&response),
                )
                .await
            })
            .await?;
    }
    Ok(ended.outcome)
}

async fn run_attempts(inner: &Arc<Inner>, spec: &TurnSpec) -> Result<Ended, EngineError> {
    if let Some(ended) = persist_messages(inner, spec).await? {
        return Ok(ended);
    }
    let mut attempt = 0;
    loop {
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = %format!("invoke_agent {}", inner.agent.name()),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = %inner.agent.name(),
            gen_ai.conversation.id = %inner.session_id,
            mull.request_id = %spec.request_id,
            mull.attempt = attempt,
        );
        match run_attempt(inner, spec, attempt).instrument(span).await? {
            Attempt::Retry => attempt += 1,
            Attempt::Done(ended) => return Ok(*ended),
        }
    }
}

/// Appends the incoming messages (and, for a submission, marks it applied). A failure here is
/// stage `persist`.
async fn persist_messages(
    inner: &Arc<Inner>,
    spec: &TurnSpec,
) -> Result<Option<Ended>, EngineError> {
    if spec.messages.is_empty() {
        return Ok(None);
    }
    let problem = spec.messages.iter().enumerate().find_map(|(i, m)| {
        m.id.trim()
            .is_empty()
            .then(|| format!("message {i} has an empty id; messages are stored by id"))
    });
    let stored = match problem {
        Some(problem) => Err(problem),
        None => persist_events(inner, spec).map_err(|e| e.to_string()),
    };
    match stored {
        Ok(()) => Ok(None),
        Err(message) => {
            let error = ChatError {
                request_id: Some(spec.request_id.clone()),
                ..ChatError::new(
                    ErrorStage::Persist,
                    format!("saving the user's messages failed: {message}"),
                )
            };
            let shown = fail(inner, None, error, false).await;
            Ok(Some(Ended {
                outcome: outcome(spec, OutcomeStatus::Error, Some(shown), None),
                response: None,
            }))
        }
    }
}

fn persist_events(inner: &Arc<Inner>, spec: &TurnSpec) -> Result<(), EngineError> {
    inner.recorder.append(
        None,
        Event::UserMessagesSaved {
            request_id: Some(spec.request_id.clone()),
            messages: spec.messages.clone(),
        },
    )?;
    if let Some(submission_id) = &spec.submission_id {
        inner.recorder.append(
            None,
            Event::SubmissionApplied {
                submission_id: submission_id.clone(),
                request_id: spec.request_id.clone(),
            },
        )?;
    }
    // The turn's start is the barrier that makes these durable, before any model call.
    Ok(())
}

fn outcome(
    spec: &TurnSpec,
    status: OutcomeStatus,
    error: Option<ChatError>,
    message: Option<UIMessage>,
) -> TurnOutcome {
    TurnOutcome {
        request_id: spec.request_id.clone(),
        status,
        error,
        message,
    }
}

enum Attempt {
    /// Overflow recovery compacted the history: run the turn again.
    Retry,
    Done(Box<Ended>),
}

async fn run_attempt(
    inner: &Arc<Inner>,
    spec: &TurnSpec,
    attempt: u32,
) -> Result<Attempt, EngineError> {
    if attempt == 0 {
        if let Err(error) = repair_transcript(inner, spec).await? {
            let shown = fail(inner, None, error, true).await;
            return Ok(Attempt::Done(Box::new(Ended {
                outcome: outcome(spec, OutcomeStatus::Error, Some(shown), None),
                response: None,
            })));
        }
    }
    let turn_id = inner.options.ids.next_id("turn");
    let message_id = inner.options.ids.next_id("msg");
    inner.recorder.append(
        Some(&turn_id),
        Event::TurnStarted {
            request_id: spec.request_id.clone(),
            message_id: message_id.clone(),
            entry: spec.entry,
            continuation: spec.continuation,
            attempt,
            body: spec.body.clone(),
        },
    )?;
    inner.recorder.flush().await?;
    let mut run = TurnRun {
        inner,
        spec,
        turn_id,
        message_id,
        steps: Vec::new(),
        usage: Usage::default(),
        tool_context: Value::Null,
    };
    if spec.signal.is_cancelled() {
        return run
            .finish(TurnStatus::Aborted, None)
            .await
            .map(|e| Attempt::Done(Box::new(e)));
    }
    let resolved = match run.configure().await? {
        Ok(resolved) => resolved,
        Err(error) => {
            return run
                .fail_setup(error)
                .await
                .map(|e| Attempt::Done(Box::new(e)))
        }
    };
    let ended = match resolved.total_timeout {
        Some(limit) => match tokio::time::timeout(limit, run.run_steps(&resolved)).await {
            Ok(ended) => ended?,
            Err(_) => StepsEnd::Failed(ChatError::new(
                ErrorStage::Stream,
                format!("the turn timed out after {} ms", limit.as_millis()),
            )),
        },
        None => run.run_steps(&resolved).await?,
    };
    match ended {
        StepsEnd::Completed => run
            .finish(TurnStatus::Completed, None)
            .await
            .map(|e| Attempt::Done(Box::new(e))),
        StepsEnd::Aborted => run
            .finish(TurnStatus::Aborted, None)
            .await
            .map(|e| Attempt::Done(Box::new(e))),
        StepsEnd::Failed(error) => run.stream_failed(error, attempt).await,
    }
}

/// Closes tool calls an interrupted turn left without a result, as `tool_call_repaired`
/// events. A history that cannot be repaired (a call id used twice) fails at stage
/// `transcript`.
async fn repair_transcript(
    inner: &Arc<Inner>,
    spec: &TurnSpec,
) -> Result<Result<(), ChatError>, EngineError> {
    let (repairs, duplicate) = inner.recorder.read(|s| {
        let mut seen: Vec<(&str, &str)> = Vec::new();
        let mut duplicate = None;
        let mut repairs = Vec::new();
        for message in &s.messages {
            for part in &message.parts {
                let UIPart::Tool(tool) = part else { continue };
                if let Some((_, first)) = seen.iter().find(|(id, _)| *id == tool.call_id) {
                    duplicate.get_or_insert((
                        tool.call_id.clone(),
                        first.to_string(),
                        message.id.clone(),
                    ));
                }
                seen.push((&tool.call_id, &message.id));
                let open = matches!(
                    tool.state,
                    ToolPartState::InputStreaming | ToolPartState::InputAvailable
                );
                let awaited = s
                    .pending_client_calls
                    .iter()
                    .any(|p| p.call_id == tool.call_id);
                if message.role == Role::Assistant && open && !awaited {
                    repairs.push((
                        message.id.clone(),
                        tool.call_id.clone(),
                        tool.tool_name.clone(),
                    ));
                }
            }
        }
        (repairs, duplicate)
    });
    if let Some((call_id, first, second)) = duplicate {
        return Ok(Err(ChatError {
            request_id: Some(spec.request_id.clone()),
            ..ChatError::new(
                ErrorStage::Transcript,
                format!(
                    "the history cannot be repaired: tool call id {call_id:?} appears in message \
                     {first:?} and again in message {second:?}"
                ),
            )
        }));
    }
    for (message_id, call_id, tool) in repairs {
        inner.recorder.append(
            None,
            Event::ToolCallRepaired {
                message_id,
                call_id,
                tool,
                error_text: INTERRUPTED_TOOL_CALL.to_owned(),
            },
        )?;
    }
    Ok(Ok(()))
}

/// Records a failure: `turn_failed` (flushed, and published on the failures channel), then
/// `on_chat_error`, whose answer is returned. Storage errors here are logged, not raised: the
/// caller is already reporting a failure.
pub(crate) async fn fail(
    inner: &Arc<Inner>,
    turn_id: Option<&str>,
    error: ChatError,
    messages_persisted: bool,
) -> ChatError {
    let appended = inner.recorder.append(
        turn_id,
        Event::TurnFailed {
            request_id: error.request_id.clone(),
            stage: error.stage,
            messages_persisted,
            classification: error.classification,
            error: error.message.clone(),
            model_error: error.model_error.as_ref().map(ModelErrorRecord::from),
        },
    );
    match appended {
        Ok(appended) => {
            if let Err(e) = inner.recorder.flush().await {
                tracing::warn!(error = %e, "turn_failed could not be flushed");
            }
            Session::publish_failure(inner, inner.recorder.envelope(turn_id, appended));
        }
        Err(e) => tracing::warn!(error = %e, "turn_failed could not be recorded"),
    }
    let ctx = ChatErrorContext {
        request_id: error.request_id.clone(),
        stage: error.stage,
        messages_persisted,
        classification: error.classification,
    };
    let agent = Arc::clone(&inner.agent);
    let original = error.clone();
    match std::panic::catch_unwind(AssertUnwindSafe(|| agent.on_chat_error(error, &ctx))) {
        Ok(shown) => shown,
        Err(panic) => {
            record_hook_failure(
                inner,
                turn_id,
                HookName::OnChatError,
                panic_text(&panic),
                true,
                false,
            );
            original
        }
    }
}

/// Finishes a turn an earlier process left running: its partial message is kept and it ends
/// as an error at stage `recovery`.
pub(crate) async fn finish_interrupted(
    inner: &Arc<Inner>,
    turn: &TurnSummary,
) -> Result<(), EngineError> {
    let turn_id = turn.turn_id.as_deref();
    let draft = inner.recorder.read(|s| {
        s.draft
            .clone()
            .filter(|d| d.id == turn.message_id)
            .map(closed)
    });
    let has_content = |m: &UIMessage| m.parts.iter().any(|p| !matches!(p, UIPart::StepStart));
    if let Some(message) = draft.filter(has_content) {
        inner.recorder.append(
            turn_id,
            Event::AssistantMessageSaved {
                request_id: turn.request_id.clone(),
                message,
            },
        )?;
    }
    let message = "the turn was interrupted (the process stopped) before it finished";
    inner.recorder.append(
        turn_id,
        Event::TurnFinished {
            request_id: turn.request_id.clone(),
            status: TurnStatus::Error,
            error: Some(message.to_owned()),
            steps: turn.steps,
            usage: turn.usage.clone(),
        },
    )?;
    let error = ChatError {
        request_id: Some(turn.request_id.clone()),
        ..ChatError::new(ErrorStage::Recovery, message)
    };
    fail(inner, turn_id, error, true).await;
    Ok(())
}

/// The draft with every text and reasoning block closed, as it is persisted.
fn closed(mut message: UIMessage) -> UIMessage {
    for part in &mut message.parts {
        match part {
            UIPart::Text { streaming, .. } | UIPart::Reasoning { streaming, .. } => {
                *streaming = false
            }
            _ => {}
        }
    }
    message
}

fn panic_text(panic: &Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a hook panicked with a non-text payload".to_owned()
    }
}

fn record_hook_failure(
    inner: &Arc<Inner>,
    turn_id: Option<&str>,
    hook: HookName,
    error: String,
    panicked: bool,
    timed_out: bool,
) {
    if let Err(e) = inner.recorder.append(
        turn_id,
        Event::HookFailed {
            hook,
            source: "agent".to_owned(),
            error,
            panicked,
            timed_out,
        },
    ) {
        tracing::warn!(error = %e, "hook_failed could not be recorded");
    }
}

/// Runs a hook future, turning an error, a panic or outliving [`Agent::hook_timeout`] into a
/// `hook_failed` event. `Ok(Err(text))` means the hook failed and the caller applies that hook's
/// failure rule.
///
/// [`Agent::hook_timeout`]: crate::Agent::hook_timeout
async fn guard_hook<T>(
    inner: &Arc<Inner>,
    turn_id: Option<&str>,
    hook: HookName,
    fut: impl Future<Output = HookResult<T>>,
) -> Result<Result<T, String>, EngineError> {
    let guarded = AssertUnwindSafe(fut).catch_unwind();
    let outcome = match inner.agent.hook_timeout() {
        None => guarded.await,
        Some(limit) => match tokio::time::timeout(limit, guarded).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let text = format!("timed out after {} ms", limit.as_millis());
                record_hook_failure(inner, turn_id, hook, text.clone(), false, true);
                return Ok(Err(text));
            }
        },
    };
    match outcome {
        Ok(Ok(value)) => Ok(Ok(value)),
        Ok(Err(error)) => {
            let text = error.to_string();
            record_hook_failure(inner, turn_id, hook, text.clone(), false, false);
            Ok(Err(text))
        }
        Err(panic) => {
            let text = format!("panicked: {}", panic_text(&panic));
            record_hook_failure(inner, turn_id, hook, text.clone(), true, false);
            Ok(Err(text))
        }
    }
}

/// Runs an observer hook: a failure is logged as `hook_failed` and the turn goes on.
async fn observe(
    inner: &Arc<Inner>,
    turn_id: Option<&str>,
    hook: HookName,
    fut: impl Future<Output = HookResult<()>>,
) -> Result<(), EngineError> {
    guard_hook(inner, turn_id, hook, fut).await.map(|_| ())
}

enum StepsEnd {
    Completed,
    Aborted,
    Failed(ChatError),
}

enum StepEnd {
    Continue,
    Stop,
    Aborted,
    Failed(ChatError),
}

/// What a step accumulates from the parts it shows, for its record.
#[derive(Default)]
struct StepParts {
    text: String,
    reasoning: Vec<(String, String)>,
    sources: Vec<Source>,
    files: Vec<(String, String)>,
    tool_calls: Vec<ToolCallRecord>,
    tool_results: Vec<ToolResultRecord>,
    finish_reason: Option<FinishReason>,
    raw_finish_reason: Option<String>,
    usage: Usage,
    provider_metadata: Option<Value>,
    waits_for_client: bool,
}

impl StepParts {
    fn observe(&mut self, part: &StreamPart) {
        match part {
            StreamPart::TextDelta { text, .. } => self.text.push_str(text),
            StreamPart::ReasoningStart { id } => self.reasoning.push((id.clone(), String::new())),
            StreamPart::ReasoningDelta { id, text } => {
                match self.reasoning.iter_mut().rev().find(|(b, _)| b == id) {
                    Some((_, t)) => t.push_str(text),
                    None => self.reasoning.push((id.clone(), text.clone())),
                }
            }
            StreamPart::Source { source } => self.sources.push(source.clone()),
            StreamPart::File { media_type, data } => {
                self.files.push((media_type.clone(), data.clone()))
            }
            StreamPart::Finish {
                finish_reason,
                raw_finish_reason,
                usage,
                provider_metadata,
            } => {
                self.finish_reason = Some(*finish_reason);
                self.raw_finish_reason = raw_finish_reason.clone();
                self.usage = usage.clone();
                self.provider_metadata = provider_metadata.clone();
            }
            _ => {}
        }
    }
}

/// What a tool call did to the step.
enum ToolEnd {
    Done,
    Aborted,
}

/// The state of one turn attempt.
struct TurnRun<'a> {
    inner: &'a Arc<Inner>,
    spec: &'a TurnSpec,
    turn_id: String,
    message_id: String,
    steps: Vec<StepRecord>,
    usage: Usage,
    tool_context: Value,
}

impl TurnRun<'_> {
    fn tid(&self) -> Option<&str> {
        Some(&self.turn_id)
    }

    fn append(&self, event: Event) -> Result<(), EngineError> {
        self.inner.recorder.append(self.tid(), event).map(|_| ())
    }

    fn error(&self, stage: ErrorStage, message: impl Into<String>) -> ChatError {
        ChatError {
            request_id: Some(self.spec.request_id.clone()),
            ..ChatError::new(stage, message)
        }
    }

    /// Assembles the context, runs `before_turn`, merges its config and records it.
    async fn configure(&mut self) -> Result<Result<ResolvedTurn, ChatError>, EngineError> {
        let inner = self.inner;
        let agent = &inner.agent;
        let mut tools = agent.tools();
        tools.merge(&crate::session_config::session_tools(inner));
        for spec in &self.spec.client_tools {
            tools.insert(ToolEntry::Client(spec.clone()));
        }
        tools.merge(&self.spec.caller_tools);
        crate::compaction::compact_if_over_threshold(inner, self.tid()).await?;
        let mut messages = inner.recorder.read(|s| to_model_messages(&s.messages));
        truncate_for_context(&mut messages, CONTEXT_TRUNCATE_CHARS, CONTEXT_KEEP_LAST);
        if messages.is_empty() {
            return Ok(Err(self.error(
                ErrorStage::Turn,
                "the conversation is empty: there is nothing to send to the model",
            )));
        }
        let refresh = !inner.config.cached_prompt;
        let system =
            match crate::context_blocks::build_system_prompt(inner, self.tid(), refresh).await? {
                Some(system) => system,
                None => agent.system_prompt(),
            };
        let defaults = TurnDefaults {
            model: agent.model(),
            system,
            messages,
            tools,
            max_steps: agent.max_steps(),
            send_reasoning: agent.send_reasoning(),
            max_retries: agent.max_retries(),
            stall_timeout_ms: agent.chat_stream_stall_timeout_ms(),
        };
        let ctx = TurnContext {
            system: defaults.system.clone(),
            messages: defaults.messages.clone(),
            tools: defaults.tools.clone(),
            model: Arc::clone(&defaults.model),
            continuation: self.spec.continuation,
            body: self.spec.body.clone(),
            request_id: self.spec.request_id.clone(),
            entry: self.spec.entry,
        };
        let config = match guard_hook(
            inner,
            self.tid(),
            HookName::BeforeTurn,
            agent.before_turn(&ctx),
        )
        .await?
        {
            Ok(config) => config.unwrap_or_default(),
            Err(text) => {
                return Ok(Err(
                    self.error(ErrorStage::Turn, format!("before_turn failed: {text}"))
                ))
            }
        };
        let model = match resolve_model(inner, config.model.as_ref()) {
            Ok(model) => model,
            Err(message) => return Ok(Err(self.error(ErrorStage::Turn, message))),
        };
        let resolved = ResolvedTurn::merge(defaults, config, model);
        let resolved = extension::before_turn(inner, self.tid(), &ctx, resolved).await?;
        if resolved.messages.is_empty() {
            return Ok(Err(self.error(
                ErrorStage::Turn,
                "before_turn left no messages to send to the model",
            )));
        }
        self.append(Event::TurnConfigured {
            config: Box::new(resolved.record()),
        })?;
        Ok(Ok(resolved))
    }

    async fn fail_setup(&mut self, error: ChatError) -> Result<Ended, EngineError> {
        self.append(Event::TurnFinished {
            request_id: self.spec.request_id.clone(),
            status: TurnStatus::Error,
            error: Some(error.message.clone()),
            steps: 0,
            usage: Usage::default(),
        })?;
        self.inner.recorder.flush().await?;
        let shown = fail(self.inner, self.tid(), error, true).await;
        Ok(Ended {
            outcome: outcome(self.spec, OutcomeStatus::Error, Some(shown), None),
            response: None,
        })
    }

    /// Persists the assistant message (when it has parts), ends the turn, and reports a
    /// failure when there was one.
    async fn finish(
        &mut self,
        status: TurnStatus,
        error: Option<ChatError>,
    ) -> Result<Ended, EngineError> {
        let draft = self.inner.recorder.read(|s| {
            s.draft
                .clone()
                .filter(|d| d.id == self.message_id)
                .map(closed)
        });
        let mut message = draft.unwrap_or_else(|| UIMessage {
            id: self.message_id.clone(),
            role: Role::Assistant,
            metadata: None,
            parts: Vec::new(),
        });
        // Step boundaries alone are not content: an empty stream persists nothing.
        if message.parts.iter().all(|p| matches!(p, UIPart::StepStart)) {
            message.parts.clear();
        }
        let persisted = !message.parts.is_empty();
        if persisted {
            self.append(Event::AssistantMessageSaved {
                request_id: self.spec.request_id.clone(),
                message: message.clone(),
            })?;
        }
        self.append(Event::TurnFinished {
            request_id: self.spec.request_id.clone(),
            status,
            error: error.as_ref().map(|e| e.message.clone()),
            steps: u32::try_from(self.steps.len()).unwrap_or(u32::MAX),
            usage: self.usage.clone(),
        })?;
        self.inner.recorder.flush().await?;
        let original_error = error.as_ref().map(|e| e.message.clone());
        let shown = match error {
            Some(error) => Some(fail(self.inner, self.tid(), error, true).await),
            None => None,
        };
        let response = ChatResponseResult {
            message: message.clone(),
            request_id: self.spec.request_id.clone(),
            continuation: self.spec.continuation,
            status,
            error: original_error,
        };
        Ok(Ended {
            outcome: outcome(
                self.spec,
                status.into(),
                shown,
                persisted.then_some(message),
            ),
            response: Some(response),
        })
    }

    /// A stream-stage failure: overflow recovery when it applies, else the usual ending.
    async fn stream_failed(
        &mut self,
        error: ChatError,
        attempt: u32,
    ) -> Result<Attempt, EngineError> {
        let overflow = self.inner.config.overflow();
        if !overflow.reactive {
            return self
                .finish(TurnStatus::Error, Some(error))
                .await
                .map(|e| Attempt::Done(Box::new(e)));
        }
        let ctx = ChatErrorContext {
            request_id: Some(self.spec.request_id.clone()),
            stage: ErrorStage::Stream,
            messages_persisted: true,
            classification: None,
        };
        let agent = Arc::clone(&self.inner.agent);
        let classification = match std::panic::catch_unwind(AssertUnwindSafe(|| {
            agent.classify_chat_error(&error, &ctx)
        })) {
            Ok(c) => c,
            Err(panic) => {
                record_hook_failure(
                    self.inner,
                    self.tid(),
                    HookName::ClassifyChatError,
                    panic_text(&panic),
                    true,
                    false,
                );
                None
            }
        };
        if classification != Some(ChatErrorClassification::ContextOverflow) {
            return self
                .finish(TurnStatus::Error, Some(error))
                .await
                .map(|e| Attempt::Done(Box::new(e)));
        }
        // The partial of an overflowed attempt is discarded: the retry starts afresh.
        self.append(Event::TurnFinished {
            request_id: self.spec.request_id.clone(),
            status: TurnStatus::Error,
            error: Some(error.message.clone()),
            steps: u32::try_from(self.steps.len()).unwrap_or(u32::MAX),
            usage: self.usage.clone(),
        })?;
        self.inner.recorder.flush().await?;
        if !self.spec.signal.is_cancelled()
            && attempt < overflow.max_retries
            && self.compact(attempt + 1).await?
        {
            return Ok(Attempt::Retry);
        }
        let error = ChatError {
            classification: Some(ChatErrorClassification::ContextOverflow),
            ..error
        };
        let shown = fail(self.inner, self.tid(), error, true).await;
        Ok(Attempt::Done(Box::new(Ended {
            outcome: outcome(self.spec, OutcomeStatus::Error, Some(shown), None),
            response: None,
        })))
    }

    /// Runs the compaction callback; returns whether the history got shorter.
    async fn compact(&mut self, attempt: u32) -> Result<bool, EngineError> {
        crate::compaction::apply(self.inner, self.tid(), CompactionReason::Reactive, attempt).await
    }

    async fn run_steps(&mut self, resolved: &ResolvedTurn) -> Result<StepsEnd, EngineError> {
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
                gen_ai.operation.name = "chat",
                gen_ai.provider.name = tracing::field::Empty,
                gen_ai.request.model = tracing::field::Empty,
                gen_ai.conversation.id = %self.inner.session_id,
                gen_ai.response.finish_reasons = tracing::field::Empty,
                gen_ai.usage.input_tokens = tracing::field::Empty,
                gen_ai.usage.output_tokens = tracing::field::Empty,
                gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
                mull.step = step,
            );
            match self
                .run_step(&resolved, step, &span)
                .instrument(span.clone())
                .await?
            {
                StepEnd::Continue => {
                    // The finished step is durable before the model is called again.
                    self.inner.recorder.flush().await?;
                    step += 1;
                    let last = self.steps.last();
                    let tid = Some(self.turn_id.as_str());
                    let guarded = crate::compaction::proactive(
                        self.inner,
                        tid,
                        last,
                        &mut compactions,
                        overridden,
                    )
                    .await?;
                    if let Some(messages) = guarded {
                        resolved.to_mut().messages = messages;
                    }
                }
                StepEnd::Stop => return Ok(StepsEnd::Completed),
                StepEnd::Aborted => return Ok(StepsEnd::Aborted),
                StepEnd::Failed(error) => return Ok(StepsEnd::Failed(error)),
            }
        }
    }

    async fn run_step(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        span: &tracing::Span,
    ) -> Result<StepEnd, EngineError> {
        if self.spec.signal.is_cancelled() {
            return Ok(StepEnd::Aborted);
        }
        self.append(Event::StepStarted { step })?;
        let mut messages = resolved.messages.clone();
        let so_far = self.inner.recorder.read(|s| {
            s.draft
                .as_ref()
                .filter(|d| d.id == self.message_id)
                .map(|d| to_model_messages(std::slice::from_ref(d)))
                .unwrap_or_default()
        });
        messages.extend(so_far);
        let prepare = PrepareStepContext {
            steps: self.steps.clone(),
            step_number: step,
            model: Arc::clone(&resolved.model),
            messages: messages.clone(),
            context: self.tool_context.clone(),
        };
        let config = match guard_hook(
            self.inner,
            self.tid(),
            HookName::BeforeStep,
            self.inner.agent.before_step(&prepare),
        )
        .await?
        {
            Ok(config) => config.unwrap_or_default(),
            Err(text) => {
                return Ok(StepEnd::Failed(
                    self.error(ErrorStage::Stream, format!("before_step failed: {text}")),
                ))
            }
        };
        let step_model = match resolve_model(self.inner, config.model.as_ref()) {
            Ok(model) => model.unwrap_or_else(|| Arc::clone(&resolved.model)),
            Err(message) => return Ok(StepEnd::Failed(self.error(ErrorStage::Stream, message))),
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
        let system = system.unwrap_or_else(|| resolved.system.clone());
        let messages = step_messages.unwrap_or(messages);
        let mut settings = resolved.settings.clone();
        if provider_options.is_some() {
            settings.provider_options = provider_options;
        }
        let request = ModelRequest {
            system: (!system.is_empty()).then_some(system),
            messages: messages.clone(),
            tools: resolved.tools.specs(active_tools.as_deref()),
            tool_choice,
            settings,
            output_schema: resolved.output.clone(),
        };
        // Summarised (and hashed) before the call starts: a step cut short is identified too.
        let summary = RequestSummary::of(&request);
        self.append(Event::StepConfigured {
            step,
            model_id: step_model.model_id().to_owned(),
            active_tools: active_tools.clone(),
            tool_choice: request.tool_choice.clone(),
            system: request.system.clone(),
            message_count: u32::try_from(messages.len()).unwrap_or(u32::MAX),
            overrides,
            request_hash: Some(summary.hash.clone()),
        })?;
        span.record(
            "otel.name",
            tracing::field::display(format!("chat {}", step_model.model_id())),
        );
        span.record("gen_ai.provider.name", step_model.provider());
        span.record("gen_ai.request.model", step_model.model_id());

        let mut stream = match self
            .open_stream(resolved, step, &step_model, &request)
            .await?
        {
            Ok(stream) => stream,
            Err(end) => return Ok(end),
        };
        let mut parts = StepParts::default();
        let stall = Duration::from_millis(resolved.stall_timeout_ms);
        loop {
            let next = tokio::select! {
                biased;
                _ = self.spec.signal.cancelled() => return Ok(StepEnd::Aborted),
                next = next_part(&mut stream, stall) => next,
            };
            let part = match next {
                Next::End => break,
                Next::Stalled => {
                    return Ok(StepEnd::Failed(self.error(
                        ErrorStage::Stream,
                        format!(
                            "the model stream stalled: no part for {} ms",
                            resolved.stall_timeout_ms
                        ),
                    )))
                }
                Next::Failed(e) => {
                    return Ok(StepEnd::Failed(ChatError {
                        model_error: Some(e.clone()),
                        ..self.error(ErrorStage::Stream, e.message)
                    }))
                }
                Next::Part(part) => part,
            };
            match &part {
                StreamPart::Error { message } => {
                    let message = message.clone();
                    self.emit(resolved, step, part, &mut parts).await?;
                    return Ok(StepEnd::Failed(self.error(ErrorStage::Stream, message)));
                }
                StreamPart::ToolCall {
                    call_id,
                    tool_name,
                    input,
                } => {
                    let (call_id, tool_name, input) =
                        (call_id.clone(), tool_name.clone(), input.clone());
                    self.emit(resolved, step, part, &mut parts).await?;
                    let call = PendingCall {
                        step,
                        call_id,
                        tool_name,
                        input_text: input,
                        active: active_tools.as_deref(),
                        messages: &messages,
                    };
                    if let ToolEnd::Aborted = self.tool_call(resolved, call, &mut parts).await? {
                        return Ok(StepEnd::Aborted);
                    }
                }
                _ => self.emit(resolved, step, part, &mut parts).await?,
            }
        }

        let record = StepRecord {
            step,
            model_id: step_model.model_id().to_owned(),
            text: parts.text.clone(),
            reasoning_text: (!parts.reasoning.is_empty()).then(|| {
                parts
                    .reasoning
                    .iter()
                    .map(|(_, t)| t.as_str())
                    .collect::<String>()
            }),
            sources: parts.sources.clone(),
            files: parts.files.clone(),
            tool_calls: parts.tool_calls.clone(),
            tool_results: parts.tool_results.clone(),
            finish_reason: parts.finish_reason.unwrap_or_default(),
            raw_finish_reason: parts.raw_finish_reason.clone(),
            usage: parts.usage.clone(),
            warnings: Vec::new(),
            request: summary.to_value(),
            response: json!({
                "provider": step_model.provider(),
                "model_id": step_model.model_id(),
            }),
            provider_metadata: parts.provider_metadata.clone(),
        };
        span.record(
            "gen_ai.response.finish_reasons",
            record.finish_reason.as_str(),
        );
        if let Some(n) = record.usage.input_tokens {
            span.record("gen_ai.usage.input_tokens", n);
        }
        if let Some(n) = record.usage.output_tokens {
            span.record("gen_ai.usage.output_tokens", n);
        }
        if let Some(n) = record.usage.cached_input_tokens {
            span.record("gen_ai.usage.cache_read.input_tokens", n);
        }
        // Not a barrier of its own: the step becomes durable before the next step starts, or
        // with the turn's end.
        // The log hands the event back: its record is reused, not copied before the append.
        let appended = self.inner.recorder.append(
            self.tid(),
            Event::StepFinished {
                record: Box::new(record),
            },
        )?;
        let Event::StepFinished { record } = appended.event else {
            unreachable!("the log returns the step_finished event it was given")
        };
        self.usage.add(&record.usage);
        let response_messages = self.inner.recorder.read(|s| {
            s.draft
                .as_ref()
                .filter(|d| d.id == self.message_id)
                .map(last_step_messages)
                .unwrap_or_default()
        });
        let ctx = StepContext {
            step_number: step,
            reasoning: parts.reasoning.iter().map(|(_, t)| t.clone()).collect(),
            record: *record,
            response_messages,
        };
        let observed = match observe(
            self.inner,
            self.tid(),
            HookName::OnStepFinish,
            self.inner.agent.on_step_finish(&ctx),
        )
        .await
        {
            Ok(()) => extension::on_step_finish(self.inner, self.tid(), &ctx).await,
            Err(e) => Err(e),
        };
        let last_step = parts.waits_for_client || ctx.record.tool_calls.is_empty();
        // The hooks have seen the record; the turn keeps it (not a copy) for its result.
        self.steps.push(ctx.record);
        observed?;
        if last_step {
            return Ok(StepEnd::Stop);
        }
        if resolved.stop_when.iter().any(|c| c.matches(&self.steps)) {
            return Ok(StepEnd::Stop);
        }
        Ok(StepEnd::Continue)
    }

    /// Starts the model call, retrying retryable errors (each retry a `model_retried` event).
    async fn open_stream(
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
                    let delay = e.retry_after.unwrap_or_else(|| {
                        self.inner.options.retry_base_delay * 2u32.saturating_pow(retries)
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
    async fn emit(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        part: StreamPart,
        parts: &mut StepParts,
    ) -> Result<(), EngineError> {
        let (shown, original) = apply_all(&resolved.transforms, part);
        let appended = self.inner.recorder.append(
            self.tid(),
            Event::Chunk {
                step,
                part: shown,
                original: original.map(Box::new),
            },
        )?;
        // The log hands the event back: its part is reused, not copied before the append.
        let Event::Chunk { part: shown, .. } = appended.event else {
            unreachable!("the log returns the chunk event it was given")
        };
        parts.observe(&shown);
        if let Some(client) = &self.spec.client {
            if resolved.send_reasoning || !shown.is_reasoning() {
                // A client that went away stops listening; the turn goes on and is logged.
                let _ = client.send(shown.clone());
            }
        }
        let ctx = ChunkContext {
            chunk: shown,
            step_number: step,
            request_id: self.spec.request_id.clone(),
        };
        observe(
            self.inner,
            self.tid(),
            HookName::OnChunk,
            self.inner.agent.on_chunk(&ctx),
        )
        .await?;
        extension::on_chunk(self.inner, self.tid(), &ctx).await?;
        Ok(())
    }

    /// Handles one tool call: validate, decide, record the decision (flushed), execute or
    /// skip, record the outcome, `after_tool_call`, then the result chunk.
    async fn tool_call(
        &mut self,
        resolved: &ResolvedTurn,
        call: PendingCall<'_>,
        parts: &mut StepParts,
    ) -> Result<ToolEnd, EngineError> {
        let PendingCall {
            step,
            call_id,
            tool_name,
            input_text,
            active,
            messages,
        } = call;
        let parsed: Result<Value, String> = serde_json::from_str(&input_text)
            .map_err(|e| format!("Invalid JSON input for tool {tool_name:?}: {e}"));
        let model_input = parsed
            .clone()
            .unwrap_or_else(|_| Value::String(input_text.clone()));
        parts.tool_calls.push(ToolCallRecord {
            call_id: call_id.clone(),
            tool_name: tool_name.clone(),
            input: model_input.clone(),
            dynamic: false,
        });
        let available = active.is_none_or(|a| a.iter().any(|n| n == &tool_name));
        let entry = resolved
            .tools
            .get(&tool_name)
            .filter(|_| available)
            .cloned();
        let is_client = matches!(entry, Some(ToolEntry::Client(_)));
        self.append(Event::ToolCallStarted {
            step,
            call_id: call_id.clone(),
            tool: tool_name.clone(),
            input: model_input.clone(),
            client: is_client,
        })?;
        let tool = match entry {
            Some(ToolEntry::Client(_)) => {
                parts.waits_for_client = true;
                return Ok(ToolEnd::Done);
            }
            Some(ToolEntry::Server(tool)) => Some(tool),
            None => None,
        };
        let checked = match &tool {
            None => Err(format!(
                "Model tried to call unavailable tool {tool_name:?}."
            )),
            Some(tool) => parsed.and_then(|v| validate_input(&tool_name, &tool.input_schema(), &v)),
        };
        let exec_span = tracing::info_span!(
            "execute_tool",
            otel.name = %format!("execute_tool {tool_name}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %tool_name,
            gen_ai.tool.call.id = %call_id,
            gen_ai.tool.call.arguments = tracing::field::Empty,
            gen_ai.tool.call.result = tracing::field::Empty,
        );
        if self.inner.options.capture_content {
            exec_span.record(
                "gen_ai.tool.call.arguments",
                tracing::field::display(&model_input),
            );
        }
        let tool = match (tool, checked) {
            (Some(tool), Ok(())) => tool,
            (_, Err(reason)) => {
                self.append(Event::ToolDecided {
                    step,
                    call_id: call_id.clone(),
                    tool: tool_name.clone(),
                    action: DecisionAction::Invalid,
                    model_input: model_input.clone(),
                    effective_input: model_input.clone(),
                    reason: Some(reason.clone()),
                    output: None,
                })?;
                self.inner.recorder.flush().await?;
                self.record_outcome(
                    resolved,
                    Outcome {
                        step,
                        call_id: &call_id,
                        tool_name: &tool_name,
                        model_input: &model_input,
                        effective_input: &model_input,
                        decision: DecisionAction::Invalid,
                        messages,
                        result: Err(reason),
                        duration_ms: 0,
                        run_hook: false,
                    },
                    parts,
                )
                .await?;
                return Ok(ToolEnd::Done);
            }
            (None, Ok(())) => return Ok(ToolEnd::Done),
        };
        let ctx = ToolCallContext {
            tool_call_id: call_id.clone(),
            tool_name: tool_name.clone(),
            input: model_input.clone(),
            dynamic: false,
            provider_metadata: None,
            step_number: step,
            messages: messages.to_vec(),
            abort: self.spec.signal.clone(),
        };
        let decided = guard_hook(
            self.inner,
            self.tid(),
            HookName::BeforeToolCall,
            self.inner.agent.before_tool_call(&ctx),
        )
        .await?;
        extension::before_tool_call(self.inner, self.tid(), &ctx).await?;
        let (action, effective_input, reason, skip_output) = match decided {
            Ok(None | Some(ToolCallDecision::Allow)) => {
                (DecisionAction::Allow, model_input.clone(), None, None)
            }
            Ok(Some(ToolCallDecision::AllowWithInput(input))) => {
                (DecisionAction::Rewrite, input, None, None)
            }
            Ok(Some(ToolCallDecision::Block { reason })) => {
                let text = reason.unwrap_or_else(|| {
                    format!("Tool \"{tool_name}\" was blocked by beforeToolCall.")
                });
                (
                    DecisionAction::Block,
                    model_input.clone(),
                    Some(text.clone()),
                    Some(Value::String(text)),
                )
            }
            Ok(Some(ToolCallDecision::Substitute { output, input })) => (
                DecisionAction::Substitute,
                input.unwrap_or_else(|| model_input.clone()),
                None,
                Some(output),
            ),
            Err(text) => (
                DecisionAction::HookFailed,
                model_input.clone(),
                Some(format!("before_tool_call failed: {text}")),
                None,
            ),
        };
        self.append(Event::ToolDecided {
            step,
            call_id: call_id.clone(),
            tool: tool_name.clone(),
            action,
            model_input: model_input.clone(),
            effective_input: effective_input.clone(),
            reason: reason.clone(),
            output: skip_output.clone(),
        })?;
        // The decision is durable before anything it allows can happen.
        self.inner.recorder.flush().await?;

        let (result, duration_ms) = match action {
            DecisionAction::Allow | DecisionAction::Rewrite => {
                let execution = ToolExecution {
                    call_id: call_id.clone(),
                    tool_name: tool_name.clone(),
                    step_number: step,
                    messages: messages.to_vec(),
                    context: self.tool_context.clone(),
                    cancel: self.spec.signal.clone(),
                };
                let started = self.inner.recorder.clock().now();
                let run = self
                    .execute(
                        resolved,
                        step,
                        &*tool,
                        effective_input.clone(),
                        &execution,
                        parts,
                    )
                    .instrument(exec_span.clone())
                    .await?;
                let elapsed = self.inner.recorder.clock().now() - started;
                let duration_ms = u64::try_from(elapsed.num_milliseconds()).unwrap_or(0);
                match run {
                    Executed::Done(result) => (result, duration_ms),
                    Executed::Aborted => {
                        self.append(Event::ToolCallFinished {
                            step,
                            call_id: call_id.clone(),
                            tool: tool_name.clone(),
                            success: false,
                            output: None,
                            error: Some("The tool call was aborted.".to_owned()),
                            duration_ms,
                        })?;
                        return Ok(ToolEnd::Aborted);
                    }
                }
            }
            DecisionAction::Block | DecisionAction::Substitute => {
                let output = skip_output.unwrap_or(Value::Null);
                if tool.is_streaming() {
                    // A streaming tool commits to a stream before the decision is known, so a
                    // skipped call still surfaces its one value as a preliminary result.
                    self.emit(
                        resolved,
                        step,
                        StreamPart::ToolResult {
                            call_id: call_id.clone(),
                            tool_name: tool_name.clone(),
                            output: output.clone(),
                            preliminary: true,
                        },
                        parts,
                    )
                    .await?;
                }
                (Ok(output), 0)
            }
            DecisionAction::HookFailed | DecisionAction::Invalid => {
                (Err(reason.clone().unwrap_or_default()), 0)
            }
        };
        if self.inner.options.capture_content {
            if let Ok(output) = &result {
                exec_span.record("gen_ai.tool.call.result", tracing::field::display(output));
            }
        }
        self.record_outcome(
            resolved,
            Outcome {
                step,
                call_id: &call_id,
                tool_name: &tool_name,
                model_input: &model_input,
                effective_input: &effective_input,
                decision: action,
                messages,
                result,
                duration_ms,
                run_hook: true,
            },
            parts,
        )
        .await?;
        Ok(ToolEnd::Done)
    }

    /// Runs execute (scalar or streaming), catching panics; preliminary values become chunks.
    async fn execute(
        &mut self,
        resolved: &ResolvedTurn,
        step: u32,
        tool: &dyn crate::tool::Tool,
        input: Value,
        execution: &ExecutionRef,
        parts: &mut StepParts,
    ) -> Result<Executed, EngineError> {
        let started = AssertUnwindSafe(tool.execute(input, execution)).catch_unwind();
        let output = tokio::select! {
            biased;
            _ = self.spec.signal.cancelled() => return Ok(Executed::Aborted),
            output = started => output,
        };
        let output = match output {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return Ok(Executed::Done(Err(e.to_string()))),
            Err(panic) => {
                return Ok(Executed::Done(Err(format!(
                    "the tool panicked: {}",
                    panic_text(&panic)
                ))))
            }
        };
        let mut stream = match output {
            ToolOutput::Value(value) => return Ok(Executed::Done(Ok(value))),
            ToolOutput::Stream(stream) => stream,
        };
        let mut last = None;
        loop {
            let item = tokio::select! {
                biased;
                _ = self.spec.signal.cancelled() => return Ok(Executed::Aborted),
                item = AssertUnwindSafe(stream.next()).catch_unwind() => item,
            };
            match item {
                Ok(None) => break,
                Ok(Some(Ok(value))) => {
                    self.emit(
                        resolved,
                        step,
                        StreamPart::ToolResult {
                            call_id: execution.call_id.clone(),
                            tool_name: execution.tool_name.clone(),
                            output: value.clone(),
                            preliminary: true,
                        },
                        parts,
                    )
                    .await?;
                    last = Some(value);
                }
                Ok(Some(Err(e))) => return Ok(Executed::Done(Err(e.to_string()))),
                Err(panic) => {
                    return Ok(Executed::Done(Err(format!(
                        "the tool panicked: {}",
                        panic_text(&panic)
                    ))))
                }
            }
        }
        Ok(Executed::Done(last.ok_or_else(|| {
            format!(
                "streaming tool {:?} ended without producing an output",
                execution.tool_name
            )
        })))
    }

    /// Records a call's outcome: `tool_call_finished`, `after_tool_call`, the result chunk.
    async fn record_outcome(
        &mut self,
        resolved: &ResolvedTurn,
        outcome: Outcome<'_>,
        parts: &mut StepParts,
    ) -> Result<(), EngineError> {
        let (success, output, error) = match &outcome.result {
            Ok(v) => (true, Some(v.clone()), None),
            Err(e) => (false, None, Some(e.clone())),
        };
        self.append(Event::ToolCallFinished {
            step: outcome.step,
            call_id: outcome.call_id.to_owned(),
            tool: outcome.tool_name.to_owned(),
            success,
            output: output.clone(),
            error: error.clone(),
            duration_ms: outcome.duration_ms,
        })?;
        parts.tool_results.push(ToolResultRecord {
            call_id: outcome.call_id.to_owned(),
            tool_name: outcome.tool_name.to_owned(),
            input: outcome.effective_input.clone(),
            success,
            output: output.clone(),
            error: error.clone(),
        });
        if outcome.run_hook {
            let ctx = ToolCallResultContext {
                tool_call_id: outcome.call_id.to_owned(),
                tool_name: outcome.tool_name.to_owned(),
                input: outcome.model_input.clone(),
                effective_input: outcome.effective_input.clone(),
                decision: outcome.decision,
                dynamic: false,
                step_number: outcome.step,
                messages: outcome.messages.to_vec(),
                duration_ms: outcome.duration_ms,
                success,
                output: output.clone(),
                error: error.clone(),
            };
            observe(
                self.inner,
                self.tid(),
                HookName::AfterToolCall,
                self.inner.agent.after_tool_call(&ctx),
            )
            .await?;
            extension::after_tool_call(self.inner, self.tid(), &ctx).await?;
        }
        let part = match outcome.result {
            Ok(output) => StreamPart::ToolResult {
                call_id: outcome.call_id.to_owned(),
                tool_name: outcome.tool_name.to_owned(),
                output,
                preliminary: false,
            },
            Err(error) => StreamPart::ToolError {
                call_id: outcome.call_id.to_owned(),
                tool_name: outcome.tool_name.to_owned(),
                error,
            },
        };
        self.emit(resolved, outcome.step, part, parts).await
    }
}

type ExecutionRef = ToolExecution;

enum Executed {
    Done(Result<Value, String>),
    Aborted,
}

/// A tool call as the step hands it over.
struct PendingCall<'a> {
    step: u32,
    call_id: String,
    tool_name: String,
    input_text: String,
    active: Option<&'a [String]>,
    messages: &'a [ModelMessage],
}

/// A tool call's outcome, ready to record.
struct Outcome<'a> {
    step: u32,
    call_id: &'a str,
    tool_name: &'a str,
    model_input: &'a Value,
    effective_input: &'a Value,
    decision: DecisionAction,
    messages: &'a [ModelMessage],
    result: Result<Value, String>,
    duration_ms: u64,
    run_hook: bool,
}

enum Next {
    Part(StreamPart),
    End,
    Stalled,
    Failed(ModelError),
}

/// The next part of the stream, or `Stalled` when the watchdog (if on) fires first.
async fn next_part(stream: &mut ModelStream, stall: Duration) -> Next {
    let next = if stall.is_zero() {
        stream.next().await
    } else {
        match tokio::time::timeout(stall, stream.next()).await {
            Ok(next) => next,
            Err(_) => return Next::Stalled,
        }
    };
    match next {
        None => Next::End,
        Some(Ok(part)) => Next::Part(part),
        Some(Err(e)) => Next::Failed(e),
    }
}

fn resolve_model(
    inner: &Arc<Inner>,
    choice: Option<&ModelChoice>,
) -> Result<Option<Arc<dyn LanguageModel>>, String> {
    match choice {
        None => Ok(None),
        Some(ModelChoice::Model(model)) => Ok(Some(Arc::clone(model))),
        Some(ModelChoice::Id(id)) => inner
            .agent
            .resolve_model(id)
            .map(Some)
            .ok_or_else(|| format!("model resolution failed: the agent knows no model {id:?}")),
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
