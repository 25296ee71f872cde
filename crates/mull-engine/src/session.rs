//! A session: one conversation of one agent over the log, with its turn lock and queue, its
//! entry paths (`chat`, `save_messages`, `submit_messages`, `continue_last_turn`, client tool
//! results with auto-continuation), cancellation and recovery on reopen.
//!
//! # The turn lock
//! One turn runs at a time per session; later ones wait in FIFO order (a fair async mutex).
//! The lock covers the turn and its `on_chat_response`, but while `on_chat_response` runs the
//! turn counts as finished: the hook may start a turn with `save_messages`, which runs at once,
//! before any queued turn. A blocking turn started from inside a running turn's hooks is refused
//! with [`EngineError::TurnLockHeld`]; `submit_messages` from there is accepted and queued.
//!
//! # Subscribers
//! [`Session::subscribe`] hands out a receiver of every envelope appended from then on. The bus
//! never waits for a slow subscriber: when one lags, its oldest events are dropped and `recv`
//! reports `Overflowed(n)`; it then catches up by reading the missed `seq` range from the log
//! (`LogReader::range`), which holds everything. Failed turns are also sent on
//! [`Session::failures`] (Think's `chat:request:failed`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_broadcast::Receiver;
use futures::Stream;
use mull_core::{
    Clock, EntryPath, Envelope, ErrorStage, Event, IdSource, RandomIds, Role, SequentialIds,
    StreamPart, SubmissionStatus, SystemClock, ToolPartState, ToolSpec, TurnStatus, UIMessage,
};
use mull_store::{Log, SessionState, SubmissionPhase};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::broadcast::Broadcast;
use crate::error::{ChatError, EngineError};
use crate::extension::{Extension, Extensions};
use crate::recorder::Recorder;
use crate::session_config::SessionConfig;
use crate::tool::ToolSet;
use crate::turn::{self, TurnSpec};

/// How a session is opened.
#[derive(Clone)]
pub struct SessionOptions {
    pub session_id: String,
    /// Stamps every event.
    pub clock: Arc<dyn Clock>,
    /// Names requests, turns and messages.
    pub ids: Arc<dyn IdSource>,
    /// Run a continuation turn once every pending client tool call of a step has a result.
    pub auto_continue: bool,
    /// First delay between retries of a retryable model error (doubled each retry) when the
    /// provider does not say how long to wait.
    pub retry_base_delay: Duration,
    /// Free-form data recorded in `session_opened`.
    pub metadata: Value,
    /// Events a subscriber may fall behind by before it must catch up from the log.
    pub bus_capacity: usize,
    /// Record tool inputs and outputs on tracing spans (off: spans carry names, ids and counts).
    pub capture_content: bool,
    /// Extensions, in load order; each runs right after the agent's own hook.
    pub extensions: Extensions,
    /// Stands in for the session's own tools (`update_context`, `search_messages`) each turn:
    /// re-execution replay serves their results from the recording.
    pub(crate) serve_session_tools: Option<ServeSessionTools>,
}

/// Replaces the tools a session offers itself, given the session they belong to.
pub(crate) type ServeSessionTools =
    Arc<dyn Fn(&Arc<Inner>, crate::tool::ToolSet) -> crate::tool::ToolSet + Send + Sync>;

impl SessionOptions {
    /// Real time and random ids.
    pub fn new(session_id: impl Into<String>) -> SessionOptions {
        SessionOptions {
            session_id: session_id.into(),
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            auto_continue: true,
            retry_base_delay: Duration::from_secs(2),
            metadata: Value::Null,
            bus_capacity: 1024,
            capture_content: false,
            extensions: Extensions::new(),
            serve_session_tools: None,
        }
    }

    /// A fixed clock at the fixture epoch and counting ids: the same script writes the same log.
    pub fn deterministic(session_id: impl Into<String>) -> SessionOptions {
        SessionOptions {
            clock: Arc::new(mull_core::FixedClock::at_fixture_epoch()),
            ids: Arc::new(SequentialIds::new()),
            ..SessionOptions::new(session_id)
        }
    }

    /// Uses `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> SessionOptions {
        self.clock = clock;
        self
    }

    /// Uses `ids`.
    pub fn with_ids(mut self, ids: Arc<dyn IdSource>) -> SessionOptions {
        self.ids = ids;
        self
    }

    /// Turns auto-continuation after client tool results on or off.
    pub fn with_auto_continue(mut self, on: bool) -> SessionOptions {
        self.auto_continue = on;
        self
    }

    /// Loads `extensions`, in order, after any already loaded.
    pub fn with_extensions(
        mut self,
        extensions: impl IntoIterator<Item = Arc<dyn Extension>>,
    ) -> SessionOptions {
        for extension in extensions {
            self.extensions.push(extension);
        }
        self
    }

    /// Sets the first retry delay.
    pub fn with_retry_base_delay(mut self, delay: Duration) -> SessionOptions {
        self.retry_base_delay = delay;
        self
    }
}

