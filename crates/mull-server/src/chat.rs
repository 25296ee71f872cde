//! Serving a chat request: deciding what it asks the session to do (run a turn on new user
//! messages, apply client tool results and let the session continue, or regenerate an answer),
//! starting that, and streaming the request's turn back as numbered UI chunks, from the log
//! and live. Every turn is followed by its request id, known before the turn starts.
//!
//! HTTP and WebSocket share this module: they differ only in how chunks are framed.

use std::collections::{HashSet, VecDeque};

use std::sync::Arc;
use std::time::Duration;

use mull_core::{Role, ToolPartState, UIMessage, UIPart};
use mull_engine::{
    Approval, ChatStream, ClientToolOutcome, EngineError, Follow, Session, TurnOptions,
};
use serde_json::Value;

use crate::error::ApiError;
use crate::follow::{FollowError, TurnFollower};
use crate::quota::TurnPermit;
use crate::state::{ChatSession, Local, ServerState};
use crate::ui_stream::{UiChunk, UiStreamMapper};
use crate::wire::{ApprovalResponse, ChatRequest, Trigger};

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
    /// Answers to approval requests the session is waiting for.
    pub approvals: Vec<ApprovalResponse>,
}

/// Compares a request with the session: the client resends the whole conversation, the log
/// already holds most of it. New user messages run a turn; tool parts answering pending client
/// calls become tool results. Assistant messages are the server's own and are never taken from
/// the client.
pub fn plan(request: &ChatRequest, known_ids: &HashSet<String>, pending: &[String]) -> Plan {
    plan_with_approvals(request, known_ids, pending, &[])
}

/// [`plan`], with the approval requests the session waits on: answers to them become approval
/// answers; answers to anything else (one the log already holds) are the client's history.
pub fn plan_with_approvals(
    request: &ChatRequest,
    known_ids: &HashSet<String>,
    pending: &[String],
    awaiting_approval: &[String],
) -> Plan {
    let mut approvals: Vec<ApprovalResponse> = Vec::new();
    for answer in &request.approvals {
        if awaiting_approval.contains(&answer.approval_id)
            && !approvals
                .iter()
                .any(|a| a.approval_id == answer.approval_id)
        {
            approvals.push(answer.clone());
        }
    }
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
                ToolPartState::InputStreaming
                | ToolPartState::InputAvailable
                | ToolPartState::ApprovalRequested
                | ToolPartState::ApprovalResponded => continue,
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
        approvals,
    }
}

/// A request's turn being streamed to one client: events from the follower, mapped to
/// chunks, numbered from 0 at the request's first chunk (so a number names the same chunk on
/// every replay). Holds a lease on the chat's session, which stays open while it streams
/// (none when another node runs the turn and it is followed from the log).
pub struct TurnStream {
    /// `None` when the request started no turn (tool results that complete no step).
    follower: Option<TurnFollower>,
    mapper: UiStreamMapper,
    pending: VecDeque<UiChunk>,
    /// The number the next chunk gets.
    next_sequence: u64,
    ended: bool,
    _lease: Option<ChatSession>,
}

