//! Re-execution replay: run an agent again over a recorded session and report the first event
//! that differs.
//!
//! A recorded session holds everything the outside world contributed to it: the user's
//! messages, the model's output, the tools' results, the clock's readings, the ids. A replay
//! serves all of those back from the recording and lets only the agent's *current* code
//! (its prompt, tools' schemas, hooks, stop conditions) decide again. If the new code decides
//! the same way, the replay writes the same events; the first event it writes differently is
//! the [`Divergence`] — the exact place where behaviour changed.
//!
//! What is served from where:
//! - **Model output** comes from the `model` argument, a [`LanguageModel`] that serves the
//!   recording's model steps (the providers crate's `ReplayModel`, built from the same
//!   envelopes). The engine takes it as an argument rather than building it, because models are
//!   the providers crate's business and dependencies point one way (providers do not depend on
//!   the engine, nor the engine on providers). Every model the agent names — its default, a
//!   `before_turn` / `before_step` override, a `resolve_model` answer — keeps its provider and
//!   model id (those are recorded facts) but streams from `model`. A step the recording cut
//!   short is served too (its request hash is in `step_configured`): the recorded parts, then
//!   the recorded error — or, for a cancelled step, nothing more until the recorded cancellation
//!   is re-issued, which happens when the call starts and before each part is read.
//! - **Tool results** come from the recording: a server tool keeps its name, description,
//!   schema and streaming-ness, but `execute` answers with the recorded preliminary values and
//!   outcome of the same call id (first in, first out when a call id repeats). That holds for
//!   the session's own tools (`update_context`, `search_messages`) as well: they do not run
//!   again; the context block writes a recorded call made are written again, once, as part of
//!   serving it, so they are compared like every other event (and a block is never written
//!   twice).
//! - **Time** comes from a [`RecordedClock`] that replays the recorded `at` values in order,
//!   plus the two readings the engine takes around each executed tool (chosen so the recorded
//!   `duration_ms` comes out again).
//! - **Ids** come from [`RecordedIds`], which hands out the recorded request, turn and message
//!   ids in order (a deterministic recording's counting ids are simply replayed as recorded).
//! - **Inputs** (user messages and their entry path — `save_messages`, `chat`, or `http` for a
//!   chat request that came in over the network — submissions, client tool results,
//!   continuations, regenerations, reopening the session) are re-issued through the session's
//!   entry paths at the point where the recording received them. A regeneration is re-issued
//!   from its `messages_retracted` event (or, when it retracted nothing, its `turn_started`),
//!   naming the message that makes `Session::regenerate` retract the same messages again, so
//!   the retraction is compared like every other event. A recorded cancellation is re-issued
//!   as soon as the replay has written every event that preceded it (from the next hook or
//!   tool call).
//! - **Crashes.** Where the recording shows a process that stopped with work in flight (a
//!   reopen finds a turn running, a submission unfinished, or a request whose turn never
//!   started), the replay re-enacts the stop: once it has written every event that process
//!   wrote, the work in flight parks at its next waiting point (a hook, a model part, a tool
//!   call) and is never resumed — its task is aborted when the next process starts or the
//!   replay ends, so it writes nothing more and holds nothing after — and the
//!   session is opened again, so recovery finishes the cut turn at stage `recovery` and re-runs
//!   submissions that were never applied, with the current code. A submission accepted but not
//!   applied before the stop is accepted again without running. A stop between two events the
//!   engine writes back to back (the user's messages and the turn's start, `turn_configured`
//!   and the first step, the saved answer and the turn's end) cannot be made by stopping where
//!   the engine waits: the replay fails with [`ReplayError::UnreachableStop`] naming it, rather
//!   than report a divergence no code change caused.
//!
//! Events are compared whole (turn id, time, version and payload), except `seq`, which belongs
//! to the database the replay writes into. The replay stops issuing inputs once it has
//! diverged, so one changed decision is reported once, not as a cascade.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use async_trait::async_trait;
use chrono::{DateTime, Duration as TimeDelta, Utc};
use futures::StreamExt;
use mull_core::{
    ChatErrorClassification, Clock, ContextBlockSource, EntryPath, Envelope, Event, IdSource,
    LanguageModel, ModelError, ModelRequest, ModelStream, Role, StreamPart, ToolPartState,
    TurnStatus, UIMessage,
};
use mull_store::{Log, SessionState, StoreError, SubmissionPhase};
use serde_json::Value;

use crate::agent::Agent;
use crate::config::{ModelChoice, StepConfig, TurnConfig};
use crate::context::{
    ChatErrorContext, ChatResponseResult, ChunkContext, PrepareStepContext, StepContext,
    ToolCallContext, ToolCallDecision, ToolCallResultContext, TurnContext,
};
use crate::context_blocks::write as write_block;
use crate::error::{ChatError, EngineError, HookResult};
use crate::extension::Extensions;
use crate::session::{
    ChatStream, ClientToolOutcome, Inner, Session, SessionOptions, SubmitOptions, TurnOptions,
    TurnOutcome,
};
use crate::session_config::SessionConfig;
use crate::tool::{Tool, ToolEntry, ToolError, ToolExecution, ToolOutput, ToolSet};

/// How many differing JSON paths a divergence lists before it stops.
const MAX_DIFF_LINES: usize = 16;
/// How many characters of a differing value a divergence shows.
const MAX_VALUE_CHARS: usize = 160;
/// Events read per page when the replayed session is read back.
const READ_PAGE: usize = 4096;

/// Why a replay could not run (as opposed to running and diverging).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// There is nothing to replay.
    #[error("the recording holds no events")]
    Empty,
    /// A recording is one session; this event belongs to another.
    #[error("the recording mixes sessions: seq {seq} belongs to {found:?}, the recording to {expected:?}")]
    MixedSessions {
        seq: u64,
        expected: String,
        found: String,
    },
    /// A recording must start where its session started.
    #[error("the recording starts at seq {seq} with {kind}, not with session_opened")]
    NoSessionStart { seq: u64, kind: String },
    /// The log to replay into already holds events of the session.
    #[error("the log already holds events of session {session_id}; replay into a fresh log")]
    SessionNotEmpty { session_id: String },
    /// The recording received an input this replay cannot re-issue.
    #[error("seq {seq}: {what} cannot be re-issued by a replay")]
    Unsupported { seq: u64, what: String },
    /// The recorded process stopped between two events the engine writes one right after the
    /// other: a replay can stop the work in flight only where it waits (a hook, a model part,
    /// a tool call), so it cannot leave the log where that process did.
    #[error("seq {seq}: the recorded process stopped right after {after}, but the engine writes {next} next without waiting in between; a replay can stop a turn only where it waits (a hook, a model part, a tool call)")]
    UnreachableStop {
        seq: u64,
        after: String,
        next: String,
    },
    /// The engine failed (not a failed turn: a failed turn is an event like any other).
    #[error("replaying: {0}")]
    Engine(#[source] Box<EngineError>),
    /// Reading or writing the log failed.
    #[error("replaying session {session_id}: {source}")]
    Store {
        session_id: String,
        #[source]
        source: StoreError,
    },
}