/// Per-call options of an entry path.
#[derive(Clone, Default)]
pub struct TurnOptions {
    /// Custom fields hooks see as `TurnContext::body`.
    pub body: Value,
    /// Cancels the turn (an already-cancelled signal still persists the user's messages).
    pub signal: Option<CancellationToken>,
    /// Tools the client answers itself (no execute).
    pub client_tools: Vec<ToolSpec>,
    /// Tools the caller adds for this turn (the last layer of the merge).
    pub tools: ToolSet,
}

impl TurnOptions {
    /// Options with a request body.
    pub fn with_body(body: Value) -> TurnOptions {
        TurnOptions {
            body,
            ..TurnOptions::default()
        }
    }
}

/// How an entry path ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeStatus {
    Completed,
    Error,
    Aborted,
    /// Nothing ran (`continue_last_turn` with no assistant message to continue).
    Skipped,
}

impl From<TurnStatus> for OutcomeStatus {
    fn from(s: TurnStatus) -> OutcomeStatus {
        match s {
            TurnStatus::Completed | TurnStatus::Running => OutcomeStatus::Completed,
            TurnStatus::Error => OutcomeStatus::Error,
            TurnStatus::Aborted => OutcomeStatus::Aborted,
        }
    }
}

/// The result of an entry path: `{request_id, status}` plus the error callers see and the
/// persisted message.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// Empty when the call was skipped.
    pub request_id: String,
    pub status: OutcomeStatus,
    /// The error `on_chat_error` returned, when the turn failed.
    pub error: Option<ChatError>,
    /// The persisted assistant message, when one was.
    pub message: Option<UIMessage>,
}

/// What a client answers for a client tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientToolOutcome {
    /// The tool's output.
    Output(Value),
    /// The call failed or was denied; `None` means "Tool execution denied by user".
    Error(Option<String>),
}

/// Options of a durable submission.
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// A caller-chosen id; a second submission with the same id is a duplicate.
    pub submission_id: Option<String>,
    /// A caller-chosen key; a second submission with the same key is a duplicate.
    pub idempotency_key: Option<String>,
    pub body: Value,
}

/// A submission's receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitReceipt {
    pub submission_id: String,
    /// True when an earlier submission had this id or key; nothing new was accepted.
    pub duplicate: bool,
}

/// How a submission ended.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmissionResult {
    pub submission_id: String,
    pub request_id: Option<String>,
    pub status: SubmissionStatus,
    pub error: Option<String>,
}

/// A failed turn, as published on [`Session::failures`].
#[derive(Debug, Clone)]
pub struct TurnFailure {
    /// The `turn_failed` envelope.
    pub envelope: Envelope,
}

/// The parts a `chat` call streams back, then its outcome.
pub struct ChatStream {
    /// The request the turn serves.
    pub request_id: String,
    parts: mpsc::UnboundedReceiver<StreamPart>,
    done: tokio::task::JoinHandle<Result<TurnOutcome, EngineError>>,
    session_id: String,
}

impl ChatStream {
    /// Waits for the turn to end (dropping parts not read yet).
    pub async fn finish(self) -> Result<TurnOutcome, EngineError> {
        let request_id = self.request_id.clone();
        let session_id = self.session_id.clone();
        self.done.await.map_err(|_| EngineError::TurnTaskLost {
            session_id,
            request_id,
        })?
    }
}

impl Stream for ChatStream {
    type Item = StreamPart;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<StreamPart>> {
        self.parts.poll_recv(cx)
    }
}

tokio::task_local! {
    /// The turn the current task is inside of, if any.
    pub(crate) static TURN_SCOPE: TurnScope;
}

/// Where the current task stands with respect to a session's turn lock.
#[derive(Debug, Clone)]
pub(crate) struct TurnScope {
    pub session_id: String,
    pub request_id: String,
    /// True while `on_chat_response` runs: the turn is over and new turns may start inline.
    pub responding: bool,
}

pub(crate) struct Inner {
    pub session_id: String,
    pub agent: Arc<dyn Agent>,
    pub config: SessionConfig,
    pub options: SessionOptions,
    pub recorder: Recorder,
    pub queue: tokio::sync::Mutex<()>,
    /// Cancellation tokens of requests that have not ended yet (queued or running).
    pub active: Mutex<HashMap<String, CancellationToken>>,
    pub waiters: Mutex<HashMap<String, watch::Sender<Option<SubmissionResult>>>>,
    /// The full-text index of the conversation, built on first search.
    pub search: crate::search::SearchIndex,
    /// Turn tasks running in the background (streamed chats, submissions) that may not have
    /// ended yet: what [`Session::abort_background_turns`] stops.
    background: Mutex<Vec<tokio::task::AbortHandle>>,
    failures: Broadcast<TurnFailure>,
}