impl TurnStream {
    fn new(
        state: &ServerState,
        follower: Option<TurnFollower>,
        lease: Option<ChatSession>,
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
            ended: false,
            _lease: lease,
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
            let Some(follower) = self.follower.as_mut() else {
                self.ended = true;
                continue;
            };
            let mut out = Vec::new();
            match follower.next().await? {
                Some(envelope) => self.mapper.map_into(&envelope, &mut out),
                None => {
                    self.mapper.end(&mut out);
                    self.ended = true;
                }
            }
            self.pending.extend(out);
        }
    }

    /// The request the stream follows; `None` when the request started no turn.
    pub fn request_id(&self) -> Option<&str> {
        self.follower.as_ref().map(TurnFollower::request_id)
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

/// A started request: the stream of its turn.
pub struct Started {
    pub stream: TurnStream,
}

impl Started {
    /// The request id of the turn followed, when one runs.
    pub fn request_id(&self) -> Option<&str> {
        self.stream.request_id()
    }
}

/// Follows `request_id` from `after_seq` on, asking the session whether the request still runs
/// when an attempt's verdict is late (or, once another node took the chat over, whether that
/// node still holds it).
fn follower(
    state: &ServerState,
    session: &ChatSession,
    after_seq: u64,
    request_id: String,
) -> TurnFollower {
    let probe = Session::clone(session);
    let log = Arc::clone(state.log());
    TurnFollower::new(session.follow(after_seq), request_id).with_request_active(Arc::new(
        move |request: &str| {
            let chat = probe.id().to_owned();
            let here = log.holds(&chat).then(|| probe.is_request_active(request));
            let log = Arc::clone(&log);
            Box::pin(async move {
                match here {
                    Some(active) => active,
                    None => matches!(log.holder(&chat).await, Ok(Some(_))),
                }
            })
        },
    ))
}

/// How often a turn another node runs is read again from the log.
const REMOTE_POLL: Duration = Duration::from_millis(50);

/// Follows `request_id` of a chat another node holds, from the log: the request counts as
/// active while some other node still holds the chat.
fn remote_follower(
    state: &ServerState,
    chat_id: &str,
    after_seq: u64,
    request_id: String,
) -> TurnFollower {
    let log = Arc::clone(state.log());
    let chat = chat_id.to_owned();
    let events = Follow::polling(Arc::clone(&log), chat_id, REMOTE_POLL, after_seq);
    TurnFollower::new(events, request_id).with_request_active(Arc::new(move |_: &str| {
        let (log, chat) = (Arc::clone(&log), chat.clone());
        Box::pin(async move { matches!(log.holder(&chat).await, Ok(Some(_))) })
    }))
}

/// Lets a started turn run to its end whether or not anyone listens (its parts reach clients
/// from the log); the lease keeps the session open meanwhile.
fn run_to_end(chat: ChatStream, lease: ChatSession, permit: Option<TurnPermit>) {
    tokio::spawn(async move {
        if let Err(error) = chat.finish().await {
            tracing::warn!(%error, "chat turn ended without an outcome");
        }
        drop(lease);
        drop(permit);
    });
}

fn engine_error(chat_id: &str, error: EngineError) -> ApiError {
    match error {
        EngineError::UnknownMessage { .. }
        | EngineError::UnknownApproval { .. }
        | EngineError::ApprovalAlreadyAnswered { .. } => {
            ApiError::BadRequest(format!("chat {chat_id:?}: {error}"))
        }
        other => ApiError::Internal(format!("chat {chat_id:?}: {other}")),
    }
}

/// Starts what `request` asks for and returns the stream of its turn.
pub async fn start(state: &ServerState, request: ChatRequest) -> Result<Started, ApiError> {
    start_holding(state, request, None).await
}

/// [`start`], the turn holding `permit` (its client's share of running turns) until it ends.
pub async fn start_holding(
    state: &ServerState,
    request: ChatRequest,
    permit: Option<TurnPermit>,
) -> Result<Started, ApiError> {
    crate::ids::check_request(&request)?;
    let regenerate = request.trigger == Trigger::RegenerateMessage;
    // Only an existing chat has an answer to regenerate.
    let session = if regenerate {
        state.existing_session(&request.chat_id).await?
    } else {
        state.session(&request.chat_id).await?
    };
    let chat_id = request.chat_id.clone();
    // Where the request's events begin: the follower reads the log after it, then live.
    let after_seq = session.read_state(|s| s.last_seq);
    let body = Value::Object(request.body.clone());

    let chat = if regenerate {
        // The client dropped the message being regenerated (and what followed it); the
        // session retracts the same and answers again.
        Some(
            session
                .regenerate(request.message_id.as_deref(), TurnOptions::with_body(body))
                .map_err(|e| engine_error(&chat_id, e))?,
        )
    } else {
        submit(&session, &request, body).await?
    };
    let Some(chat) = chat else {
        return Ok(Started {
            stream: TurnStream::new(state, None, Some(session)),
        });
    };
    let follower = follower(state, &session, after_seq, chat.request_id.clone());
    run_to_end(chat, session.lease(), permit);
    Ok(Started {
        stream: TurnStream::new(state, Some(follower), Some(session)),
    })
}

/// A `submit-message` request: new user messages run a turn; answers to pending client calls
/// are applied, and the continuation they start (when they complete a step) is the turn.
async fn submit(
    session: &ChatSession,
    request: &ChatRequest,
    body: Value,
) -> Result<Option<ChatStream>, ApiError> {
    let chat_id = &request.chat_id;
    let (known, pending, awaiting) = session.read_state(|s| {
        let known: HashSet<String> = s.messages.iter().map(|m| m.id.clone()).collect();
        let pending: Vec<String> = s
            .pending_client_calls
            .iter()
            .map(|p| p.call_id.clone())
            .collect();
        let awaiting: Vec<String> = s
            .unanswered_approvals()
            .map(|p| p.approval_id.clone())
            .collect();
        (known, pending, awaiting)
    });
    let plan = plan_with_approvals(request, &known, &pending, &awaiting);
    if plan.new_messages.is_empty() && plan.tool_results.is_empty() && plan.approvals.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "chat {chat_id:?}: the request has no new user message, no result for a pending \
             client tool call and no answer to a pending approval; nothing to run"
        )));
    }
    // Each answer is one input event; the one completing its step starts the continuation.
    let mut continuation = None;
    for answer in plan.approvals {
        let approval = Approval {
            approved: answer.approved,
            reason: answer.reason,
            by: Some("a chat client".to_owned()),
        };
        match session
            .answer_approval_streaming(&answer.approval_id, approval)
            .await
        {
            Ok(Some(chat)) => continuation = Some(chat),
            Ok(None) => {}
            Err(error) => return Err(engine_error(chat_id, error)),
        }
    }
    if plan.new_messages.is_empty() {
        for result in plan.tool_results {
            match session
                .add_tool_result_streaming(&result.call_id, result.outcome)
                .await
            {
                Ok(Some(chat)) => continuation = Some(chat),
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%error, call_id = %result.call_id, "client tool result not applied");
                }
            }
        }
        return Ok(continuation);
    }
    for result in plan.tool_results {
        session
            .add_tool_result(&result.call_id, result.outcome)
            .await
            .map_err(|e| engine_error(chat_id, e))?;
    }
    session
        .chat_http(plan.new_messages, TurnOptions::with_body(body))
        .map(Some)
        .map_err(|e| engine_error(chat_id, e))
}

