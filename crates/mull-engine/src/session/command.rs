//! The one entry point of a session: [`Session::command`] takes an [`Input`], appends it as its
//! input event, then acts on it. Every convenience method (`chat`, `save_messages`,
//! `submit_messages`, `continue_last_turn`, `regenerate`, `add_tool_result`, `cancel_chat`,
//! `abort_all`) builds an input and calls it, and re-execution replay re-issues recorded inputs
//! through it — so a recorded input and a live one take the same path.
//!
//! Architecture invariant: an input that is acted on is appended first. An input refused
//! before it acts (a blocking call from inside a turn, a regeneration naming a message the
//! conversation does not hold, a continuation with nothing to continue, a duplicate
//! submission, a cancellation with nothing to cancel) records nothing.

use mull_core::{EntryPath, Event, Input, Role, ToolPartState, TurnRequest};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::EngineError;
use crate::tool::ToolSet;
use crate::turn::{self, TurnSpec};

use super::handle::Session;
use crate::runtime::{ChatStream, OutcomeStatus, SubmitReceipt, TurnOutcome};

/// What a command is delivered with beyond its input: what cannot be recorded (a live
/// cancellation signal, tools with code), and how the caller wants the work back.
#[derive(Clone, Default)]
pub struct CommandOptions {
    /// Cancels the turn the input starts.
    pub signal: Option<CancellationToken>,
    /// Tools the caller adds for this turn (the last layer of the merge).
    pub tools: ToolSet,
    /// For a client tool result that completes its step: run the continuation in the
    /// background and stream it back ([`Reply::Stream`]) rather than await it.
    pub stream: bool,
}

/// What a command did.
#[non_exhaustive]
pub enum Reply {
    /// A turn ran to its end (`save_messages`, `continue_last_turn`, a continuation a tool
    /// result started); `on_chat_response` has run.
    Turn(Box<TurnOutcome>),
    /// A turn runs in the background and streams its parts here (`chat`, `http`,
    /// `regenerate`, a streamed continuation).
    Stream(ChatStream),
    /// A submission was accepted, or found to duplicate an earlier one.
    Submitted(SubmitReceipt),
    /// The input was recorded and started nothing (a tool result whose step still waits).
    Recorded,
    /// How many requests a cancellation cancelled (nothing is recorded for none).
    Cancelled(usize),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Turn(outcome) => f.debug_tuple("Turn").field(outcome).finish(),
            Reply::Stream(stream) => f.debug_tuple("Stream").field(&stream.request_id).finish(),
            Reply::Submitted(receipt) => f.debug_tuple("Submitted").field(receipt).finish(),
            Reply::Recorded => f.write_str("Recorded"),
            Reply::Cancelled(n) => f.debug_tuple("Cancelled").field(n).finish(),
        }
    }
}

impl Session {
    /// Appends `input` as its input event, then acts on it: the one entry point every
    /// convenience method wraps and re-execution replay re-issues recorded inputs through. An
    /// input refused before it acts (a blocking call from inside a turn, a regeneration naming
    /// a message the conversation does not hold, a continuation with nothing to continue, a
    /// duplicate submission, a cancellation with nothing to cancel) records nothing.
    pub async fn command(&self, input: Input, opts: CommandOptions) -> Result<Reply, EngineError> {
        match input {
            Input::Turn(request) => self.request_turn(request, opts).await,
            Input::Submit {
                submission_id,
                idempotency_key,
                messages,
                body,
            } => {
                if let Some(existing) =
                    self.find_submission(Some(&submission_id), idempotency_key.as_deref())
                {
                    return Ok(Reply::Submitted(SubmitReceipt {
                        submission_id: existing,
                        duplicate: true,
                    }));
                }
                self.inner.recorder().append(
                    None,
                    Event::SubmissionAccepted {
                        submission_id: submission_id.clone(),
                        idempotency_key,
                        messages: messages.clone(),
                        body: body.clone(),
                    },
                )?;
                self.inner.recorder().flush().await?;
                self.spawn_submission(submission_id.clone(), messages, body);
                Ok(Reply::Submitted(SubmitReceipt {
                    submission_id,
                    duplicate: false,
                }))
            }
            Input::ToolResult {
                call_id,
                state,
                output,
                error,
            } => {
                if !self
                    .record_tool_result(&call_id, state, output, error)
                    .await?
                {
                    return Ok(Reply::Recorded);
                }
                let name = if opts.stream {
                    "add_tool_result_streaming"
                } else {
                    "add_tool_result"
                };
                self.check_not_in_turn(name)?;
                self.continuation(opts.stream).await
            }
            Input::Cancel { request_id, reason } => self.cancel(request_id, reason),
            Input::ApprovalAnswer {
                approval_id,
                approved,
                reason,
                by,
            } => {
                let answer = crate::approval::Approval {
                    approved,
                    reason,
                    by,
                };
                if !self.record_approval(&approval_id, answer).await? {
                    return Ok(Reply::Recorded);
                }
                self.continuation(opts.stream).await
            }
            other => Err(EngineError::InvalidInput {
                session_id: self.inner.session_id().to_owned(),
                reason: format!("this build cannot act on {other:?}"),
            }),
        }
    }

