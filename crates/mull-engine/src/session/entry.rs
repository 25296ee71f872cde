//! The entry paths that run a turn: `save_messages`, `chat`, `regenerate`,
//! `continue_last_turn`, and client tool results with auto-continuation.

use std::sync::Arc;

use futures::FutureExt;
use mull_core::{EntryPath, ErrorStage, Event, Input, Role, ToolPartState, TurnRequest, UIMessage};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::{ChatError, EngineError};
use crate::tool::ToolSet;
use crate::turn::parts::TurnParts;
use crate::turn::{self, TurnSpec};

use super::command::{CommandOptions, Reply};
use super::handle::Session;
use crate::runtime::{
    ChatStream, ClientToolOutcome, OutcomeStatus, Runtime, TurnOptions, TurnOutcome,
};

impl Session {
    /// Appends `messages` and runs a turn; returns `{request_id, status}` once the turn and its
    /// `on_chat_response` are done.
    pub async fn save_messages(
        &self,
        messages: Vec<UIMessage>,
        opts: TurnOptions,
    ) -> Result<TurnOutcome, EngineError> {
        self.check_not_in_turn("save_messages")?;
        let reply = self.turn_command(EntryPath::SaveMessages, messages, None, opts);
        expect_turn(reply.await?)
    }

    /// Decodes a request body `{"messages": [...], ...}` (every other field becomes the turn's
    /// `body`) and runs it like `save_messages`. A body that cannot be decoded fails at stage
    /// `parse` with nothing persisted.
    pub async fn save_messages_json(
        &self,
        raw_body: &str,
        opts: TurnOptions,
    ) -> Result<TurnOutcome, EngineError> {
        self.check_not_in_turn("save_messages_json")?;
        match decode_request_body(raw_body) {
            Ok((messages, body)) => {
                let opts = TurnOptions { body, ..opts };
                let reply = self.turn_command(EntryPath::SaveMessages, messages, None, opts);
                expect_turn(reply.await?)
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
        let request_id = self.next_request_id();
        let error = ChatError {
            request_id: Some(request_id),
            ..ChatError::new(ErrorStage::Parse, message)
        };
        turn::fail(&TurnParts::of(&self.inner), None, error, false).await
    }

    /// Appends `messages` and runs a turn in a background task, streaming back the parts the
    /// client should see (reasoning only when `send_reasoning` is on).
    pub fn chat(
        &self,
        messages: Vec<UIMessage>,
        opts: TurnOptions,
    ) -> Result<ChatStream, EngineError> {
        self.stream_command(EntryPath::Chat, messages, None, opts)
    }

    /// [`Session::chat`] for a chat request that arrived over the network (the HTTP and
    /// WebSocket routes): the same turn, recorded with entry `http` so the log says where it
    /// came from.
    pub fn chat_http(
        &self,
        messages: Vec<UIMessage>,
        opts: TurnOptions,
    ) -> Result<ChatStream, EngineError> {
        self.stream_command(EntryPath::Http, messages, None, opts)
    }

    /// [`Session::chat`] for a sub-agent's turn, which another session's tool call runs: the
    /// same turn, recorded with entry `sub_agent` (see `subagent/mod.rs`).
    pub(crate) fn chat_as_subagent(
        &self,
        messages: Vec<UIMessage>,
        opts: TurnOptions,
    ) -> Result<ChatStream, EngineError> {
        self.stream_command(EntryPath::SubAgent, messages, None, opts)
    }

    /// A turn request through [`Session::command`], from an entry path's arguments.
    fn turn_command(
        &self,
        entry: EntryPath,
        messages: Vec<UIMessage>,
        target: Option<String>,
        opts: TurnOptions,
    ) -> impl std::future::Future<Output = Result<Reply, EngineError>> + Send + '_ {
        let request = TurnRequest {
            request_id: self.next_request_id(),
            entry,
            messages,
            body: opts.body,
            target,
            client_tools: opts.client_tools,
        };
        let opts = CommandOptions {
            signal: opts.signal,
            tools: opts.tools,
            stream: false,
        };
        self.command(Input::Turn(request), opts)
    }

    /// A streamed turn request: [`Session::command`] appends the request and spawns the turn
    /// without waiting on anything, so the stream is back at once.
    fn stream_command(
        &self,
        entry: EntryPath,
        messages: Vec<UIMessage>,
        target: Option<String>,
        opts: TurnOptions,
    ) -> Result<ChatStream, EngineError> {
        // Polled where it is made: the command's future holds a whole turn's state (kilobytes),
        // which moving it into `now_or_never` would copy on every streamed turn.
        let command = std::pin::pin!(self.turn_command(entry, messages, target, opts));
        let reply = command.now_or_never().ok_or(EngineError::InvalidInput {
            session_id: self.inner.session_id().to_owned(),
            reason: "a streamed turn request had to wait before its turn was spawned".to_owned(),
        })??;
        match reply {
            Reply::Stream(stream) => Ok(stream),
            other => Err(unexpected(other)),
        }
    }

    /// Runs `run` on `spec` in a background task, with the parts the client should see going
    /// to the returned stream. The request id is known before the task starts.
    pub(super) fn spawn_streaming<F, Fut>(&self, mut spec: TurnSpec, run: F) -> ChatStream
    where
        F: FnOnce(Arc<Runtime>, TurnSpec) -> Fut,
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
            session_id: self.inner.session_id().to_owned(),
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
        self.check_not_in_turn("regenerate")?;
        if let Some(id) = message_id {
            if !self.read_state(|s| s.messages.iter().any(|m| m.id == id)) {
                return Err(EngineError::UnknownMessage {
                    session_id: self.inner.session_id().to_owned(),
                    message_id: id.to_owned(),
                });
            }
        }
        self.stream_command(
            EntryPath::Regenerate,
            Vec::new(),
            message_id.map(str::to_owned),
            opts,
        )
    }