/// The events of one recorded session, in `seq` order.
#[derive(Debug, Clone)]
pub struct Recording {
    session_id: String,
    envelopes: Vec<Envelope>,
}

impl Recording {
    /// A recording of the session the first envelope belongs to. Every envelope must belong to
    /// it, and the first must be its `session_opened`.
    pub fn new(envelopes: Vec<Envelope>) -> Result<Recording, ReplayError> {
        let first = envelopes.first().ok_or(ReplayError::Empty)?;
        if !matches!(first.event, Event::SessionOpened { .. }) {
            return Err(ReplayError::NoSessionStart {
                seq: first.seq,
                kind: first.kind().to_owned(),
            });
        }
        let session_id = first.session_id.clone();
        if let Some(other) = envelopes.iter().find(|e| e.session_id != session_id) {
            return Err(ReplayError::MixedSessions {
                seq: other.seq,
                expected: session_id,
                found: other.session_id.clone(),
            });
        }
        Ok(Recording {
            session_id,
            envelopes,
        })
    }

    /// Reads one session of a log as a recording.
    pub fn read(
        reader: &mull_store::LogReader,
        session_id: &str,
    ) -> Result<Recording, ReplayError> {
        let store_err = |source| ReplayError::Store {
            session_id: session_id.to_owned(),
            source,
        };
        let envelopes = read_session(reader, session_id).map_err(store_err)?;
        Recording::new(envelopes)
    }

    /// The recorded session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The recorded events.
    pub fn envelopes(&self) -> &[Envelope] {
        &self.envelopes
    }

    /// A clock that replays this recording's readings.
    pub fn clock(&self) -> RecordedClock {
        RecordedClock::new(&self.envelopes)
    }

    /// An id source that replays this recording's ids.
    pub fn ids(&self) -> RecordedIds {
        RecordedIds::new(&self.envelopes)
    }
}

fn read_session(
    reader: &mull_store::LogReader,
    session_id: &str,
) -> Result<Vec<Envelope>, StoreError> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = reader.session_page(session_id, after, READ_PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        let full = page.len() == READ_PAGE;
        out.extend(page);
        if !full {
            break;
        }
    }
    Ok(out)
}

/// One reading the engine will take of the clock.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: DateTime<Utc>,
    /// Whether the reading stamps an appended event (else it times a tool).
    stamps_event: bool,
}

/// A clock that replays a recording's readings in order: one per recorded event (its `at`),
/// and, around each executed tool call, a start and an end reading `duration_ms` apart. Past
/// the end it keeps answering the last reading.
///
/// It also counts how many event stamps it has handed out, which is how many events the
/// replay has appended: the replay uses that to re-issue inputs at the recorded point.
#[derive(Debug)]
pub struct RecordedClock {
    readings: Vec<Reading>,
    /// `stamped[i]`: event stamps among the first `i` readings.
    stamped: Vec<usize>,
    next: AtomicUsize,
}

impl RecordedClock {
    fn new(envelopes: &[Envelope]) -> RecordedClock {
        let mut readings = Vec::with_capacity(envelopes.len());
        let stamp = |at| Reading {
            at,
            stamps_event: true,
        };
        let timing = |at| Reading {
            at,
            stamps_event: false,
        };
        // Executed calls whose end reading is still to come, by (turn, call id).
        let mut running: HashMap<(Option<&str>, &str), usize> = HashMap::new();
        for (i, envelope) in envelopes.iter().enumerate() {
            match &envelope.event {
                Event::ToolDecided {
                    call_id, action, ..
                } if action.executes() => {
                    readings.push(stamp(envelope.at));
                    let finished =
                        finished_after(envelopes, i, envelope.turn_id.as_deref(), call_id);
                    let started = finished
                        .map(|(at, duration_ms)| {
                            at - TimeDelta::milliseconds(i64::try_from(duration_ms).unwrap_or(0))
                        })
                        .unwrap_or(envelope.at);
                    readings.push(timing(started));
                    running.insert((envelope.turn_id.as_deref(), call_id), i);
                }
                Event::ToolCallFinished { call_id, .. } => {
                    if running
                        .remove(&(envelope.turn_id.as_deref(), call_id.as_str()))
                        .is_some()
                    {
                        readings.push(timing(envelope.at));
                    }
                    readings.push(stamp(envelope.at));
                }
                _ => readings.push(stamp(envelope.at)),
            }
        }
        let mut stamped = Vec::with_capacity(readings.len() + 1);
        let mut count = 0;
        stamped.push(0);
        for reading in &readings {
            count += usize::from(reading.stamps_event);
            stamped.push(count);
        }
        RecordedClock {
            readings,
            stamped,
            next: AtomicUsize::new(0),
        }
    }

    /// How many events have been stamped so far (readings past the recording count as events).
    pub fn events_stamped(&self) -> usize {
        let taken = self.next.load(Ordering::SeqCst);
        match self.stamped.get(taken) {
            Some(n) => *n,
            None => self.stamped.last().copied().unwrap_or(0) + (taken - self.readings.len()),
        }
    }
}

/// The `at` and `duration_ms` of the first `tool_call_finished` of `call_id` in `turn` after
/// position `from`.
fn finished_after(
    envelopes: &[Envelope],
    from: usize,
    turn: Option<&str>,
    call: &str,
) -> Option<(DateTime<Utc>, u64)> {
    envelopes[from..].iter().find_map(|e| match &e.event {
        Event::ToolCallFinished {
            call_id,
            duration_ms,
            ..
        } if call_id == call && e.turn_id.as_deref() == turn => Some((e.at, *duration_ms)),
        _ => None,
    })
}

impl Clock for RecordedClock {
    fn now(&self) -> DateTime<Utc> {
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        self.readings
            .get(i)
            .or(self.readings.last())
            .map(|r| r.at)
            .unwrap_or_default()
    }
}

/// An id source that hands out a recording's ids per prefix, in the order they first appear:
/// `req` (request ids), `turn` (turn ids), `msg` (assistant message ids), `sub` (submission
/// ids). Once a prefix's recorded ids run out, or for a prefix the recording shows none of, it
/// counts: `{prefix}_replay_1`, `{prefix}_replay_2` …
#[derive(Debug)]
pub struct RecordedIds {
    queues: Mutex<HashMap<String, VecDeque<String>>>,
    counters: Mutex<HashMap<String, u64>>,
}