    /// A fresh request id.
    pub(super) fn next_request_id(&self) -> String {
        self.inner.options().ids.next_id("req")
    }

    /// The earlier submission with this id or idempotency key, if any.
    pub(super) fn find_submission(&self, id: Option<&str>, key: Option<&str>) -> Option<String> {
        self.read_state(|s| {
            s.submissions
                .iter()
                .find(|sub| {
                    id == Some(sub.submission_id.as_str())
                        || (key.is_some() && sub.idempotency_key.as_deref() == key)
                })
                .map(|sub| sub.submission_id.clone())
        })
    }

    async fn request_turn(
        &self,
        mut request: TurnRequest,
        opts: CommandOptions,
    ) -> Result<Reply, EngineError> {
        request
            .check()
            .map_err(|reason| EngineError::InvalidInput {
                session_id: self.inner.session_id().to_owned(),
                reason,
            })?;
        let entry = request.entry;
        self.check_not_in_turn(entry_name(entry))?;
        match entry {
            EntryPath::Regenerate => {
                if let Some(id) = &request.target {
                    if !self.read_state(|s| s.messages.iter().any(|m| &m.id == id)) {
                        return Err(EngineError::UnknownMessage {
                            session_id: self.inner.session_id().to_owned(),
                            message_id: id.clone(),
                        });
                    }
                }
            }
            EntryPath::ContinueLastTurn => {
                let ends_with_assistant = self
                    .read_state(|s| s.messages.last().is_some_and(|m| m.role == Role::Assistant));
                if !ends_with_assistant {
                    return Ok(Reply::Turn(Box::new(TurnOutcome {
                        request_id: String::new(),
                        status: OutcomeStatus::Skipped,
                        error: None,
                        message: None,
                    })));
                }
                if request.body.is_null() {
                    request.body = self.last_body().await?;
                }
            }
            _ => {}
        }
        self.inner
            .recorder()
            .append(None, request.clone().into_event())?;
        let target = request.target.clone();
        let spec = self.spec_for(
            entry,
            request.request_id,
            request.messages,
            request.body,
            opts.signal,
            request.client_tools,
            opts.tools,
        );
        Ok(match entry {
            EntryPath::Chat | EntryPath::Http | EntryPath::SubAgent => {
                Reply::Stream(self.spawn_streaming(spec, move |inner, spec| async move {
                    turn::run_entry(&inner, spec, None).await
                }))
            }
            EntryPath::Regenerate => Reply::Stream(self.spawn_regeneration(spec, target)),
            _ => Reply::Turn(Box::new(turn::run_entry(&self.inner, spec, None).await?)),
        })
    }

