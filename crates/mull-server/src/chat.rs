//! Serving a chat request: deciding what it asks the session to do (run a turn on new user
//! messages, or apply client tool results and let the session continue), starting that, and
//! streaming the turn back as numbered UI chunks, from the log and live.
//!
//! HTTP and WebSocket share this module: they differ only in how chunks are framed.

use std::collections::{HashSet, VecDeque};

use mull_core::{Role, ToolPartState, UIMessage, UIPart};
use mull_engine::{ClientToolOutcome, Session, TurnOptions};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::follow::{FollowError, TurnFollower, TurnSelector};
use crate::state::ServerState;
use crate::ui_stream::{UiChunk, UiStreamMapper};
use crate::wire::{ChatRequest, Trigger};

/// A client tool's answer found in a request.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientResult {
    pub call_id: String,
    pub outcome: ClientToolOutcome,
}

/// What a request asks of the session, decided against what the session already holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// User messages the session has not seen.
    pub new_messages: Vec<UIMessage>,
    /// Answers to client tool calls the session is waiting for.
    pub tool_results: Vec<ClientResult>,
}

/// Compares a request with the session: the client resends the whole conversation, the log
/// already holds most of it. New user messages run a turn; tool parts answering pending client
/// calls become tool results. Assistant messages are the server's own and are never taken from
/// the client.
pub fn plan(request: &ChatRequest, known_ids: &HashSet<String>, pending: &[String]) -> Plan {
    let new_messages = request
        .messages
        .iter()
        .filter(|m| m.role == Role::User && !known_ids.contains(&m.id))
        .cloned()
        .collect();
    let mut tool_results = Vec::new();
    for message in request
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
    {
        for part in &message.parts {
            let UIPart::Tool(tool) = part else { continue };
            if !pending.contains(&tool.call_id)
                || tool_results
                    .iter()
                    .any(|r: &ClientResult| r.call_id == tool.call_id)
            {
                continue;
            }
            let outcome = match tool.state {
                ToolPartState::OutputAvailable => {
                    ClientToolOutcome::Output(tool.output.clone().unwrap_or(Value::Null))
                }
                ToolPartState::OutputError | ToolPartState::OutputDenied => {
                    ClientToolOutcome::Error(tool.error_text.clone())
                }
                ToolPartState::InputStreaming | ToolPartState::InputAvailable => continue,
            };
            tool_results.push(ClientResult {
                call_id: tool.call_id.clone(),
                outcome,
            });
        }
    }
    Plan {
        new_messages,
        tool_results,
    }
}

/// A turn being streamed to one client: events from the follower, mapped to chunks, numbered
/// from 0 at the turn's first chunk (so a number names the same chunk on every replay).
pub struct TurnStream {
    follower: TurnFollower,
    mapper: UiStreamMapper,
    pending: VecDeque<UiChunk>,
    /// The number the next chunk gets.
    next_sequence: u64,
    /// Resolves with whether a turn was started at all (tool results may start none).
    started: Option<oneshot::Receiver<bool>>,
    /// The request the followed turn serves, from its `turn_started`.
    request_id: Option<String>,
    ended: bool,
}

impl TurnStream {
    fn new(
        state: &ServerState,
        follower: TurnFollower,
        started: Option<oneshot::Receiver<bool>>,
    ) -> TurnStream {
        let mapper = if state.inner.hide_reasoning {
            UiStreamMapper::without_reasoning()
        } else {
            UiStreamMapper::new()
        };
        TurnStream {
            follower,
            mapper,
            pending: VecDeque::new(),
            next_sequence: 0,
            started,
            request_id: None,
            ended: false,
        }
    }

