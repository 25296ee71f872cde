//! Agents as tools: an [`AgentTool`] runs another agent's turn as a child session in the same
//! log, and reports it back to the calling turn as a streaming tool.
//!
//! # How a call goes
//! 1. The nesting depth is checked: the calling session's depth (0, or its `subagent_linked`
//!    depth) plus one may not pass the tool's limit; beyond it the call is a tool error.
//! 2. `subagent_started` is appended to the **parent** (its tool call names the child session)
//!    and flushed, so a child session never exists without the parent saying whose it is.
//! 3. The child session opens on the same log (its id is the parent's with a suffix from the
//!    parent's id source — `s1.agent_1` — so a deterministic run names it the same way every
//!    time and it is unique wherever the parent's is), `subagent_linked` names the parent
//!    session, turn and tool call, and a turn runs with entry
//!    [`mull_core::EntryPath::SubAgent`]: every hook of the child agent fires on it, as on any
//!    entry path. The child shares the parent session's clock, ids, extensions (a policy
//!    laid over a session holds for the sub-agents it starts) and outside world
//!    ([`crate::outside`]).
//! 4. While it runs, each tool call of the child (decided, then ended) and each of its finished
//!    steps is a **preliminary result** of the parent's call (a snapshot: the child session,
//!    its latest step's text, its tool calls so far), so a client of the parent sees progress.
//!    The child reports from its outside world's hook points, before its agent's hook runs,
//!    and waits at each report until the parent recorded it (`report.rs`), so the two
//!    sessions' events interleave the same way every run. Text deltas are not forwarded one by
//!    one: a snapshot per step keeps the parent's log linear in the child's output.
//! 5. When the child's turn ends (its `on_chat_response` included), `subagent_finished` is
//!    appended to the parent with the child session's usage — the projection folds it into the
//!    parent's totals there, once — and its spend when it kept a budget (it does whenever the
//!    parent had one: the parent's remainder is the child's budget, written in its
//!    `subagent_linked`; see [`crate::budget`]), and the child's final answer (the text of its last step)
//!    is the call's output. A child that failed or was aborted makes the call a tool error.
//!
//! # Cancellation and crashes
//! The child runs under a signal of its own. When the parent's call ends before the child did
//! (the parent turn was cancelled, or the call was cut off), the child gets a
//! `cancellation_requested` naming why and its turn ends as aborted. A crash needs nothing
//! here: the log's recovery resolves every open turn of every session, so parent and child
//! both end at stage `recovery` and neither's decided tool calls run again.
//!
//! # Re-execution
//! A replay serves an agent tool's call from the recording like any tool's: its preliminary
//! results and answer, with `subagent_started` / `subagent_finished` written again at their
//! places. The child is not re-run inside the parent's replay; it is a recorded session of its
//! own, which a replay re-executes on its own (its `subagent_linked` and its sub-agent turn
//! are re-issued as inputs), so its hooks are checked there.

mod report;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use mull_core::{Event, Role, TurnStatus, UIMessage, UIPart};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::error::EngineError;
use crate::session::{OutcomeStatus, Session, SessionOptions, TurnOptions, TurnOutcome};
use crate::tool::{schema_of, Tool, ToolError, ToolExecution, ToolOutput};
use crate::turn::parts::CallingParent;

use report::{Progress, Report, Reporting};

/// How deep sub-agents may nest unless a tool says otherwise: a sub-agent's sub-agent's
/// sub-agent, and no further.
pub const DEFAULT_MAX_DEPTH: u32 = 3;

/// What a child is told when its parent's call ended first because the parent was cancelled.
pub const PARENT_CANCELLED: &str = "the parent turn was cancelled";

/// What a child is told when its parent's call ended first for another reason (a stall).
pub const PARENT_CALL_ENDED: &str = "the parent's tool call ended before the sub-agent did";

/// Where a tool call runs (the type lives with tools, which sit below sessions).
pub(crate) use crate::tool::CallSite;