impl RecordedIds {
    fn new(envelopes: &[Envelope]) -> RecordedIds {
        let mut queues: HashMap<String, VecDeque<String>> = HashMap::new();
        let mut seen: std::collections::HashSet<(&str, String)> = Default::default();
        let mut push = |prefix: &'static str, id: &str| {
            if seen.insert((prefix, id.to_owned())) {
                queues
                    .entry(prefix.to_owned())
                    .or_default()
                    .push_back(id.to_owned());
            }
        };
        for envelope in envelopes {
            match &envelope.event {
                Event::UserMessagesSaved {
                    request_id: Some(id),
                    ..
                }
                | Event::SubmissionApplied { request_id: id, .. } => push("req", id),
                Event::TurnStarted {
                    request_id,
                    message_id,
                    ..
                } => {
                    push("req", request_id);
                    if let Some(turn) = &envelope.turn_id {
                        push("turn", turn);
                    }
                    push("msg", message_id);
                }
                Event::TurnFailed {
                    request_id: Some(id),
                    ..
                }
                | Event::MessagesRetracted {
                    request_id: Some(id),
                    ..
                } => push("req", id),
                Event::SubmissionAccepted { submission_id, .. } => push("sub", submission_id),
                _ => {}
            }
        }
        RecordedIds {
            queues: Mutex::new(queues),
            counters: Mutex::new(HashMap::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl IdSource for RecordedIds {
    fn next_id(&self, prefix: &str) -> String {
        if let Some(id) = lock(&self.queues)
            .get_mut(prefix)
            .and_then(VecDeque::pop_front)
        {
            return id;
        }
        let mut counters = lock(&self.counters);
        let n = counters.entry(prefix.to_owned()).or_insert(0);
        *n += 1;
        format!("{prefix}_replay_{n}")
    }
}

/// What one recorded tool call produced.
#[derive(Debug, Clone)]
struct RecordedRun {
    preliminary: Vec<Value>,
    result: Result<Value, String>,
    /// The turn was cancelled while the call ran: the replayed call waits for the cancellation.
    aborted: bool,
    /// Context blocks the call wrote (the `update_context` tool), to write again.
    effects: Vec<BlockWrite>,
}

/// A context block write a tool call made, as recorded.
#[derive(Debug, Clone)]
struct BlockWrite {
    block: String,
    content: String,
    source: ContextBlockSource,
}

/// An executed call whose outcome is still to come while the recording is read.
#[derive(Debug, Default)]
struct OpenRun {
    preliminary: Vec<Value>,
    cancelled: bool,
    effects: Vec<BlockWrite>,
}

/// The recorded runs of every executed tool call, per call id, oldest first.
#[derive(Debug, Default)]
struct ToolRuns {
    runs: Mutex<HashMap<String, VecDeque<RecordedRun>>>,
}

impl ToolRuns {
    fn new(envelopes: &[Envelope]) -> ToolRuns {
        let mut runs: HashMap<String, VecDeque<RecordedRun>> = HashMap::new();
        // Executed calls still running, by (turn, call id).
        let mut open: HashMap<(Option<String>, String), OpenRun> = HashMap::new();
        for envelope in envelopes {
            let turn = envelope.turn_id.clone();
            match &envelope.event {
                Event::ToolDecided {
                    call_id, action, ..
                } if action.executes() => {
                    open.insert((turn, call_id.clone()), OpenRun::default());
                }
                Event::ContextBlockUpdated {
                    block,
                    content,
                    source,
                    call_id: Some(call_id),
                } => {
                    if let Some(run) = open.get_mut(&(turn, call_id.clone())) {
                        run.effects.push(BlockWrite {
                            block: block.clone(),
                            content: content.clone(),
                            source: *source,
                        });
                    }
                }
                Event::Chunk {
                    part:
                        StreamPart::ToolResult {
                            call_id,
                            output,
                            preliminary: true,
                            ..
                        },
                    ..
                } => {
                    if let Some(run) = open.get_mut(&(turn, call_id.clone())) {
                        run.preliminary.push(output.clone());
                    }
                }
                Event::CancellationRequested { .. } => {
                    for run in open.values_mut() {
                        run.cancelled = true;
                    }
                }
                Event::ToolCallFinished {
                    call_id,
                    success,
                    output,
                    error,
                    ..
                } => {
                    if let Some(run) = open.remove(&(turn, call_id.clone())) {
                        let result = if *success {
                            Ok(output.clone().unwrap_or(Value::Null))
                        } else {
                            Err(error.clone().unwrap_or_default())
                        };
                        runs.entry(call_id.clone())
                            .or_default()
                            .push_back(RecordedRun {
                                preliminary: run.preliminary,
                                aborted: run.cancelled && !success,
                                result,
                                effects: run.effects,
                            });
                    }
                }
                _ => {}
            }
        }
        ToolRuns {
            runs: Mutex::new(runs),
        }
    }

    fn take(&self, call_id: &str) -> Option<RecordedRun> {
        lock(&self.runs)
            .get_mut(call_id)
            .and_then(VecDeque::pop_front)
    }
}

/// A cancellation to re-issue once the replay has written `before` events.
#[derive(Debug, Clone)]
struct PendingCancel {
    before: usize,
    request_id: Option<String>,
    reason: String,
}

/// What the replay's agent, tools and driver share.
struct Shared {
    clock: Arc<RecordedClock>,
    model: Arc<dyn LanguageModel>,
    tools: ToolRuns,
    cancels: Mutex<VecDeque<PendingCancel>>,
    /// The session open now (cancellations go to it). Cleared when the replay ends, since the
    /// session's agent holds this.
    session: Mutex<Option<Session>>,
    /// Where a recorded process stopped with work in flight: how many events the recording
    /// holds before the reopen that recovered it (or before its end), oldest first.
    stops: Mutex<VecDeque<usize>>,
    /// Raised when a task of the replayed session reached the next stop and parked there.
    halted: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    /// A point where the replayed session waits (a hook, a model part, a tool): see
    /// [`Shared::stop_point`]; then recorded cancellations due are re-issued.
    async fn checkpoint(&self) {
        self.stop_point().await;
        self.cancel_due();
    }

    /// When the replay has written every event the recorded process wrote before it stopped,
    /// the calling task parks for good — that process never got further, so the replay must
    /// not either — and the driver is told.
    async fn stop_point(&self) {
        let stopped = lock(&self.stops)
            .front()
            .is_some_and(|at| self.clock.events_stamped() >= *at);
        if stopped {
            self.halted.send_replace(true);
            std::future::pending::<()>().await;
        }
    }

    /// Runs `work` to its end, or until the replayed process stops (`None`): what `work` was
    /// waiting for is then parked at the stop and never finishes.
    async fn unless_stopped<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        let mut halted = self.halted.subscribe();
        tokio::select! {
            biased;
            out = work => Some(out),
            _ = halted.wait_for(|h| *h) => None,
        }
    }

    /// The recorded process that stopped after `at` events is over; the next one starts.
    fn restart(&self, at: usize) {
        let mut stops = lock(&self.stops);
        while stops.front().is_some_and(|s| *s <= at) {
            stops.pop_front();
        }
        self.halted.send_replace(false);
    }

    /// Re-issues every recorded cancellation whose place in the log has been reached.
    fn cancel_due(&self) {
        let Some(session) = lock(&self.session).clone() else {
            return;
        };
        loop {
            let due = {
                let mut cancels = lock(&self.cancels);
                match cancels.front() {
                    Some(c) if c.before <= self.clock.events_stamped() => cancels.pop_front(),
                    _ => None,
                }
            };
            let Some(cancel) = due else { return };
            // A replay that already diverged may find nothing to cancel; the comparison says so.
            let _ = match &cancel.request_id {
                Some(id) => session.cancel_chat(id).map(|_| ()),
                None => session.abort_all(&cancel.reason).map(|_| ()),
            };
        }
    }

    /// `model` presented under the provider and id of the model the agent chose.
    fn present(self: &Arc<Self>, chosen: &Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        Arc::new(PresentedModel {
            provider: chosen.provider().to_owned(),
            model_id: chosen.model_id().to_owned(),
            shared: Arc::clone(self),
        })
    }

    /// `tools` with every server tool's execute answered from the recording. `session` is the
    /// session the tools belong to when they are its own (their recorded context block writes
    /// are written again there).
    fn wrap_tools(self: &Arc<Self>, tools: ToolSet, session: Option<&Arc<Inner>>) -> ToolSet {
        let mut out = ToolSet::new();
        for entry in tools.entries() {
            out.insert(match entry {
                ToolEntry::Server(tool) => ToolEntry::Server(Arc::new(RecordedTool {
                    tool: Arc::clone(tool),
                    shared: Arc::clone(self),
                    session: session.map(Arc::downgrade),
                })),
                ToolEntry::Client(spec) => ToolEntry::Client(spec.clone()),
            });
        }
        out
    }

    fn wrap_choice(self: &Arc<Self>, choice: Option<ModelChoice>) -> Option<ModelChoice> {
        match choice {
            Some(ModelChoice::Model(model)) => Some(ModelChoice::Model(self.present(&model))),
            other => other,
        }
    }
}

/// The model a recording was made with, by name, streaming from the replay's model. Recorded
/// cancellations due are re-issued when the call starts and before each part is read, so a
/// step the recording cancelled mid-call is cancelled at the same point.
struct PresentedModel {
    provider: String,
    model_id: String,
    shared: Arc<Shared>,
}

#[async_trait]
impl LanguageModel for PresentedModel {
    fn provider(&self) -> &str {
        &self.provider
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        self.shared.checkpoint().await;
        let serving = self.shared.model.stream(request).await?;
        let shared = Arc::clone(&self.shared);
        Ok(Box::pin(futures::stream::unfold(
            (serving, shared),
            |(mut serving, shared)| async move {
                shared.checkpoint().await;
                let item = serving.next().await?;
                Some((item, (serving, shared)))
            },
        )))
    }
}

/// A server tool whose execute answers with what the recorded call produced.
struct RecordedTool {
    tool: Arc<dyn Tool>,
    shared: Arc<Shared>,
    /// The session whose own tool this is, for writing recorded context block changes again.
    session: Option<Weak<Inner>>,
}

#[async_trait]
impl Tool for RecordedTool {
    fn name(&self) -> &str {
        self.tool.name()
    }

    fn description(&self) -> &str {
        self.tool.description()
    }

    fn input_schema(&self) -> Arc<Value> {
        self.tool.input_schema()
    }

    fn is_streaming(&self) -> bool {
        self.tool.is_streaming()
    }

    async fn execute(&self, _input: Value, call: &ToolExecution) -> Result<ToolOutput, ToolError> {
        self.shared.checkpoint().await;
        let Some(run) = self.shared.tools.take(&call.call_id) else {
            return Err(format!(
                "the recording holds no result for tool call {:?} ({}): it never ran there",
                call.call_id, call.tool_name
            )
            .into());
        };
        if run.aborted {
            call.cancel.cancelled().await;
        }
        if !run.effects.is_empty() {
            let inner = self
                .session
                .as_ref()
                .and_then(Weak::upgrade)
                .ok_or("the session replaying this tool call is closed")?;
            for effect in &run.effects {
                write_block(
                    &inner,
                    &effect.block,
                    &effect.content,
                    effect.source,
                    Some(call.call_id.clone()),
                )
                .await
                .map_err(|e| format!("writing context block {:?} again: {e}", effect.block))?;
            }
        }
        if !self.tool.is_streaming() {
            return match run.result {
                Ok(value) => Ok(ToolOutput::Value(value)),
                Err(error) => Err(error.into()),
            };
        }
        let mut items: Vec<Result<Value, ToolError>> =
            run.preliminary.into_iter().map(Ok).collect();
        if let Err(error) = run.result {
            items.push(Err(error.into()));
        }
        Ok(ToolOutput::Stream(futures::stream::iter(items).boxed()))
    }
}

/// The agent under replay: its own hooks, with recorded models and tools, and a point after
/// every observed event where recorded cancellations are re-issued.
struct ReplayAgent {
    agent: Arc<dyn Agent>,
    shared: Arc<Shared>,
}

#[async_trait]
impl Agent for ReplayAgent {
    fn name(&self) -> &str {
        self.agent.name()
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        self.shared.present(&self.agent.model())
    }

    fn tools(&self) -> ToolSet {
        self.shared.wrap_tools(self.agent.tools(), None)
    }

    fn system_prompt(&self) -> String {
        self.agent.system_prompt()
    }

    fn resolve_model(&self, model_id: &str) -> Option<Arc<dyn LanguageModel>> {
        self.agent
            .resolve_model(model_id)
            .map(|model| self.shared.present(&model))
    }

    fn max_steps(&self) -> u32 {
        self.agent.max_steps()
    }

    fn send_reasoning(&self) -> bool {
        self.agent.send_reasoning()
    }

    fn chat_stream_stall_timeout_ms(&self) -> u64 {
        self.agent.chat_stream_stall_timeout_ms()
    }

    fn max_retries(&self) -> u32 {
        self.agent.max_retries()
    }

    fn hook_timeout(&self) -> Option<std::time::Duration> {
        self.agent.hook_timeout()
    }

    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        self.agent.configure_session(session).await
    }

    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.shared.checkpoint().await;
        let mut config = self.agent.before_turn(ctx).await?;
        if let Some(config) = &mut config {
            config.model = self.shared.wrap_choice(config.model.take());
            config.tools = config.tools.take().map(|t| self.shared.wrap_tools(t, None));
        }
        Ok(config)
    }

    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        self.shared.checkpoint().await;
        let mut config = self.agent.before_step(ctx).await?;
        if let Some(config) = &mut config {
            config.model = self.shared.wrap_choice(config.model.take());
        }
        Ok(config)
    }

    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        self.shared.checkpoint().await;
        self.agent.before_tool_call(ctx).await
    }

    async fn after_tool_call(&self, ctx: &ToolCallResultContext) -> HookResult<()> {
        self.shared.checkpoint().await;
        self.agent.after_tool_call(ctx).await
    }

    async fn on_step_finish(&self, ctx: &StepContext) -> HookResult<()> {
        self.shared.checkpoint().await;
        self.agent.on_step_finish(ctx).await
    }

    async fn on_chunk(&self, ctx: &ChunkContext) -> HookResult<()> {
        self.shared.checkpoint().await;
        self.agent.on_chunk(ctx).await
    }

    async fn on_chat_response(&self, result: &ChatResponseResult) -> HookResult<()> {
        self.shared.stop_point().await;
        self.agent.on_chat_response(result).await
    }

    fn on_chat_error(&self, error: ChatError, ctx: &ChatErrorContext) -> ChatError {
        self.agent.on_chat_error(error, ctx)
    }

    fn classify_chat_error(
        &self,
        error: &ChatError,
        ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        self.agent.classify_chat_error(error, ctx)
    }
}