impl Inner {
    /// Forgets a request's cancellation token once its turn ended (cancelling it is a no-op).
    pub(crate) fn forget_request(&self, request_id: &str) {
        lock(&self.active).remove(request_id);
    }

    /// Spawns a background turn task, keeping a handle to abort it (tasks that ended are
    /// forgotten here, so the list stays as long as the work in flight).
    fn spawn_turn<T: Send + 'static>(
        &self,
        task: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        // Boxed: a turn's future is large (kilobytes), and tokio moves an unboxed future
        // through several copies while spawning and finishing the task.
        let handle = tokio::spawn(Box::pin(task));
        let mut background = lock(&self.background);
        background.retain(|h| !h.is_finished());
        background.push(handle.abort_handle());
        handle
    }
}

/// A handle to an open session. Cheap to clone; every clone drives the same session.
#[derive(Clone)]
pub struct Session {
    pub(crate) inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Session {
    /// Opens (or creates) a session on `log`: rebuilds its state from the log, records
    /// `session_opened`, runs `configure_session`, and recovers submissions and turns an earlier
    /// process left unfinished (re-running submissions never applied; finishing applied ones as
    /// errors at stage `recovery`, keeping their partial message).
    pub async fn open(
        log: &Log,
        agent: Arc<dyn Agent>,
        options: SessionOptions,
    ) -> Result<Session, EngineError> {
        let store_err = |source| EngineError::Store {
            session_id: options.session_id.clone(),
            source,
        };
        log.flush().await.map_err(store_err)?;
        // A new session is looked up on the write connection and needs no read at all.
        let state = if log.has_session(&options.session_id).map_err(store_err)? {
            log.with_reader(|r| r.load_session(&options.session_id))
                .map_err(store_err)?
        } else {
            SessionState::new(options.session_id.clone())
        };
        let recorder = Recorder::new(
            log.clone(),
            options.session_id.clone(),
            Arc::clone(&options.clock),
            state,
            options.bus_capacity,
        );
        let config = agent.configure_session(SessionConfig::new()).await;
        let session = Session {
            inner: Arc::new(Inner {
                session_id: options.session_id.clone(),
                agent: Arc::clone(&agent),
                config,
                options: options.clone(),
                recorder,
                queue: tokio::sync::Mutex::new(()),
                active: Mutex::new(HashMap::new()),
                waiters: Mutex::new(HashMap::new()),
                search: crate::search::SearchIndex::default(),
                background: Mutex::new(Vec::new()),
                failures: Broadcast::new(64),
            }),
        };
        session.inner.recorder.append(
            None,
            Event::SessionOpened {
                agent: agent.name().to_owned(),
                metadata: options.metadata.clone(),
            },
        )?;
        // No barrier of its own: `session_opened` is committed with the session's first
        // durable event (or within the writer's batch delay).
        session.recover().await?;
        Ok(session)
    }

    /// Stops this session's background turns (streamed chats, submissions) where they wait,
    /// writing nothing more, as if the process had died there: a replay re-enacting a process
    /// that stopped with work in flight uses it so that work does not outlive the replay.
    /// Whatever they left unfinished is what reopening the session recovers.
    pub(crate) fn abort_background_turns(&self) {
        for handle in lock(&self.inner.background).drain(..) {
            handle.abort();
        }
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.inner.session_id
    }

    /// A snapshot of the session's state (messages, draft, turns, pending calls, submissions).
    pub fn state(&self) -> SessionState {
        self.inner.recorder.read(SessionState::clone)
    }

    /// Reads the session's state without copying it.
    pub fn read_state<R>(&self, f: impl FnOnce(&SessionState) -> R) -> R {
        self.inner.recorder.read(f)
    }

    /// Every envelope appended from now on. A lagging receiver sees `Overflowed(n)` and
    /// catches up from the log.
    pub fn subscribe(&self) -> Receiver<Envelope> {
        self.inner.recorder.subscribe()
    }

    /// Every failed turn from now on (Think's `chat:request:failed`).
    pub fn failures(&self) -> Receiver<TurnFailure> {
        self.inner.failures.subscribe()
    }

    pub(crate) fn publish_failure(inner: &Inner, envelope: Envelope) {
        inner.failures.publish(|| TurnFailure { envelope });
    }

    /// Checks whether a blocking entry may start from the current task. `Ok(true)` means it
    /// runs inline (inside `on_chat_response`, where the turn lock is already released to it).
    fn entry_mode(&self, entry: &'static str) -> Result<bool, EngineError> {
        let scope = TURN_SCOPE.try_with(TurnScope::clone).ok();
        match scope {
            Some(s) if s.session_id == self.inner.session_id => {
                if s.responding {
                    Ok(true)
                } else {
                    Err(EngineError::TurnLockHeld {
                        session_id: s.session_id,
                        request_id: s.request_id,
                        entry,
                    })
                }
            }
            _ => Ok(false),
        }
    }

    fn new_spec(&self, entry: EntryPath, messages: Vec<UIMessage>, opts: TurnOptions) -> TurnSpec {
        let request_id = self.inner.options.ids.next_id("req");
        let signal = opts.signal.unwrap_or_default();
        lock(&self.inner.active).insert(request_id.clone(), signal.clone());
        TurnSpec {
            entry,
            request_id,
            continuation: matches!(entry, EntryPath::ContinueLastTurn | EntryPath::AutoContinue),
            body: opts.body,
            messages,
            signal,
            client: None,
            submission_id: None,
            client_tools: opts.client_tools,
            caller_tools: opts.tools,
        }
    }

    /// Appends `messages` and runs a turn; returns `{request_id, status}` once the turn and its
    /// `on_chat_response` are done.
    pub async fn save_messages(
        &self,
        messages: Vec<UIMessage>,
        opts: TurnOptions,
    ) -> Result<TurnOutcome, EngineError> {
        let inline = self.entry_mode("save_messages")?;
        let spec = self.new_spec(EntryPath::SaveMessages, messages, opts);
        turn::run_entry(&self.inner, spec, inline).await
    }

    /// Decodes a request body `{"messages": [...], ...}` (every other field becomes the turn's
    /// `body`) and runs it like `save_messages`. A body that cannot be decoded fails at stage
    /// `parse` with nothing persisted.
    pub async fn save_messages_json(
        &self,
        raw_body: &str,
        opts: TurnOptions,
    ) -> Result<TurnOutcome, EngineError> {
        let inline = self.entry_mode("save_messages_json")?;
        match decode_request_body(raw_body) {
            Ok((messages, body)) => {
                let opts = TurnOptions { body, ..opts };
                let spec = self.new_spec(EntryPath::SaveMessages, messages, opts);
                turn::run_entry(&self.inner, spec, inline).await
            }
            Err(message) => {
                let error = self.record_parse_failure(message).await;
                Ok(TurnOutcome {
                    request_id: error.request_id.clone().unwrap_or_default(),
                    status: OutcomeStatus::Error,
                    error: Some(error),
                    message: None,
                })
            }
        }
    }

    /// Records a request for this session whose body could not be decoded (stage `parse`,
    /// nothing persisted): a `turn_failed` event under a fresh request id, `on_chat_error`, and
    /// the failures broadcast. Returns the error `on_chat_error` chose, for the caller to show.
    pub async fn record_parse_failure(&self, message: impl Into<String>) -> ChatError {
        let request_id = self.inner.options.ids.next_id("req");
        let error = ChatError {
            request_id: Some(request_id),
            ..ChatError::new(ErrorStage::Parse, message)
        };
        turn::fail(&self.inner, None, error, false).await
    }

    /// Appends `messages` and runs a turn in a background task, streaming back the parts the
    /// client should see (reasoning only when `send_reasoning` is on).
    pub fn chat(
        &self,
        messages: Vec<UIMessage>,
        opts: TurnOptions,
    ) -> Result<ChatStream, EngineError> {
        self.stream_turn(EntryPath::Chat, "chat", messages, opts)
    }

    /// [`Session::chat`] for a chat request that arrived over the network (the HTTP and
    /// WebSocket routes): the same turn, recorded with entry `http` so the log says where it
    /// came from.
    pub fn chat_http(
        &self,
        messages: Vec<UIMessage>,
        opts: TurnOptions,
    ) -> Result<ChatStream, EngineError> {
        self.stream_turn(EntryPath::Http, "chat_http", messages, opts)
    }

    fn stream_turn(
        &self,
        entry: EntryPath,
        name: &'static str,
        messages: Vec<UIMessage>,
        opts: TurnOptions,
    ) -> Result<ChatStream, EngineError> {
        let inline = self.entry_mode(name)?;
        let spec = self.new_spec(entry, messages, opts);
        Ok(self.spawn_streaming(spec, move |inner, spec| async move {
            turn::run_entry(&inner, spec, inline).await
        }))
    }

    /// Runs `run` on `spec` in a background task, with the parts the client should see going
    /// to the returned stream. The request id is known before the task starts.
    fn spawn_streaming<F, Fut>(&self, mut spec: TurnSpec, run: F) -> ChatStream
    where
        F: FnOnce(Arc<Inner>, TurnSpec) -> Fut,
        Fut: std::future::Future<Output = Result<TurnOutcome, EngineError>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        spec.client = Some(tx);
        let request_id = spec.request_id.clone();
        let done = self.inner.spawn_turn(run(Arc::clone(&self.inner), spec));
        ChatStream {
            request_id,
            parts: rx,
            done,
            session_id: self.inner.session_id.clone(),
        }
    }