/// The active request of a chat, for resume: its stream from its first attempt's first chunk.
/// `None` when no request is active.
pub async fn resume(state: &ServerState, chat_id: &str) -> Result<Option<Started>, ApiError> {
    crate::ids::check_id("id", chat_id)?;
    let session = match state.existing_or_holder(chat_id).await? {
        Local::Here(session) => session,
        Local::Elsewhere(owner) => return resume_remote(state, chat_id, &owner).await,
    };
    // The latest request still running (or between an overflowed attempt and its retry), and
    // where its first attempt began.
    let active = session.read_state(|s| {
        let latest = s.turns.iter().rev().find(|t| {
            t.status == mull_core::TurnStatus::Running || session.is_request_active(&t.request_id)
        })?;
        let first_seq = s
            .turns
            .iter()
            .find(|t| t.request_id == latest.request_id)
            .map_or(latest.first_seq, |t| t.first_seq);
        Some((latest.request_id.clone(), first_seq))
    });
    let Some((request_id, first_seq)) = active else {
        return Ok(None);
    };
    let follower = follower(state, &session, first_seq.saturating_sub(1), request_id);
    Ok(Some(Started {
        stream: TurnStream::new(state, Some(follower), Some(session)),
    }))
}

/// Resume of a chat another node holds: its running turn, folded from the log and followed
/// there. `None` when no turn runs.
async fn resume_remote(
    state: &ServerState,
    chat_id: &str,
    owner: &str,
) -> Result<Option<Started>, ApiError> {
    let log = state.log();
    let mut folded = mull_store::SessionState::new(chat_id);
    loop {
        let page = log
            .session_page(chat_id, folded.last_seq, 1024)
            .await
            .map_err(|e| ApiError::Internal(format!("reading chat {chat_id:?}: {e}")))?;
        for env in &page {
            folded.apply(env);
        }
        if page.len() < 1024 {
            break;
        }
    }
    let Some(latest) = folded
        .turns
        .iter()
        .rev()
        .find(|t| t.status == mull_core::TurnStatus::Running)
    else {
        return Ok(None);
    };
    let first_seq = folded
        .turns
        .iter()
        .find(|t| t.request_id == latest.request_id)
        .map_or(latest.first_seq, |t| t.first_seq);
    tracing::debug!(chat = %chat_id, %owner, "following a turn another node runs");
    let follower = remote_follower(
        state,
        chat_id,
        first_seq.saturating_sub(1),
        latest.request_id.clone(),
    );
    Ok(Some(Started {
        stream: TurnStream::new(state, Some(follower), None),
    }))
}

/// What a cancel did.
#[derive(Debug)]
pub enum Cancel {
    /// The chat runs here: these requests were cancelled (none when nothing ran).
    Here(Vec<String>),
    /// Another node holds the chat: the cancellation was recorded in the log for it, and it
    /// cancels the turn when it next looks (within [`crate::TAKE_OVER_PERIOD`]).
    Requested { owner: String },
}

/// Cancels the active requests of a chat, or asks the node that runs it to.
pub async fn cancel(state: &ServerState, chat_id: &str) -> Result<Cancel, ApiError> {
    crate::ids::check_id("id", chat_id)?;
    // A turn runs where its chat is held; another node's turn is reached through the log.
    match state.existing_or_holder(chat_id).await? {
        Local::Here(_) => Ok(Cancel::Here(cancel_here(state, chat_id).await?)),
        Local::Elsewhere(owner) => {
            let recorded = state.log().request_cancel(chat_id).await.map_err(|e| {
                ApiError::Internal(format!("requesting the cancellation of {chat_id:?}: {e}"))
            })?;
            if !recorded {
                return Err(ApiError::Busy {
                    chat_id: chat_id.to_owned(),
                    owner,
                });
            }
            Ok(Cancel::Requested { owner })
        }
    }
}

/// Cancels the active requests of a chat this node holds; returns their ids.
pub async fn cancel_here(state: &ServerState, chat_id: &str) -> Result<Vec<String>, ApiError> {
    let Some(session) = state.open_session(chat_id) else {
        return Ok(Vec::new());
    };
    let mut active: Vec<String> = session.read_state(|s| {
        s.turns
            .iter()
            .filter(|t| {
                t.status == mull_core::TurnStatus::Running
                    || session.is_request_active(&t.request_id)
            })
            .map(|t| t.request_id.clone())
            .collect()
    });
    active.dedup();
    let mut cancelled = Vec::new();
    for request_id in active {
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
            approvals: Vec::new(),
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