/// An input the recording received from outside the engine, to re-issue at its place.
#[derive(Debug, Clone)]
enum Input {
    /// The session was opened again (after the first time); its recovery re-ran the
    /// submissions `reruns` (accepted, never applied) in the background.
    Reopen {
        reruns: Vec<String>,
    },
    /// Messages through an entry path that saves them and runs a turn.
    Messages {
        entry: EntryPath,
        messages: Vec<UIMessage>,
        body: Value,
    },
    Submission {
        submission_id: String,
        idempotency_key: Option<String>,
        messages: Vec<UIMessage>,
        body: Value,
        /// The recorded process stopped before the submission was applied: only its
        /// acceptance is recorded again (a reopen's recovery runs it).
        accept_only: bool,
    },
    ContinueLastTurn {
        body: Value,
    },
    /// A regeneration that retracted `retracted` (in conversation order; empty when it
    /// retracted nothing) before its turn ran.
    Regenerate {
        retracted: Vec<String>,
        body: Value,
    },
    ClientToolResult {
        call_id: String,
        outcome: ClientToolOutcome,
    },
}

/// Where the recorded process stopped with work in flight — a request whose messages were in
/// but whose turn had not started, a turn still running, a submission not finished, which the
/// next reopen's recovery resolves — as the number of events before that reopen (or before the
/// recording's end, when it was never reopened). Recovery's own reading of the session (the
/// projection) decides what was running.
fn stops(recording: &Recording) -> Vec<usize> {
    let unfinished = |s: &SessionState| {
        s.turns.iter().any(|t| t.status == TurnStatus::Running)
            || s.submissions
                .iter()
                .any(|sub| sub.phase != SubmissionPhase::Finished)
    };
    let mut state = SessionState::new(recording.session_id.clone());
    // A request whose messages were saved (or, for a regeneration, retracted) before its turn.
    let mut awaiting_turn: Option<&str> = None;
    let mut out = Vec::new();
    for (i, envelope) in recording.envelopes.iter().enumerate() {
        if i > 0
            && matches!(envelope.event, Event::SessionOpened { .. })
            && (awaiting_turn.is_some() || unfinished(&state))
        {
            out.push(i);
            awaiting_turn = None;
        }
        match &envelope.event {
            Event::UserMessagesSaved {
                request_id: Some(id),
                ..
            }
            | Event::MessagesRetracted {
                request_id: Some(id),
                ..
            } => awaiting_turn = Some(id),
            Event::TurnStarted { request_id, .. } if awaiting_turn == Some(request_id) => {
                awaiting_turn = None
            }
            Event::TurnFailed {
                request_id: Some(id),
                ..
            } if awaiting_turn == Some(id) => awaiting_turn = None,
            _ => {}
        }
        state.apply(envelope);
    }
    if awaiting_turn.is_some() || unfinished(&state) {
        out.push(recording.envelopes.len());
    }
    out
}