    /// Regenerates an answer, as the AI SDK's `regenerate()` asks: `message_id` names the
    /// message to regenerate (the last message when `None`). When it is an assistant message,
    /// it and everything after it are retracted; when it is a user message, everything after
    /// it is. The retraction is a `messages_retracted` event (the log keeps the messages, the
    /// projection no longer shows them), written under the turn lock right before a new turn
    /// runs on what remains. The turn streams back like [`Session::chat`], and its request id
    /// is known at once. A `message_id` the conversation does not hold is refused with
    /// [`EngineError::UnknownMessage`] before anything is written.
    pub fn regenerate(
        &self,
        message_id: Option<&str>,
        opts: TurnOptions,
    ) -> Result<ChatStream, EngineError> {
        let inline = self.entry_mode("regenerate")?;
        if let Some(id) = message_id {
            if !self.read_state(|s| s.messages.iter().any(|m| m.id == id)) {
                return Err(EngineError::UnknownMessage {
                    session_id: self.inner.session_id.clone(),
                    message_id: id.to_owned(),
                });
            }
        }
        let message_id = message_id.map(str::to_owned);
        let spec = self.new_spec(EntryPath::Regenerate, Vec::new(), opts);
        Ok(self.spawn_streaming(spec, move |inner, spec| async move {
            let guard = if inline {
                None
            } else {
                Some(inner.queue.lock().await)
            };
            let result = match retract_for_regeneration(&inner, &spec, message_id.as_deref()).await
            {
                Ok(Ok(())) => turn::run_entry(&inner, spec, true).await,
                Ok(Err(error)) => {
                    inner.forget_request(&spec.request_id);
                    let shown = turn::fail(&inner, None, error, false).await;
                    Ok(TurnOutcome {
                        request_id: spec.request_id.clone(),
                        status: OutcomeStatus::Error,
                        error: Some(shown),
                        message: None,
                    })
                }
                Err(error) => {
                    inner.forget_request(&spec.request_id);
                    Err(error)
                }
            };
            drop(guard);
            result
        }))
    }