    /// Builds a turn's spec and registers its request as active (cancellable).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn spec_for(
        &self,
        entry: EntryPath,
        request_id: String,
        messages: Vec<mull_core::UIMessage>,
        body: Value,
        signal: Option<CancellationToken>,
        client_tools: Vec<mull_core::ToolSpec>,
        caller_tools: ToolSet,
    ) -> TurnSpec {
        let (signal, watch) = self.inner.register_request(&request_id, signal);
        TurnSpec {
            entry,
            request_id,
            continuation: matches!(entry, EntryPath::ContinueLastTurn | EntryPath::AutoContinue),
            body,
            messages,
            signal,
            _watch: watch,
            client: None,
            submission_id: None,
            client_tools,
            caller_tools,
        }
    }

    /// Cancels one request (`Some`) or every request of the session, recording the
    /// cancellation first; nothing is recorded when there is nothing to cancel.
    fn cancel(&self, request_id: Option<String>, reason: String) -> Result<Reply, EngineError> {
        self.inner
            .cancel_requests(request_id, reason)
            .map(Reply::Cancelled)
    }

    /// The auto-continuation an answer that completed its step starts: run to its end, or
    /// streamed from a background task.
    async fn continuation(&self, stream: bool) -> Result<Reply, EngineError> {
        let spec = self.continuation_spec().await?;
        Ok(if stream {
            Reply::Stream(self.spawn_streaming(spec, move |inner, spec| async move {
                turn::run_entry(&inner, spec, None).await
            }))
        } else {
            Reply::Turn(Box::new(turn::run_entry(&self.inner, spec, None).await?))
        })
    }

    /// Appends a client's answer; returns whether a continuation should run now (the answer
    /// completed its step and auto-continue is on).
    async fn record_tool_result(
        &self,
        call_id: &str,
        state: ToolPartState,
        output: Option<Value>,
        error: Option<String>,
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
        self.inner.recorder().append(
            pending.as_ref().and_then(|p| p.turn_id.as_deref()),
            Event::ClientToolResult {
                call_id: call_id.to_owned(),
                tool,
                state,
                output,
                error,
            },
        )?;
        self.inner.recorder().flush().await?;
        let Some(pending) = pending else {
            return Ok(false);
        };
        let step_done = self.read_state(|s| {
            !s.pending_client_calls
                .iter()
                .any(|p| p.turn_id == pending.turn_id && p.step == pending.step)
                && s.approvals_answered_in_step(pending.turn_id.as_deref(), pending.step)
        });
        Ok(self.inner.options().auto_continue && step_done)
    }
}

/// The method name a refused blocking call is reported under.
fn entry_name(entry: EntryPath) -> &'static str {
    match entry {
        EntryPath::Chat => "chat",
        EntryPath::Http => "chat_http",
        EntryPath::SaveMessages => "save_messages",
        EntryPath::ContinueLastTurn => "continue_last_turn",
        EntryPath::Regenerate => "regenerate",
        EntryPath::SubmitMessages => "submit_messages",
        EntryPath::AutoContinue => "add_tool_result",
        EntryPath::SubAgent => "chat_as_subagent",
        _ => "a turn",
    }
}

/// The name of the tool that made call `call_id`, from the conversation.
fn find_tool_name(messages: &[mull_core::UIMessage], call_id: &str) -> Option<String> {
    messages.iter().rev().find_map(|m| {
        m.parts.iter().find_map(|p| match p {
            mull_core::UIPart::Tool(t) if t.call_id == call_id => Some(t.tool_name.clone()),
            _ => None,
        })
    })
}

impl Session {
    /// Cancels a queued or running turn. Returns false (and records nothing) when the request
    /// is not active, e.g. already finished.
    pub fn cancel_chat(&self, request_id: &str) -> Result<bool, EngineError> {
        let input = Input::Cancel {
            request_id: Some(request_id.to_owned()),
            reason: "cancel_chat".to_owned(),
        };
        Ok(self.cancel_now(input)? > 0)
    }

    /// Cancels every queued and running turn of the session. Returns how many were cancelled.
    pub fn abort_all(&self, reason: &str) -> Result<usize, EngineError> {
        self.cancel_now(Input::Cancel {
            request_id: None,
            reason: reason.to_owned(),
        })
    }

    /// A cancellation through [`Session::command`], which acts on it without waiting.
    fn cancel_now(&self, input: Input) -> Result<usize, EngineError> {
        use futures::FutureExt;
        match self
            .command(input, CommandOptions::default())
            .now_or_never()
        {
            Some(Ok(Reply::Cancelled(n))) => Ok(n),
            Some(Err(e)) => Err(e),
            _ => Ok(0),
        }
    }
}
