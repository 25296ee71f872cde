//! The session fold: [`SessionState::apply`] dispatches each event to what it changes — the
//! conversation, submissions, sub-agents, context blocks — hands stream chunks to the draft,
//! and reads a tool call's, a turn's and a step's events through the facts (the call, turn
//! and approval folds).

use chrono::{DateTime, Utc};
use mull_core::{
    Envelope, Event, EventRef, SubmissionStatus, ToolPartState, TurnStatus, UIMessage, UIPart,
    Usage,
};

use super::state::{SessionState, SubagentParent, SubagentRun, Submission, SubmissionPhase};
use crate::facts::FactChange;

/// The error a tool call without a result gets in a fork cut before the result came.
pub const FORKED_TOOL_CALL: &str = "the session was forked before this call finished";

impl SessionState {
    /// Folds one event in. Events of other sessions are ignored.
    pub fn apply(&mut self, env: &Envelope) {
        if env.session_id == self.session_id {
            self.apply_own(EventRef::of(env));
        }
    }

    /// Folds in one event of this session, borrowed in parts: how the engine folds the event
    /// it has just appended, without building an envelope for it.
    ///
    /// One arm per kind of event the conversation state takes (calls, turns and steps go
    /// through the facts first): the one place the state changes, so it is kept whole.
    pub fn apply_own(&mut self, e: EventRef<'_>) {
        self.last_seq = e.seq;
        self.last_at = Some(e.at);
        if let Event::Chunk { part, .. } = e.event {
            // The draft is the state's reading of the stream; its facts keep lifecycle events
            // only, so the text is not kept twice.
            return self.apply_chunk(part);
        }
        // A tool call's events are read through the facts, and only there; so are a turn's
        // and a step's, but for a sub-agent's end.
        match self.facts.push_ref(e) {
            Some(FactChange::Call { call, stage }) => {
                self.call_changed(call, stage, e.turn_id);
                return;
            }
            Some(FactChange::Turn { turn, stage }) if self.turn_changed(turn, stage, e.turn_id) => {
                return;
            }
            Some(FactChange::Step { turn, step, stage })
                if self.step_changed(turn, step, stage, e.turn_id) =>
            {
                return;
            }
            _ => {}
        }
        match e.event {
            Event::UserMessagesSaved { messages, .. } => {
                for message in messages {
                    upsert(&mut self.messages, message);
                }
            }
            Event::MessageMetadataUpdated { metadata, .. } => {
                if let Some(draft) = &mut self.draft {
                    // Shallow: a key set again replaces the earlier value whole.
                    match &mut draft.metadata {
                        Some(serde_json::Value::Object(existing)) => {
                            existing.extend(metadata.clone());
                        }
                        slot => *slot = Some(serde_json::Value::Object(metadata.clone())),
                    }
                }
            }
            Event::AssistantMessageSaved { message, .. } => {
                upsert(&mut self.messages, message);
                self.approval_parts_after_save(&message.id);
                self.draft = None;
                self.open_blocks.clear();
            }
            Event::CompactionApplied {
                replaced_ids,
                summary,
                ..
            } => self.compact(replaced_ids, summary.as_ref()),
            Event::ContextBlockUpdated { block, content, .. } => {
                self.context_blocks.insert(block.clone(), content.clone());
            }
            Event::MessagesRetracted { message_ids, .. } => self.retract(message_ids),
            Event::SubmissionAccepted {
                submission_id,
                idempotency_key,
                messages,
                ..
            } => self.submissions.push(Submission {
                submission_id: submission_id.clone(),
                idempotency_key: idempotency_key.clone(),
                messages: messages.clone(),
                phase: SubmissionPhase::Accepted,
                request_id: None,
                status: None,
                error: None,
            }),
            Event::SubmissionApplied {
                submission_id,
                request_id,
            } => {
                if let Some(sub) = self.submission_mut(submission_id) {
                    sub.phase = SubmissionPhase::Applied;
                    sub.request_id = Some(request_id.clone());
                }
            }
            Event::SubmissionFinished {
                submission_id,
                request_id,
                status,
                error,
            } => {
                if let Some(sub) = self.submission_mut(submission_id) {
                    sub.phase = SubmissionPhase::Finished;
                    sub.status = Some(*status);
                    sub.error = error.clone();
                    if request_id.is_some() {
                        sub.request_id = request_id.clone();
                    }
                }
            }
            Event::ChatResponseDelivered { request_id, .. } => {
                for turn in self
                    .turns
                    .iter_mut()
                    .filter(|t| t.request_id == *request_id)
                {
                    turn.response_owed = false;
                }
            }
            Event::SessionForked { origin_seq, .. } => self.cut_at_fork(*origin_seq, e.at),
            Event::SubagentStarted {
                call_id,
                tool,
                agent,
                child_session_id,
                depth,
                ..
            } => self.subagents.push(SubagentRun {
                turn_id: e.turn_id.map(str::to_owned),
                call_id: call_id.clone(),
                tool: tool.clone(),
                agent: agent.clone(),
                child_session_id: child_session_id.clone(),
                depth: *depth,
                status: None,
                usage: Usage::default(),
            }),
            Event::SubagentFinished {
                child_session_id,
                status,
                usage,
                ..
            } => {
                // The one place a child's usage joins its parent's totals.
                self.usage.add(usage);
                if let Some(turn) = self.turn_mut(e.turn_id) {
                    turn.subagent_usage.add(usage);
                }
                if let Some(run) = self
                    .subagents
                    .iter_mut()
                    .rev()
                    .find(|r| &r.child_session_id == child_session_id)
                {
                    run.status = Some(*status);
                    run.usage = usage.clone();
                }
            }
            Event::SubagentLinked {
                parent_session_id,
                parent_turn_id,
                parent_call_id,
                depth,
                ..
            } => {
                self.parent = Some(SubagentParent {
                    session_id: parent_session_id.clone(),
                    turn_id: parent_turn_id.clone(),
                    call_id: parent_call_id.clone(),
                    depth: *depth,
                })
            }
            Event::Unknown(_) => self.unknown_events += 1,
            // An input records what was asked; what it changes is folded from the events it
            // causes (the conversation from `user_messages_saved`). A tool call's events were
            // folded above, through the facts.
            _ => {}
        }
    }