    /// The regeneration's turn task: the retraction and the turn under one hold of the lock.
    pub(super) fn spawn_regeneration(
        &self,
        spec: TurnSpec,
        message_id: Option<String>,
    ) -> ChatStream {
        self.spawn_streaming(spec, move |inner, spec| async move {
            let guard = inner.turn_lock().lock().await;
            match retract_for_regeneration(&inner, &spec, message_id.as_deref()).await {
                Ok(Ok(())) => turn::run_entry(&inner, spec, Some(guard)).await,
                Ok(Err(error)) => {
                    drop(guard);
                    inner.forget_request(&spec.request_id);
                    let shown = turn::fail(&TurnParts::of(&inner), None, error, false).await;
                    Ok(TurnOutcome {
                        request_id: spec.request_id.clone(),
                        status: OutcomeStatus::Error,
                        error: Some(shown),
                        message: None,
                    })
                }
                Err(error) => {
                    drop(guard);
                    inner.forget_request(&spec.request_id);
                    Err(error)
                }
            }
        })
    }

    /// Runs a continuation turn on the conversation as it stands (`continuation = true`, the
    /// last request's body). Skipped, with an empty request id, when the conversation does not
    /// end with an assistant message.
    pub async fn continue_last_turn(&self, opts: TurnOptions) -> Result<TurnOutcome, EngineError> {
        self.check_not_in_turn("continue_last_turn")?;
        let reply = self.turn_command(EntryPath::ContinueLastTurn, Vec::new(), None, opts);
        expect_turn(reply.await?)
    }

    /// The body of the last turn that ran, read from the log.
    pub(super) async fn last_body(&self) -> Result<Value, EngineError> {
        let turn_id = self.read_state(|s| s.turns.last().and_then(|t| t.turn_id.clone()));
        let Some(turn_id) = turn_id else {
            return Ok(Value::Null);
        };
        self.inner.recorder().flush().await?;
        let store_err = |source| EngineError::Store {
            session_id: self.inner.session_id().to_owned(),
            source,
        };
        let events = self
            .inner
            .recorder()
            .log()
            .turn_events(self.inner.session_id(), turn_id.as_ref())
            .await
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
        match self
            .command(tool_result(call_id, outcome), CommandOptions::default())
            .await?
        {
            Reply::Recorded => Ok(None),
            Reply::Turn(outcome) => Ok(Some(*outcome)),
            other => Err(unexpected(other)),
        }
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
        let opts = CommandOptions {
            stream: true,
            ..CommandOptions::default()
        };
        match self.command(tool_result(call_id, outcome), opts).await? {
            Reply::Recorded => Ok(None),
            Reply::Stream(stream) => Ok(Some(stream)),
            other => Err(unexpected(other)),
        }
    }

    /// The auto-continuation turn (D.20): no new messages, the last request's body.
    pub(super) async fn continuation_spec(&self) -> Result<TurnSpec, EngineError> {
        let body = self.last_body().await?;
        Ok(self.spec_for(
            EntryPath::AutoContinue,
            self.next_request_id(),
            Vec::new(),
            body,
            None,
            Vec::new(),
            ToolSet::default(),
        ))
    }
}

/// A client's answer as an input.
fn tool_result(call_id: &str, outcome: ClientToolOutcome) -> Input {
    let (state, output, error) = match outcome {
        ClientToolOutcome::Output(v) => (ToolPartState::OutputAvailable, Some(v), None),
        ClientToolOutcome::Error(text) => (
            ToolPartState::OutputError,
            None,
            Some(text.unwrap_or_else(|| "Tool execution denied by user".to_owned())),
        ),
    };
    Input::ToolResult {
        call_id: call_id.to_owned(),
        state,
        output,
        error,
    }
}

/// The outcome of a turn command that runs its turn to the end.
fn expect_turn(reply: Reply) -> Result<TurnOutcome, EngineError> {
    match reply {
        Reply::Turn(outcome) => Ok(*outcome),
        other => Err(unexpected(other)),
    }
}

/// A reply of another kind than the entry path's input makes (a bug, reported, not a panic).
pub(super) fn unexpected(reply: Reply) -> EngineError {
    EngineError::InvalidInput {
        session_id: String::new(),
        reason: format!("the command replied {reply:?}, which this entry path does not expect"),
    }
}

/// Retracts what a regeneration replaces (see [`Session::regenerate`]); runs under the turn
/// lock. `Ok(Err(_))` when the named message left the conversation while the request waited.
async fn retract_for_regeneration(
    inner: &Runtime,
    spec: &TurnSpec,
    message_id: Option<&str>,
) -> Result<Result<(), ChatError>, EngineError> {
    let plan = inner.recorder().read(|s| {
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
        inner.recorder().append(
            turn_id.as_deref(),
            Event::MessagesRetracted {
                request_id: Some(spec.request_id.clone()),
                message_ids,
            },
        )?;
        inner.recorder().flush().await?;
    }
    Ok(Ok(()))
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