    /// Runs a continuation turn on the conversation as it stands (`continuation = true`, the
    /// last request's body). Skipped, with an empty request id, when the conversation does not
    /// end with an assistant message.
    pub async fn continue_last_turn(&self, opts: TurnOptions) -> Result<TurnOutcome, EngineError> {
        let inline = self.entry_mode("continue_last_turn")?;
        let ends_with_assistant =
            self.read_state(|s| s.messages.last().is_some_and(|m| m.role == Role::Assistant));
        if !ends_with_assistant {
            return Ok(TurnOutcome {
                request_id: String::new(),
                status: OutcomeStatus::Skipped,
                error: None,
                message: None,
            });
        }
        let mut opts = opts;
        if opts.body.is_null() {
            opts.body = self.last_body().await?;
        }
        let spec = self.new_spec(EntryPath::ContinueLastTurn, Vec::new(), opts);
        turn::run_entry(&self.inner, spec, inline).await
    }

    /// The body of the last turn that ran, read from the log.
    async fn last_body(&self) -> Result<Value, EngineError> {
        let turn_id = self.read_state(|s| s.turns.last().and_then(|t| t.turn_id.clone()));
        let Some(turn_id) = turn_id else {
            return Ok(Value::Null);
        };
        self.inner.recorder.flush().await?;
        let store_err = |source| EngineError::Store {
            session_id: self.inner.session_id.clone(),
            source,
        };
        let events = self
            .inner
            .recorder
            .log()
            .with_reader(|r| r.turn_events(&self.inner.session_id, &turn_id))
            .map_err(store_err)?;
        Ok(events
            .into_iter()
            .find_map(|e| match e.event {
                Event::TurnStarted { body, .. } => Some(body),
                _ => None,
            })
            .unwrap_or(Value::Null))
    }

    /// Records a client's answer to a client tool call. With auto-continue on, once every
    /// pending call of that step has a result, a continuation turn runs and its outcome is
    /// returned.
    pub async fn add_tool_result(
        &self,
        call_id: &str,
        outcome: ClientToolOutcome,
    ) -> Result<Option<TurnOutcome>, EngineError> {
        if !self.record_tool_result(call_id, outcome).await? {
            return Ok(None);
        }
        let inline = self.entry_mode("add_tool_result")?;
        let spec = self.continuation_spec().await?;
        turn::run_entry(&self.inner, spec, inline).await.map(Some)
    }