/// The submissions a reopen at `at` finds accepted but never applied (which its recovery
/// runs), in the order recovery takes them.
fn accepted_at(recording: &Recording, at: usize) -> Vec<String> {
    let mut state = SessionState::new(recording.session_id.clone());
    for envelope in &recording.envelopes[..at] {
        state.apply(envelope);
    }
    state
        .submissions
        .iter()
        .filter(|sub| sub.phase == SubmissionPhase::Accepted)
        .map(|sub| sub.submission_id.clone())
        .collect()
}

/// The recording's inputs, each with the number of events that preceded it.
fn inputs(recording: &Recording) -> Result<Vec<(usize, Input)>, ReplayError> {
    let envelopes = &recording.envelopes;
    let stops = stops(recording);
    let applied_at = |submission: &str| {
        envelopes.iter().position(|e| {
            matches!(&e.event, Event::SubmissionApplied { submission_id, .. } if submission_id == submission)
        })
    };
    let started = |request: &str| {
        envelopes.iter().find_map(|e| match &e.event {
            Event::TurnStarted {
                request_id,
                entry,
                body,
                ..
            } if request_id == request => Some((*entry, body.clone())),
            _ => None,
        })
    };
    let submitted: std::collections::HashSet<&str> = envelopes
        .iter()
        .filter_map(|e| match &e.event {
            Event::SubmissionApplied { request_id, .. } => Some(request_id.as_str()),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    let mut saved: std::collections::HashSet<&str> = Default::default();
    let mut retracted_by: std::collections::HashSet<&str> = Default::default();
    for (i, envelope) in envelopes.iter().enumerate() {
        let input = match &envelope.event {
            Event::MessagesRetracted {
                request_id,
                message_ids,
            } => {
                let request = request_id.as_deref().unwrap_or_default();
                let Some((EntryPath::Regenerate, body)) = started(request) else {
                    return Err(ReplayError::Unsupported {
                        seq: envelope.seq,
                        what: "a retraction no regeneration's turn followed".to_owned(),
                    });
                };
                retracted_by.insert(request);
                Input::Regenerate {
                    retracted: message_ids.clone(),
                    body,
                }
            }
            Event::TurnStarted {
                request_id,
                entry: EntryPath::Regenerate,
                attempt: 0,
                body,
                ..
            } if !retracted_by.contains(request_id.as_str()) => Input::Regenerate {
                retracted: Vec::new(),
                body: body.clone(),
            },
            Event::SessionOpened { .. } if i > 0 => Input::Reopen {
                reruns: if stops.contains(&i) {
                    accepted_at(recording, i)
                } else {
                    Vec::new()
                },
            },
            Event::UserMessagesSaved {
                request_id,
                messages,
            } => {
                let request = request_id.as_deref().unwrap_or_default();
                if submitted.contains(request) {
                    continue;
                }
                saved.insert(request);
                let (entry, body) =
                    started(request).unwrap_or((EntryPath::SaveMessages, Value::Null));
                if !matches!(
                    entry,
                    EntryPath::SaveMessages | EntryPath::Chat | EntryPath::Http
                ) {
                    return Err(ReplayError::Unsupported {
                        seq: envelope.seq,
                        what: format!("a turn entered through {entry:?}"),
                    });
                }
                Input::Messages {
                    entry,
                    messages: messages.clone(),
                    body,
                }
            }
            Event::SubmissionAccepted {
                submission_id,
                idempotency_key,
                messages,
                body,
            } => Input::Submission {
                submission_id: submission_id.clone(),
                idempotency_key: idempotency_key.clone(),
                messages: messages.clone(),
                body: body.clone(),
                accept_only: stops.iter().find(|at| **at > i).is_some_and(|stop| {
                    applied_at(submission_id).is_none_or(|applied| applied > *stop)
                }),
            },
            Event::TurnStarted {
                request_id,
                entry: EntryPath::ContinueLastTurn,
                attempt: 0,
                body,
                ..
            } if !saved.contains(request_id.as_str()) => {
                Input::ContinueLastTurn { body: body.clone() }
            }
            Event::ClientToolResult {
                call_id,
                state,
                output,
                error,
                ..
            } => Input::ClientToolResult {
                call_id: call_id.clone(),
                outcome: match state {
                    ToolPartState::OutputAvailable => {
                        ClientToolOutcome::Output(output.clone().unwrap_or(Value::Null))
                    }
                    _ => ClientToolOutcome::Error(error.clone()),
                },
            },
            _ => continue,
        };
        out.push((i, input));
    }
    Ok(out)
}

/// The message to name in `Session::regenerate` so that it retracts `retracted` from the
/// session's conversation as it stands: the first retracted message when it is an answer (it
/// and what follows go), else the user message right before it (what follows that goes).
/// `Some(None)` when nothing was retracted (the last message was a question); `None` when the
/// conversation does not hold the first retracted message.
fn regeneration_target(session: &Session, retracted: &[String]) -> Option<Option<String>> {
    let Some(first) = retracted.first() else {
        return Some(None);
    };
    session.read_state(|s| {
        let at = s.messages.iter().position(|m| &m.id == first)?;
        if s.messages[at].role == Role::Assistant {
            return Some(Some(first.clone()));
        }
        let before = at.checked_sub(1)?;
        Some(Some(s.messages[before].id.clone()))
    })
}

fn cancellations(recording: &Recording) -> VecDeque<PendingCancel> {
    recording
        .envelopes
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.event {
            Event::CancellationRequested { request_id, reason } => Some(PendingCancel {
                before: i,
                request_id: request_id.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// What to replay with beyond the agent and the model.
#[derive(Clone, Default)]
pub struct ReplayOptions {
    /// Extensions to load, as the recorded session had them.
    pub extensions: Extensions,
}

/// The first event where a replay differs from its recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// Position in the session (0 = its `session_opened`).
    pub index: usize,
    /// The recorded event's `seq` (or, when the recording ended first, the replayed one's).
    pub seq: u64,
    /// The recorded event; `None` when the replay wrote more events than were recorded.
    pub expected: Option<Envelope>,
    /// The replayed event; `None` when the replay wrote fewer events than were recorded.
    pub actual: Option<Envelope>,
}

impl Divergence {
    /// The differing JSON paths, `path: expected ≠ actual` (`seq` is not compared).
    pub fn differences(&self) -> Vec<String> {
        let expected = self
            .expected
            .as_ref()
            .map(comparable)
            .unwrap_or(Value::Null);
        let actual = self.actual.as_ref().map(comparable).unwrap_or(Value::Null);
        let mut lines = Vec::new();
        diff_into("", &expected, &actual, &mut lines);
        lines
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = |e: &Option<Envelope>| {
            e.as_ref()
                .map(|e| e.kind().to_owned())
                .unwrap_or_else(|| "nothing".to_owned())
        };
        write!(
            f,
            "first divergence at seq {} (event {} of the session): expected {}, got {}",
            self.seq,
            self.index + 1,
            kind(&self.expected),
            kind(&self.actual)
        )?;
        if self.expected.is_none() || self.actual.is_none() {
            let (label, shown) = match (&self.expected, &self.actual) {
                (Some(e), None) => ("missing", e),
                (None, Some(a)) => ("extra", a),
                _ => return Ok(()),
            };
            return write!(f, "\n  {label}: {}", clip(&comparable(shown).to_string()));
        }
        let lines = self.differences();
        write!(f, "\n  expected → actual:")?;
        for line in lines.iter().take(MAX_DIFF_LINES) {
            write!(f, "\n  {line}")?;
        }
        if lines.len() > MAX_DIFF_LINES {
            write!(
                f,
                "\n  … and {} more differences",
                lines.len() - MAX_DIFF_LINES
            )?;
        }
        Ok(())
    }
}

/// How a replay went.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    pub session_id: String,
    /// How many events the recording holds.
    pub expected_events: usize,
    /// The events the replay wrote.
    pub actual: Vec<Envelope>,
    /// The first difference; `None` means the replay wrote exactly the recording.
    pub divergence: Option<Divergence>,
}

impl ReplayReport {
    /// Whether the replay wrote exactly the recorded events.
    pub fn is_identical(&self) -> bool {
        self.divergence.is_none()
    }
}

/// An envelope as compared: everything but `seq`.
fn comparable(envelope: &Envelope) -> Value {
    let mut value = serde_json::to_value(envelope).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("seq");
    }
    value
}

/// The first position where `actual` differs from `expected`, looking only at the events
/// both have when `complete` is false (the replay is still running).
fn first_divergence(
    expected: &[Envelope],
    actual: &[Envelope],
    complete: bool,
) -> Option<Divergence> {
    let common = expected.len().min(actual.len());
    for i in 0..common {
        if comparable(&expected[i]) != comparable(&actual[i]) {
            return Some(Divergence {
                index: i,
                seq: expected[i].seq,
                expected: Some(expected[i].clone()),
                actual: Some(actual[i].clone()),
            });
        }
    }
    if !complete || expected.len() == actual.len() {
        return None;
    }
    let expected_at = expected.get(common).cloned();
    let actual_at = actual.get(common).cloned();
    let seq = expected_at
        .as_ref()
        .or(actual_at.as_ref())
        .map(|e| e.seq)
        .unwrap_or_default();
    Some(Divergence {
        index: common,
        seq,
        expected: expected_at,
        actual: actual_at,
    })
}

/// Runs `agent` again over `recording` into `log` (which must hold nothing of the recorded
/// session), with model output from `model`, and compares what it writes with what was
/// recorded. See the module docs for what is served from where.
pub async fn reexecute(
    log: &Log,
    agent: Arc<dyn Agent>,
    model: Arc<dyn LanguageModel>,
    recording: &Recording,
    options: ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let session_id = recording.session_id.clone();
    let store_err = |source| ReplayError::Store {
        session_id: session_id.clone(),
        source,
    };
    log.flush().await.map_err(store_err)?;
    let reader = log.reader().map_err(store_err)?;
    if !reader
        .session_page(&session_id, 0, 1)
        .map_err(store_err)?
        .is_empty()
    {
        return Err(ReplayError::SessionNotEmpty { session_id });
    }
    let inputs = inputs(recording)?;
    let clock = Arc::new(recording.clock());
    let shared = Arc::new(Shared {
        clock: Arc::clone(&clock),
        model,
        tools: ToolRuns::new(&recording.envelopes),
        cancels: Mutex::new(cancellations(recording)),
        session: Mutex::new(None),
        stops: Mutex::new(stops(recording).into()),
        halted: tokio::sync::watch::channel(false).0,
    });
    let replay_agent: Arc<dyn Agent> = Arc::new(ReplayAgent {
        agent,
        shared: Arc::clone(&shared),
    });
    let metadata = match &recording.envelopes[0].event {
        Event::SessionOpened { metadata, .. } => metadata.clone(),
        _ => Value::Null,
    };
    let auto_continue = recording.envelopes.iter().any(|e| {
        matches!(
            e.event,
            Event::TurnStarted {
                entry: EntryPath::AutoContinue,
                ..
            }
        )
    });
    let mut session_options = SessionOptions::new(session_id.clone())
        .with_clock(clock.clone())
        .with_ids(Arc::new(recording.ids()))
        .with_auto_continue(auto_continue);
    session_options.metadata = metadata;
    session_options.extensions = options.extensions;
    let serving = Arc::clone(&shared);
    session_options.serve_session_tools = Some(Arc::new(move |inner, tools| {
        serving.wrap_tools(tools, Some(inner))
    }));
    let driven = drive(
        log,
        &reader,
        recording,
        inputs,
        &shared,
        replay_agent,
        session_options,
    )
    .await;
    // The session's agent holds `shared`: let go of the session, and stop the work a re-enacted
    // stop left parked, so neither outlives the replay.
    if let Some(session) = lock(&shared.session).take() {
        session.abort_background_turns();
    }
    driven?;
    log.flush().await.map_err(store_err)?;
    let actual = read_session(&reader, &session_id).map_err(store_err)?;
    let divergence = first_divergence(&recording.envelopes, &actual, true);
    if let Some(error) = divergence
        .as_ref()
        .and_then(|d| unreachable_stop(&shared, recording, d))
    {
        return Err(error);
    }
    Ok(ReplayReport {
        session_id,
        expected_events: recording.envelopes.len(),
        actual,
        divergence,
    })
}

/// Re-issues the recording's inputs, each at its place, into the session opened with
/// `options`, until they run out or the replay diverges.
///
/// Where the recorded process stopped with work in flight, the work in flight parks at its
/// next waiting point once the replay has written every event that process wrote (see
/// [`Shared::stop_point`]), and the driver stops waiting for it: the next input is the reopen
/// that recovered it, and a fresh session is opened, as the recording's next process did.
async fn drive(
    log: &Log,
    reader: &mull_store::LogReader,
    recording: &Recording,
    inputs: Vec<(usize, Input)>,
    shared: &Arc<Shared>,
    agent: Arc<dyn Agent>,
    options: SessionOptions,
) -> Result<(), ReplayError> {
    let session_id = &recording.session_id;
    let store_err = |source| ReplayError::Store {
        session_id: session_id.clone(),
        source,
    };
    let engine_err = |source| ReplayError::Engine(Box::new(source));
    let open = || async {
        let session = Session::open(log, Arc::clone(&agent), options.clone())
            .await
            .map_err(engine_err)?;
        *lock(&shared.session) = Some(session.clone());
        Ok::<Session, ReplayError>(session)
    };
    let mut session = open().await?;

    for (before, input) in inputs {
        log.flush().await.map_err(store_err)?;
        let so_far = read_session(reader, session_id).map_err(store_err)?;
        if let Some(divergence) = first_divergence(&recording.envelopes, &so_far, false) {
            return unreachable_stop(shared, recording, &divergence).map_or(Ok(()), Err);
        }
        if so_far.len() > before {
            // The agent's own hooks already issued it (e.g. from on_chat_response).
            continue;
        }
        shared.cancel_due();
        match input {
            Input::Reopen { reruns } => {
                // The process before this one is over, and whatever it left parked with it.
                session.abort_background_turns();
                shared.restart(before);
                drop(session);
                session = open().await?;
                for submission_id in reruns {
                    let rerun = shared.unless_stopped(session.wait_submission(&submission_id));
                    if let Some(result) = rerun.await {
                        result.map_err(engine_err)?;
                    }
                }
            }
            Input::Messages {
                entry,
                messages,
                body,
            } => {
                let opts = TurnOptions::with_body(body);
                if matches!(entry, EntryPath::Chat | EntryPath::Http) {
                    let stream = if entry == EntryPath::Http {
                        session.chat_http(messages, opts)
                    } else {
                        session.chat(messages, opts)
                    };
                    let stream = stream.map_err(engine_err)?;
                    if let Some(outcome) = shared.unless_stopped(drain(stream)).await {
                        outcome.map_err(engine_err)?;
                    }
                } else if let Some(outcome) = shared
                    .unless_stopped(session.save_messages(messages, opts))
                    .await
                {
                    outcome.map_err(engine_err)?;
                }
            }
            Input::Submission {
                submission_id,
                idempotency_key,
                messages,
                body,
                accept_only: true,
            } => {
                // The recorded process stopped before this submission's run wrote anything (it
                // waited for the turn lock, or had not got to it): the acceptance is all there
                // is to write, exactly as `submit_messages` writes it.
                let inner = &session.inner;
                inner
                    .recorder
                    .append(
                        None,
                        Event::SubmissionAccepted {
                            submission_id,
                            idempotency_key,
                            messages,
                            body,
                        },
                    )
                    .map_err(engine_err)?;
                inner.recorder.flush().await.map_err(engine_err)?;
            }
            Input::Submission {
                submission_id,
                idempotency_key,
                messages,
                body,
                accept_only: false,
            } => {
                let receipt = session
                    .submit_messages(
                        messages,
                        SubmitOptions {
                            submission_id: Some(submission_id),
                            idempotency_key,
                            body,
                        },
                    )
                    .await
                    .map_err(engine_err)?;
                let waited = shared.unless_stopped(session.wait_submission(&receipt.submission_id));
                if let Some(result) = waited.await {
                    result.map_err(engine_err)?;
                }
            }
            Input::ContinueLastTurn { body } => {
                let opts = TurnOptions::with_body(body);
                if let Some(outcome) = shared
                    .unless_stopped(session.continue_last_turn(opts))
                    .await
                {
                    outcome.map_err(engine_err)?;
                }
            }
            Input::Regenerate { retracted, body } => {
                let Some(target) = regeneration_target(&session, &retracted) else {
                    // The replayed conversation no longer holds what the recording retracted:
                    // it has diverged, and the comparison says where.
                    break;
                };
                let stream = session
                    .regenerate(target.as_deref(), TurnOptions::with_body(body))
                    .map_err(engine_err)?;
                if let Some(outcome) = shared.unless_stopped(drain(stream)).await {
                    outcome.map_err(engine_err)?;
                }
            }
            Input::ClientToolResult { call_id, outcome } => {
                if let Some(result) = shared
                    .unless_stopped(session.add_tool_result(&call_id, outcome))
                    .await
                {
                    result.map_err(engine_err)?;
                }
            }
        }
    }
    Ok(())
}

/// A divergence that is no change of behaviour but a stop the replay could not make: the
/// replay went on writing, without waiting, past the point where the recorded process stopped
/// (the reopen that followed it, or the recording's end).
fn unreachable_stop(
    shared: &Shared,
    recording: &Recording,
    divergence: &Divergence,
) -> Option<ReplayError> {
    let at_stop = lock(&shared.stops).front() == Some(&divergence.index);
    let reopened = divergence
        .expected
        .as_ref()
        .is_none_or(|e| matches!(e.event, Event::SessionOpened { .. }));
    let next = divergence.actual.as_ref()?;
    let last = recording.envelopes.get(divergence.index.checked_sub(1)?)?;
    (at_stop && reopened).then(|| ReplayError::UnreachableStop {
        seq: last.seq,
        after: last.kind().to_owned(),
        next: next.kind().to_owned(),
    })
}

/// Reads a chat stream to its end, then its outcome.
async fn drain(mut stream: ChatStream) -> Result<TurnOutcome, EngineError> {
    while stream.next().await.is_some() {}
    stream.finish().await
}

fn diff_into(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    let sub = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (expected, actual) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().collect();
            keys.extend(b.keys().filter(|k| !a.contains_key(*k)));
            for key in keys {
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff_into(&sub(key), x, y, out),
                    (Some(x), None) => {
                        out.push(format!("{}: {} ≠ (absent)", sub(key), clip(&x.to_string())))
                    }
                    (None, Some(y)) => {
                        out.push(format!("{}: (absent) ≠ {}", sub(key), clip(&y.to_string())))
                    }
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let at = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => diff_into(&at, x, y, out),
                    (Some(x), None) => {
                        out.push(format!("{at}: {} ≠ (absent)", clip(&x.to_string())))
                    }
                    (None, Some(y)) => {
                        out.push(format!("{at}: (absent) ≠ {}", clip(&y.to_string())))
                    }
                    (None, None) => {}
                }
            }
        }
        (a, b) if a == b => {}
        (a, b) => {
            let at = if path.is_empty() { "(event)" } else { path };
            out.push(format!(
                "{at}: {} ≠ {}",
                clip(&a.to_string()),
                clip(&b.to_string())
            ));
        }
    }
}