    /// Closes what a fork point cut, after the origin's prefix was folded: the running turn's
    /// draft becomes the partial assistant message (a tool call in it without a result gets an
    /// error result, as an interrupted call does), the turn ends as aborted, and the origin's
    /// unfinished submissions and awaited client calls stay the origin's.
    fn cut_at_fork(&mut self, origin_seq: u64, at: DateTime<Utc>) {
        if let Some(mut draft) = self.draft.take() {
            for part in &mut draft.parts {
                match part {
                    UIPart::Text { streaming, .. } | UIPart::Reasoning { streaming, .. } => {
                        *streaming = false
                    }
                    UIPart::Tool(tool)
                        if !matches!(
                            tool.state,
                            ToolPartState::OutputAvailable | ToolPartState::OutputError
                        ) || tool.preliminary =>
                    {
                        tool.state = ToolPartState::OutputError;
                        tool.error_text = Some(FORKED_TOOL_CALL.to_owned());
                        tool.output = None;
                        tool.preliminary = false;
                    }
                    _ => {}
                }
            }
            if draft.parts.iter().any(|p| !matches!(p, UIPart::StepStart)) {
                upsert(&mut self.messages, &draft);
            }
        }
        self.open_blocks.clear();
        for turn in &mut self.turns {
            // The origin's hooks are owed the origin's deliveries, not the fork's agent.
            turn.response_owed = false;
            if turn.status == TurnStatus::Running {
                turn.status = TurnStatus::Aborted;
                turn.error = Some(format!("cut by a fork at seq {origin_seq}"));
                turn.finished_at = Some(at);
                turn.duration_ms = Some((at - turn.started_at).num_milliseconds().max(0) as u64);
            }
        }
        for sub in &mut self.submissions {
            if sub.phase != SubmissionPhase::Finished {
                sub.phase = SubmissionPhase::Finished;
                sub.status = Some(SubmissionStatus::Aborted);
                sub.error = Some(format!("cut by a fork at seq {origin_seq}"));
            }
        }
        self.pending_client_calls.clear();
        self.pending_approvals.clear();
    }

    /// Takes retracted messages out of the conversation. Client tool calls those messages
    /// asked for are no longer awaited: nothing is left to answer them into.
    fn retract(&mut self, message_ids: &[String]) {
        let retracted_calls: Vec<String> = self
            .messages
            .iter()
            .filter(|m| message_ids.contains(&m.id))
            .flat_map(|m| m.parts.iter())
            .filter_map(|p| match p {
                UIPart::Tool(tool) => Some(tool.call_id.clone()),
                _ => None,
            })
            .collect();
        self.pending_client_calls
            .retain(|c| !retracted_calls.contains(&c.call_id));
        self.pending_approvals
            .retain(|p| !retracted_calls.contains(&p.call_id));
        self.messages.retain(|m| !message_ids.contains(&m.id));
    }

    /// Removes the replaced messages and puts the summary where the first of them stood (at
    /// the start when none of them is present).
    fn compact(&mut self, replaced_ids: &[String], summary: Option<&UIMessage>) {
        let first = self
            .messages
            .iter()
            .position(|m| replaced_ids.contains(&m.id));
        self.messages.retain(|m| !replaced_ids.contains(&m.id));
        if let Some(summary) = summary {
            let at = first.unwrap_or(0).min(self.messages.len());
            self.messages.insert(at, summary.clone());
        }
    }
}

/// Replaces the message with the same id in place, or appends it.
fn upsert(messages: &mut Vec<UIMessage>, message: &UIMessage) {
    match messages.iter_mut().find(|m| m.id == message.id) {
        Some(existing) => existing.clone_from(message),
        None => messages.push(message.clone()),
    }
}