    /// Like [`Session::add_tool_result`], but a continuation it starts runs in a background
    /// task: its [`ChatStream`] comes back at once, carrying the continuation's request id
    /// before the turn starts (a server follows exactly that request). `None` when the result
    /// starts no continuation (other calls of the step still wait, or auto-continue is off).
    pub async fn add_tool_result_streaming(
        &self,
        call_id: &str,
        outcome: ClientToolOutcome,
    ) -> Result<Option<ChatStream>, EngineError> {
        if !self.record_tool_result(call_id, outcome).await? {
            return Ok(None);
        }
        let inline = self.entry_mode("add_tool_result_streaming")?;
        let spec = self.continuation_spec().await?;
        Ok(Some(
            self.spawn_streaming(spec, move |inner, spec| async move {
                turn::run_entry(&inner, spec, inline).await
            }),
        ))
    }

    /// Appends a client's answer; returns whether a continuation should run now (the answer
    /// completed its step and auto-continue is on).
    async fn record_tool_result(
        &self,
        call_id: &str,
        outcome: ClientToolOutcome,
    ) -> Result<bool, EngineError> {
        let pending = self.read_state(|s| {
            s.pending_client_calls
                .iter()
                .find(|p| p.call_id == call_id)
                .cloned()
        });
        let tool = pending
            .as_ref()
            .map(|p| p.tool.clone())
            .or_else(|| self.read_state(|s| find_tool_name(&s.messages, call_id)))
            .unwrap_or_default();
        let (state, output, error) = match outcome {
            ClientToolOutcome::Output(v) => (ToolPartState::OutputAvailable, Some(v), None),
            ClientToolOutcome::Error(text) => (
                ToolPartState::OutputError,
                None,
                Some(text.unwrap_or_else(|| "Tool execution denied by user".to_owned())),
            ),
        };
        self.inner.recorder.append(
            pending.as_ref().and_then(|p| p.turn_id.as_deref()),
            Event::ClientToolResult {
                call_id: call_id.to_owned(),
                tool,
                state,
                output,
                error,
            },
        )?;
        self.inner.recorder.flush().await?;
        let Some(pending) = pending else {
            return Ok(false);
        };
        let step_done = self.read_state(|s| {
            !s.pending_client_calls
                .iter()
                .any(|p| p.turn_id == pending.turn_id && p.step == pending.step)
        });
        Ok(self.inner.options.auto_continue && step_done)
    }

    /// The auto-continuation turn (D.20): no new messages, the last request's body.
    async fn continuation_spec(&self) -> Result<TurnSpec, EngineError> {
        let body = self.last_body().await?;
        Ok(self.new_spec(
            EntryPath::AutoContinue,
            Vec::new(),
            TurnOptions::with_body(body),
        ))
    }

    /// Accepts a durable submission: `submission_accepted` is appended and flushed before
    /// anything runs, then the turn runs in the background, queued behind others. A second
    /// submission with the same id or idempotency key is a duplicate and accepts nothing.
    pub async fn submit_messages(
        &self,
        messages: Vec<UIMessage>,
        opts: SubmitOptions,
    ) -> Result<SubmitReceipt, EngineError> {
        let existing = self.read_state(|s| {
            s.submissions
                .iter()
                .find(|sub| {
                    opts.submission_id.as_deref() == Some(sub.submission_id.as_str())
                        || (opts.idempotency_key.is_some()
                            && sub.idempotency_key == opts.idempotency_key)
                })
                .map(|sub| sub.submission_id.clone())
        });
        if let Some(submission_id) = existing {
            return Ok(SubmitReceipt {
                submission_id,
                duplicate: true,
            });
        }
        let submission_id = opts
            .submission_id
            .clone()
            .unwrap_or_else(|| self.inner.options.ids.next_id("sub"));
        self.inner.recorder.append(
            None,
            Event::SubmissionAccepted {
                submission_id: submission_id.clone(),
                idempotency_key: opts.idempotency_key.clone(),
                messages: messages.clone(),
                body: opts.body.clone(),
            },
        )?;
        self.inner.recorder.flush().await?;
        self.spawn_submission(submission_id.clone(), messages, opts.body);
        Ok(SubmitReceipt {
            submission_id,
            duplicate: false,
        })
    }