/// The parts of the session a call runs in, taken back from its call site.
fn calling_parent(site: &CallSite) -> Result<Arc<CallingParent>, ToolError> {
    Ok(Arc::clone(&site.session.inner.parent)
        .downcast::<CallingParent>()
        .map_err(|_| "the tool call does not run in a session")?)
}

/// The input of an agent tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct AgentInput {
    /// What to ask the sub-agent, as its user message.
    prompt: String,
}

/// A tool that runs `agent`'s turn as a child session (see the module docs).
pub struct AgentTool {
    name: String,
    description: String,
    agent: Arc<dyn Agent>,
    max_depth: u32,
}

impl AgentTool {
    /// A tool called `name` that asks `agent`, with the [`DEFAULT_MAX_DEPTH`].
    pub fn new(name: &str, description: &str, agent: Arc<dyn Agent>) -> AgentTool {
        AgentTool {
            name: name.to_owned(),
            description: description.to_owned(),
            agent,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }

    /// Bounds the nesting: a call that would run the child at a depth past `max_depth` (the
    /// child of a session nobody started is at depth 1) is a tool error, and nothing runs.
    pub fn with_max_depth(mut self, max_depth: u32) -> AgentTool {
        self.max_depth = max_depth;
        self
    }

    /// The tool behind an `Arc`, ready for a [`crate::ToolSet`].
    pub fn shared(self) -> Arc<dyn Tool> {
        Arc::new(self)
    }

    /// Opens the child session, links it and starts its turn.
    async fn start(
        &self,
        prompt: String,
        call: &ToolExecution,
        depth: u32,
    ) -> Result<Running, ToolError> {
        let site = &call.site;
        let parent = calling_parent(site)?;
        let options = &parent.options;
        // Under the parent's id, so it is unique in the log wherever the parent's is (a
        // deterministic id source counts per session) and names its place in the nesting.
        let child_id = format!(
            "{}.{}",
            parent.recorder.session_id(),
            options.ids.next_id("agent")
        );
        parent.recorder.append(
            Some(&site.turn_id),
            Event::SubagentStarted {
                step: call.step_number,
                call_id: call.call_id.clone(),
                tool: call.tool_name.clone(),
                agent: self.agent.name().to_owned(),
                child_session_id: child_id.clone(),
                depth,
            },
        )?;
        parent.recorder.flush().await?;
        let mut child_options = SessionOptions::new(child_id.clone())
            .with_clock(Arc::clone(&options.clock))
            .with_ids(Arc::clone(&options.ids))
            .with_retry_base_delay(options.retry_base_delay)
            .with_auto_continue(false);
        child_options.capture_content = options.capture_content;
        child_options.extensions = options.extensions.clone();
        // The call runs inside its `execute_tool` span: the child's turns are traced under it.
        child_options.trace_parent = Some(tracing::Span::current());
        let (reports, receiver) = mpsc::channel(1);
        child_options.outside = Arc::new(Reporting {
            outside: Arc::clone(&options.outside),
            reports,
        });
        let child = Session::open_on(
            parent.recorder.shared_log(),
            Arc::clone(&self.agent),
            child_options,
        )
        .await?;
        child.inner.recorder().append(
            None,
            Event::SubagentLinked {
                parent_session_id: parent.recorder.session_id().to_owned(),
                parent_turn_id: site.turn_id.clone(),
                parent_call_id: call.call_id.clone(),
                depth,
                // The parent's remainder is the child's budget.
                budget: crate::budget::remainder(&parent.recorder, &parent.config, &site.turn_id),
            },
        )?;
        let signal = CancellationToken::new();
        let message = UIMessage::user(options.ids.next_id("msg"), prompt);
        let chat = child.chat_as_subagent(
            vec![message],
            TurnOptions {
                signal: Some(signal.clone()),
                ..TurnOptions::default()
            },
        )?;
        Ok(Running {
            guard: CancelChild {
                child: child.clone(),
                request_id: chat.request_id.clone(),
                signal,
                parent_signal: call.cancel.clone(),
                done: false,
            },
            parent,
            turn_id: site.turn_id.clone(),
            call_id: call.call_id.clone(),
            agent: self.agent.name().to_owned(),
            child,
            // The parts a chat streams are not read: the child's progress comes as reports.
            done: Box::pin(chat.finish()),
            reports: receiver,
            unacknowledged: None,
            text: String::new(),
            tools: Vec::new(),
        })
    }
}

#[async_trait]
impl Tool for AgentTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Arc<Value> {
        schema_of::<AgentInput>()
    }