fn clip(text: &str) -> String {
    if text.chars().count() <= MAX_VALUE_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::{DecisionAction, FixedClock, EVENT_VERSION};
    use serde_json::json;

    fn envelope(seq: u64, turn: Option<&str>, at_ms: i64, event: Event) -> Envelope {
        let epoch = FixedClock::at_fixture_epoch().now();
        Envelope {
            seq,
            session_id: "s".into(),
            turn_id: turn.map(str::to_owned),
            at: epoch + TimeDelta::milliseconds(at_ms),
            v: EVENT_VERSION,
            event,
        }
    }

    fn decided(call: &str, action: DecisionAction) -> Event {
        Event::ToolDecided {
            step: 0,
            call_id: call.into(),
            tool: "t".into(),
            action,
            model_input: json!({}),
            effective_input: json!({}),
            reason: None,
            output: None,
        }
    }

    fn finished(call: &str, duration_ms: u64) -> Event {
        Event::ToolCallFinished {
            step: 0,
            call_id: call.into(),
            tool: "t".into(),
            success: true,
            output: Some(json!(1)),
            error: None,
            duration_ms,
        }
    }

    #[test]
    fn the_clock_replays_stamps_and_brackets_executed_tools_by_their_duration() {
        let log = vec![
            envelope(
                1,
                None,
                0,
                Event::SessionOpened {
                    agent: "a".into(),
                    metadata: Value::Null,
                },
            ),
            envelope(2, Some("t1"), 10, decided("c1", DecisionAction::Allow)),
            envelope(3, Some("t1"), 50, finished("c1", 30)),
            envelope(4, Some("t1"), 60, decided("c2", DecisionAction::Block)),
            envelope(5, Some("t1"), 70, finished("c2", 0)),
        ];
        let clock = RecordedClock::new(&log);
        let ms = |d: DateTime<Utc>| (d - log[0].at).num_milliseconds();
        assert_eq!(ms(clock.now()), 0);
        assert_eq!(ms(clock.now()), 10);
        assert_eq!(clock.events_stamped(), 2);
        let started = clock.now();
        let ended = clock.now();
        assert_eq!((ended - started).num_milliseconds(), 30);
        assert_eq!(clock.events_stamped(), 2, "tool timing is not an event");
        assert_eq!(ms(clock.now()), 50);
        assert_eq!(ms(clock.now()), 60);
        assert_eq!(ms(clock.now()), 70);
        assert_eq!(ms(clock.now()), 70, "past the end it stays put");
        assert_eq!(clock.events_stamped(), 6);
    }

    #[test]
    fn ids_replay_in_order_per_prefix_then_count() {
        let log = vec![envelope(
            1,
            Some("turn_x"),
            0,
            Event::TurnStarted {
                request_id: "req_a".into(),
                message_id: "msg_a".into(),
                entry: EntryPath::SaveMessages,
                continuation: false,
                attempt: 0,
                body: Value::Null,
            },
        )];
        let ids = RecordedIds::new(&log);
        assert_eq!(ids.next_id("req"), "req_a");
        assert_eq!(ids.next_id("turn"), "turn_x");
        assert_eq!(ids.next_id("msg"), "msg_a");
        assert_eq!(ids.next_id("msg"), "msg_replay_1");
        assert_eq!(ids.next_id("summary"), "summary_replay_1");
    }

    #[test]
    fn a_divergence_names_seq_kinds_and_paths() {
        let expected = vec![envelope(
            7,
            Some("t"),
            0,
            decided("c", DecisionAction::Block),
        )];
        let actual = vec![envelope(
            1,
            Some("t"),
            0,
            decided("c", DecisionAction::Allow),
        )];
        let d = first_divergence(&expected, &actual, true).expect("differs");
        assert_eq!((d.index, d.seq), (0, 7));
        assert_eq!(d.differences(), vec![r#"event.action: "block" ≠ "allow""#]);
        let text = d.to_string();
        assert!(
            text.contains("seq 7") && text.contains("expected tool_decided, got tool_decided"),
            "{text}"
        );
        let shorter = first_divergence(&expected, &[], true).expect("missing event");
        assert!(shorter.actual.is_none() && shorter.to_string().contains("got nothing"));
        assert!(first_divergence(&expected, &[], false).is_none());
    }
}