    fn spawn_submission(&self, submission_id: String, messages: Vec<UIMessage>, body: Value) {
        let (tx, _rx) = watch::channel(None);
        lock(&self.inner.waiters).insert(submission_id.clone(), tx);
        let mut spec = self.new_spec(
            EntryPath::SubmitMessages,
            messages,
            TurnOptions::with_body(body),
        );
        spec.submission_id = Some(submission_id.clone());
        let inner = Arc::clone(&self.inner);
        self.inner.spawn_turn(async move {
            let request_id = spec.request_id.clone();
            let outcome = turn::run_entry(&inner, spec, false).await;
            let (status, error) = match &outcome {
                Ok(o) => (
                    match o.status {
                        OutcomeStatus::Completed | OutcomeStatus::Skipped => {
                            SubmissionStatus::Completed
                        }
                        OutcomeStatus::Error => SubmissionStatus::Error,
                        OutcomeStatus::Aborted => SubmissionStatus::Aborted,
                    },
                    o.error.as_ref().map(|e| e.message.clone()),
                ),
                Err(e) => (SubmissionStatus::Error, Some(e.to_string())),
            };
            let result = SubmissionResult {
                submission_id: submission_id.clone(),
                request_id: Some(request_id.clone()),
                status,
                error: error.clone(),
            };
            let appended = inner.recorder.append(
                None,
                Event::SubmissionFinished {
                    submission_id: submission_id.clone(),
                    request_id: Some(request_id),
                    status,
                    error,
                },
            );
            if appended.is_ok() {
                let _ = inner.recorder.flush().await;
            }
            if let Some(tx) = lock(&inner.waiters).remove(&submission_id) {
                let _ = tx.send(Some(result));
            }
        });
    }

    /// Waits until a submission has finished and says how.
    pub async fn wait_submission(
        &self,
        submission_id: &str,
    ) -> Result<SubmissionResult, EngineError> {
        let rx = lock(&self.inner.waiters)
            .get(submission_id)
            .map(watch::Sender::subscribe);
        if let Some(mut rx) = rx {
            if let Ok(result) = rx.wait_for(Option::is_some).await {
                if let Some(result) = result.clone() {
                    return Ok(result);
                }
            }
        }
        self.read_state(|s| {
            s.submissions
                .iter()
                .find(|sub| {
                    sub.submission_id == submission_id && sub.phase == SubmissionPhase::Finished
                })
                .map(|sub| SubmissionResult {
                    submission_id: sub.submission_id.clone(),
                    request_id: sub.request_id.clone(),
                    status: sub.status.unwrap_or(SubmissionStatus::Error),
                    error: sub.error.clone(),
                })
        })
        .ok_or_else(|| EngineError::UnknownSubmission {
            session_id: self.inner.session_id.clone(),
            submission_id: submission_id.to_owned(),
        })
    }

    /// Whether a request is queued or running: its turn, with any overflow retries, has not
    /// ended yet. A client following a request by its events asks this when an attempt ended
    /// in error and neither its final failure nor a retry has appeared.
    pub fn is_request_active(&self, request_id: &str) -> bool {
        lock(&self.inner.active).contains_key(request_id)
    }

    /// Whether anything runs or waits in the session: a queued or running request.
    pub fn is_busy(&self) -> bool {
        !lock(&self.inner.active).is_empty()
    }