    fn is_streaming(&self) -> bool {
        true
    }

    async fn execute(&self, input: Value, call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        let AgentInput { prompt } = serde_json::from_value(input)?;
        let depth = call
            .site
            .session
            .inner
            .recorder
            .read(|s| s.parent.as_ref().map_or(0, |p| p.depth))
            + 1;
        if depth > self.max_depth {
            return Err(format!(
                "sub-agent {:?} not started: it would run at nesting depth {depth}, past the \
                 limit of {} set on tool {:?}",
                self.agent.name(),
                self.max_depth,
                self.name
            )
            .into());
        }
        let running = self.start(prompt, call, depth).await?;
        Ok(ToolOutput::Stream(progress(running)))
    }
}

/// A child turn in flight, as the parent's call follows it.
struct Running {
    guard: CancelChild,
    parent: Arc<CallingParent>,
    turn_id: String,
    call_id: String,
    agent: String,
    child: Session,
    /// The child's turn, to its end (its `on_chat_response` included).
    done: Pin<Box<dyn Future<Output = Result<TurnOutcome, EngineError>> + Send>>,
    reports: mpsc::Receiver<Report>,
    /// The last report handed out as a preliminary result: acknowledged when the parent asks
    /// for the next value, which is after it recorded this one.
    unacknowledged: Option<oneshot::Sender<()>>,
    /// The text of the child's latest step.
    text: String,
    /// The child's tool calls so far: `{call_id, tool, state}`.
    tools: Vec<Value>,
}

impl Running {
    /// Folds one report in.
    fn observe(&mut self, progress: Progress) {
        match progress {
            Progress::ToolStarted { call_id, tool } => self.tools.push(json!({
                "call_id": call_id,
                "tool": tool,
                "state": "running",
            })),
            Progress::ToolEnded { call_id, success } => {
                let found = self
                    .tools
                    .iter_mut()
                    .rev()
                    .find(|t| t["call_id"] == call_id.as_str());
                if let Some(tool) = found {
                    tool["state"] = json!(if success { "done" } else { "error" });
                }
            }
            Progress::StepText(text) => self.text = text,
        }
    }

    /// What the parent's client sees while the child runs.
    fn snapshot(&self) -> Value {
        json!({
            "session_id": self.child.id(),
            "agent": self.agent,
            "status": "running",
            "text": self.text,
            "tools": self.tools,
        })
    }

    /// The next thing to hand the parent: a snapshot after the child's next report, or the
    /// child's answer once its turn ended.
    async fn next(&mut self) -> Next {
        if let Some(recorded) = self.unacknowledged.take() {
            let _ = recorded.send(());
        }
        tokio::select! {
            biased;
            report = self.reports.recv() => match report {
                Some((progress, recorded)) => {
                    self.observe(progress);
                    self.unacknowledged = Some(recorded);
                    Next::Progress(self.snapshot())
                }
                // The child agent is gone with its session: only its end is left.
                None => Next::Done(self.finish().await),
            },
            outcome = &mut self.done => Next::Done(self.finished(outcome).await),
        }
    }

    async fn finish(&mut self) -> Result<Value, ToolError> {
        let outcome = (&mut self.done).await;
        self.finished(outcome).await
    }