    /// The next chunk and its sequence number; `None` when the turn's stream is over.
    pub async fn next(&mut self) -> Result<Option<(u64, UiChunk)>, FollowError> {
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                let sequence = self.next_sequence;
                self.next_sequence += 1;
                return Ok(Some((sequence, chunk)));
            }
            if self.ended || self.mapper.is_finished() {
                return Ok(None);
            }
            let next = match self.started.as_mut() {
                Some(started) if self.follower.turn_id().is_none() => {
                    tokio::select! {
                        biased;
                        next = self.follower.next() => next?,
                        ran = started => {
                            self.started = None;
                            if !ran.unwrap_or(false) {
                                self.ended = true;
                            }
                            continue;
                        }
                    }
                }
                _ => self.follower.next().await?,
            };
            match next {
                Some(envelope) => {
                    if let mull_core::Event::TurnStarted { request_id, .. } = &envelope.event {
                        self.request_id = Some(request_id.clone());
                    }
                    let mut out = Vec::new();
                    self.mapper.map_into(&envelope, &mut out);
                    self.pending.extend(out);
                }
                None => self.ended = true,
            }
        }
    }

    /// The request the followed turn serves, once its start was seen.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// Skips chunks up to and including `sequence` (a client resuming after it).
    pub async fn skip_through(&mut self, sequence: u64) -> Result<(), FollowError> {
        while self.next_sequence <= sequence {
            if self.next().await?.is_none() {
                break;
            }
        }
        Ok(())
    }
}

/// A started turn: its stream, and the request it serves once known.
pub struct Started {
    pub stream: TurnStream,
    pub session: Session,
    /// The request id of the turn, when it is known up front (new messages).
    pub request_id: Option<String>,
}

/// Starts what `request` asks for and returns the stream of its turn.
pub async fn start(state: &ServerState, request: ChatRequest) -> Result<Started, ApiError> {
    if request.trigger == Trigger::RegenerateMessage {
        return Err(ApiError::Unsupported(
            "trigger \"regenerate-message\" is not supported: the log is append-only and \
             mull cannot yet replace an assistant message; send a new user message instead"
                .to_owned(),
        ));
    }
    let session = state.session(&request.chat_id).await?;
    let (known, pending) = session.read_state(|s| {
        let known: HashSet<String> = s.messages.iter().map(|m| m.id.clone()).collect();
        let pending: Vec<String> = s
            .pending_client_calls
            .iter()
            .map(|p| p.call_id.clone())
            .collect();
        (known, pending)
    });
    let plan = plan(&request, &known, &pending);
    if plan.new_messages.is_empty() && plan.tool_results.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "chat {:?}: the request has no new user message and no result for a pending \
             client tool call; nothing to run",
            request.chat_id
        )));
    }
    // Subscribe before anything is appended, so the follower misses nothing.
    let bus = session.subscribe();
    let after_seq = state.log().last_seq();
    let body = Value::Object(request.body);
    let chat_id = request.chat_id;

    if plan.new_messages.is_empty() {
        let (ran_tx, ran_rx) = oneshot::channel();
        let driver = session.clone();
        tokio::spawn(async move {
            let mut ran = false;
            for result in plan.tool_results {
                match driver
                    .add_tool_result(&result.call_id, result.outcome)
                    .await
                {
                    Ok(outcome) => ran |= outcome.is_some(),
                    Err(error) => {
                        tracing::warn!(%error, call_id = %result.call_id, "client tool result not applied");
                    }
                }
            }
            let _ = ran_tx.send(ran);
        });
        // The continuation is the next turn the session starts.
        let follower = TurnFollower::new(
            state.log().clone(),
            chat_id,
            bus,
            after_seq,
            TurnSelector::Next,
        );
        return Ok(Started {
            stream: TurnStream::new(state, follower, Some(ran_rx)),
            session,
            request_id: None,
        });
    }

    for result in plan.tool_results {
        session
            .add_tool_result(&result.call_id, result.outcome)
            .await
            .map_err(|e| ApiError::Internal(format!("chat {chat_id:?}: {e}")))?;
    }
    let chat = session
        .chat_http(plan.new_messages, TurnOptions::with_body(body))
        .map_err(|e| ApiError::Internal(format!("chat {chat_id:?}: {e}")))?;
    let request_id = chat.request_id.clone();
    // The turn runs on whether or not anyone listens; its parts reach clients from the log.
    tokio::spawn(async move {
        if let Err(error) = chat.finish().await {
            tracing::warn!(%error, "chat turn ended without an outcome");
        }
    });
    let follower = TurnFollower::new(
        state.log().clone(),
        chat_id,
        bus,
        after_seq,
        TurnSelector::Request(request_id.clone()),
    );
    Ok(Started {
        stream: TurnStream::new(state, follower, None),
        session,
        request_id: Some(request_id),
    })
}