    /// Cancels a queued or running turn. Returns false (and records nothing) when the request
    /// is not active, e.g. already finished.
    pub fn cancel_chat(&self, request_id: &str) -> Result<bool, EngineError> {
        let token = lock(&self.inner.active).get(request_id).cloned();
        match token {
            Some(token) if !token.is_cancelled() => {
                self.inner.recorder.append(
                    None,
                    Event::CancellationRequested {
                        request_id: Some(request_id.to_owned()),
                        reason: "cancel_chat".to_owned(),
                    },
                )?;
                token.cancel();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Cancels every queued and running turn of the session. Returns how many were cancelled.
    pub fn abort_all(&self, reason: &str) -> Result<usize, EngineError> {
        let tokens: Vec<CancellationToken> = lock(&self.inner.active)
            .values()
            .filter(|t| !t.is_cancelled())
            .cloned()
            .collect();
        if tokens.is_empty() {
            return Ok(0);
        }
        self.inner.recorder.append(
            None,
            Event::CancellationRequested {
                request_id: None,
                reason: reason.to_owned(),
            },
        )?;
        for token in &tokens {
            token.cancel();
        }
        Ok(tokens.len())
    }

    /// Recovers what an earlier process left unfinished (see [`Session::open`]).
    async fn recover(&self) -> Result<(), EngineError> {
        let (submissions, running) = self.read_state(|s| {
            let subs: Vec<_> = s
                .submissions
                .iter()
                .filter(|sub| sub.phase != SubmissionPhase::Finished)
                .cloned()
                .collect();
            let running: Vec<_> = s
                .turns
                .iter()
                .filter(|t| t.status == TurnStatus::Running)
                .cloned()
                .collect();
            (subs, running)
        });
        if submissions.is_empty() && running.is_empty() {
            return Ok(());
        }
        for turn_summary in &running {
            turn::finish_interrupted(&self.inner, turn_summary).await?;
        }
        for sub in submissions {
            match sub.phase {
                SubmissionPhase::Accepted => {
                    let body = self.submission_body(&sub.submission_id).await?;
                    self.spawn_submission(sub.submission_id, sub.messages, body);
                }
                _ => {
                    let turn_state = self.read_state(|s| {
                        s.turns
                            .iter()
                            .rev()
                            .find(|t| Some(&t.request_id) == sub.request_id.as_ref())
                            .map(|t| (t.status, t.error.clone()))
                    });
                    let (status, error) = match turn_state {
                        Some((TurnStatus::Completed, _)) => (SubmissionStatus::Completed, None),
                        Some((TurnStatus::Aborted, e)) => (SubmissionStatus::Aborted, e),
                        Some((_, e)) => (
                            SubmissionStatus::Error,
                            e.or_else(|| Some("interrupted before its turn started".to_owned())),
                        ),
                        None => (
                            SubmissionStatus::Error,
                            Some("interrupted before its turn started".to_owned()),
                        ),
                    };
                    self.inner.recorder.append(
                        None,
                        Event::SubmissionFinished {
                            submission_id: sub.submission_id,
                            request_id: sub.request_id,
                            status,
                            error,
                        },
                    )?;
                }
            }
        }
        self.inner.recorder.flush().await
    }

    /// The body a submission was accepted with, read from the log.
    async fn submission_body(&self, submission_id: &str) -> Result<Value, EngineError> {
        let store_err = |source| EngineError::Store {
            session_id: self.inner.session_id.clone(),
            source,
        };
        let reader = self.inner.recorder.log().reader().map_err(store_err)?;
        let mut after = 0;
        loop {
            let page = reader
                .session_page(&self.inner.session_id, after, 1000)
                .map_err(store_err)?;
            let Some(last) = page.last() else {
                return Ok(Value::Null);
            };
            after = last.seq;
            for env in page {
                if let Event::SubmissionAccepted {
                    submission_id: id,
                    body,
                    ..
                } = env.event
                {
                    if id == submission_id {
                        return Ok(body);
                    }
                }
            }
        }
    }
}

/// Retracts what a regeneration replaces (see [`Session::regenerate`]); runs under the turn
/// lock. `Ok(Err(_))` when the named message left the conversation while the request waited.
async fn retract_for_regeneration(
    inner: &Inner,
    spec: &TurnSpec,
    message_id: Option<&str>,
) -> Result<Result<(), ChatError>, EngineError> {
    let plan = inner.recorder.read(|s| {
        let index = match message_id {
            Some(id) => s.messages.iter().position(|m| m.id == id)?,
            None => match s.messages.len().checked_sub(1) {
                Some(last) => last,
                None => return Some((Vec::new(), None)),
            },
        };
        let from = match s.messages[index].role {
            Role::Assistant => index,
            _ => index + 1,
        };
        let retracted: Vec<&UIMessage> = s.messages[from..].iter().collect();
        // The retraction is shown in the history of the turn that wrote the first answer it
        // takes back.
        let turn_id = retracted
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .find_map(|m| {
                s.turns
                    .iter()
                    .rev()
                    .find(|t| t.message_id == m.id)
                    .and_then(|t| t.turn_id.clone())
            });
        Some((
            retracted.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
            turn_id,
        ))
    });
    let Some((message_ids, turn_id)) = plan else {
        return Ok(Err(ChatError {
            request_id: Some(spec.request_id.clone()),
            ..ChatError::new(
                ErrorStage::Turn,
                format!(
                    "message {:?} left the conversation before it could be regenerated",
                    message_id.unwrap_or_default()
                ),
            )
        }));
    };
    if !message_ids.is_empty() {
        inner.recorder.append(
            turn_id.as_deref(),
            Event::MessagesRetracted {
                request_id: Some(spec.request_id.clone()),
                message_ids,
            },
        )?;
        inner.recorder.flush().await?;
    }
    Ok(Ok(()))
}

fn find_tool_name(messages: &[UIMessage], call_id: &str) -> Option<String> {
    messages.iter().rev().find_map(|m| {
        m.parts.iter().find_map(|p| match p {
            mull_core::UIPart::Tool(t) if t.call_id == call_id => Some(t.tool_name.clone()),
            _ => None,
        })
    })
}

/// Splits a request body into its messages and the remaining fields.
fn decode_request_body(raw: &str) -> Result<(Vec<UIMessage>, Value), String> {
    let mut value: Value =
        serde_json::from_str(raw).map_err(|e| format!("request body is not JSON: {e}"))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| "request body is not a JSON object".to_owned())?;
    let messages = object
        .remove("messages")
        .ok_or_else(|| "request body has no \"messages\" field".to_owned())?;
    let messages: Vec<UIMessage> = serde_json::from_value(messages)
        .map_err(|e| format!("request body \"messages\" does not decode: {e}"))?;
    Ok((messages, value))
}