    /// The child's turn ended: records `subagent_finished` in the parent and gives the answer.
    async fn finished(
        &mut self,
        outcome: Result<TurnOutcome, EngineError>,
    ) -> Result<Value, ToolError> {
        self.guard.done = true;
        let outcome = outcome?;
        let status = match outcome.status {
            OutcomeStatus::Completed | OutcomeStatus::Skipped => TurnStatus::Completed,
            OutcomeStatus::Error => TurnStatus::Error,
            OutcomeStatus::Aborted => TurnStatus::Aborted,
        };
        let usage = self.child.read_state(|s| s.usage.clone());
        let recorder = &self.parent.recorder;
        recorder.append(
            Some(&self.turn_id),
            Event::SubagentFinished {
                call_id: self.call_id.clone(),
                child_session_id: self.child.id().to_owned(),
                status,
                usage,
                spend: crate::budget::session_spend(
                    self.child.inner.recorder(),
                    self.child.inner.config(),
                ),
            },
        )?;
        recorder.flush().await?;
        // Nothing runs in the child any more: on a shared log (PostgreSQL) its lease is given
        // back now. A failure to give it back only makes it lapse at its time to live.
        let log = self.child.inner.recorder().shared_log();
        let _ = log.release_session(self.child.id()).await;
        match status {
            TurnStatus::Completed => Ok(Value::String(
                outcome
                    .message
                    .as_ref()
                    .map(last_step_text)
                    .unwrap_or_default(),
            )),
            _ => Err(format!(
                "sub-agent {:?} (session {}) ended as {}: {}",
                self.agent,
                self.child.id(),
                status.as_str(),
                outcome
                    .error
                    .map(|e| e.message)
                    .unwrap_or_else(|| "no error was given".to_owned())
            )
            .into()),
        }
    }
}

/// What the child's turn gives its parent next.
enum Next {
    Progress(Value),
    Done(Result<Value, ToolError>),
}

/// The parent call's stream: a snapshot per report of the child, then its answer.
fn progress(running: Running) -> BoxStream<'static, Result<Value, ToolError>> {
    futures::stream::unfold(Some(running), |state| async move {
        let mut running = state?;
        match running.next().await {
            Next::Progress(snapshot) => Some((Ok(snapshot), Some(running))),
            Next::Done(answer) => Some((answer, None)),
        }
    })
    .boxed()
}

/// The text of a message's last step: a sub-agent's answer, without what it said before its
/// last tool calls.
fn last_step_text(message: &UIMessage) -> String {
    if message.role != Role::Assistant {
        return String::new();
    }
    let last_step = message
        .parts
        .iter()
        .rposition(|p| matches!(p, UIPart::StepStart))
        .map_or(0, |i| i + 1);
    message.parts[last_step..]
        .iter()
        .filter_map(|p| match p {
            UIPart::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Cancels the child's turn, with a `cancellation_requested` saying why, when the parent's
/// call lets go of it before it ended (the stream is dropped).
struct CancelChild {
    child: Session,
    request_id: String,
    signal: CancellationToken,
    parent_signal: CancellationToken,
    done: bool,
}

impl Drop for CancelChild {
    fn drop(&mut self) {
        if self.done || self.signal.is_cancelled() {
            return;
        }
        let reason = if self.parent_signal.is_cancelled() {
            PARENT_CANCELLED
        } else {
            PARENT_CALL_ENDED
        };
        // Recorded and acted on through the child's one cancellation path; a child whose
        // request already ended has nothing to cancel. Appending can fail only when the log is
        // gone; the child then ends with it.
        if let Err(e) = self
            .child
            .inner
            .cancel_requests(Some(self.request_id.clone()), reason.to_owned())
        {
            tracing::warn!(error = %e, "a sub-agent's cancellation could not be recorded");
        }
        self.signal.cancel();
    }
}