/// The running turn of a chat, for resume: its stream from its first chunk. `None` when no
/// turn is running.
pub async fn resume(state: &ServerState, chat_id: &str) -> Result<Option<Started>, ApiError> {
    let session = state.existing_session(chat_id).await?;
    let bus = session.subscribe();
    let running = session.read_state(|s| {
        s.turns
            .iter()
            .rev()
            .find(|t| t.status == mull_core::TurnStatus::Running)
            .map(|t| (t.turn_id.clone(), t.request_id.clone(), t.first_seq))
    });
    let Some((turn_id, request_id, first_seq)) = running else {
        return Ok(None);
    };
    let selector = match turn_id {
        Some(turn_id) => TurnSelector::Turn(turn_id),
        None => TurnSelector::Request(request_id.clone()),
    };
    let follower = TurnFollower::new(
        state.log().clone(),
        chat_id,
        bus,
        first_seq.saturating_sub(1),
        selector,
    );
    Ok(Some(Started {
        stream: TurnStream::new(state, follower, None),
        session,
        request_id: Some(request_id),
    }))
}

/// Cancels the running turn of a chat (and any queued ones when none runs yet). Returns the
/// request ids cancelled.
pub async fn cancel(state: &ServerState, chat_id: &str) -> Result<Vec<String>, ApiError> {
    let session = state.existing_session(chat_id).await?;
    let running: Vec<String> = session.read_state(|s| {
        s.turns
            .iter()
            .filter(|t| t.status == mull_core::TurnStatus::Running)
            .map(|t| t.request_id.clone())
            .collect()
    });
    let mut cancelled = Vec::new();
    for request_id in running {
        if session
            .cancel_chat(&request_id)
            .map_err(|e| ApiError::Internal(format!("cancelling chat {chat_id:?}: {e}")))?
        {
            cancelled.push(request_id);
        }
    }
    Ok(cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::ToolPart;
    use serde_json::{json, Map};

    fn request(messages: Vec<UIMessage>) -> ChatRequest {
        ChatRequest {
            chat_id: "c".into(),
            messages,
            trigger: Trigger::SubmitMessage,
            message_id: None,
            body: Map::new(),
        }
    }

    fn tool(call_id: &str, state: ToolPartState, output: Option<Value>) -> UIPart {
        UIPart::Tool(ToolPart {
            call_id: call_id.into(),
            tool_name: "ask".into(),
            state,
            input: json!({}),
            output,
            error_text: None,
            preliminary: false,
        })
    }

    #[test]
    fn only_unseen_user_messages_run() {
        let req = request(vec![
            UIMessage::user("u1", "old"),
            UIMessage::text("a1", Role::Assistant, "answer"),
            UIMessage::user("u2", "new"),
        ]);
        let known: HashSet<String> = ["u1".to_owned(), "a1".to_owned()].into();
        let plan = plan(&req, &known, &[]);
        assert_eq!(plan.new_messages, vec![UIMessage::user("u2", "new")]);
        assert!(plan.tool_results.is_empty());
    }

    #[test]
    fn answered_pending_calls_become_tool_results() {
        let mut assistant = UIMessage::text("a1", Role::Assistant, "");
        assistant.parts = vec![
            tool("c1", ToolPartState::OutputAvailable, Some(json!("Berlin"))),
            tool("c2", ToolPartState::OutputError, None),
            tool("c3", ToolPartState::InputAvailable, None),
            tool("c4", ToolPartState::OutputAvailable, Some(json!(1))),
        ];
        let req = request(vec![UIMessage::user("u1", "hi"), assistant]);
        let known: HashSet<String> = ["u1".to_owned(), "a1".to_owned()].into();
        let pending = vec!["c1".to_owned(), "c2".to_owned(), "c3".to_owned()];
        let plan = plan(&req, &known, &pending);
        assert!(plan.new_messages.is_empty());
        assert_eq!(
            plan.tool_results,
            vec![
                ClientResult {
                    call_id: "c1".into(),
                    outcome: ClientToolOutcome::Output(json!("Berlin")),
                },
                ClientResult {
                    call_id: "c2".into(),
                    outcome: ClientToolOutcome::Error(None),
                },
            ]
        );
    }
}
