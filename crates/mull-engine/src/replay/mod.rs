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
//! The agent runs as it is: the recording reaches the session only through what a session
//! takes from outside anyway — its outside world ([`crate::outside`]: models, tools, hook
//! points), its clock, its ids and its inputs. What is served from where:
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
//!   the session's own tools (`update_context`, `search_messages`) and MCP servers' tools as
//!   well (a replay lists an MCP server's tools, since their schemas are part of the code under
//!   test, but never calls one): they do not run
//!   again; the context block writes a recorded call made are written again, once, as part of
//!   serving it, so they are compared like every other event (and a block is never written
//!   twice). A sub-agent's link events (`subagent_started`, `subagent_finished`) are written
//!   again the same way, each at its place among the call's preliminary values; the child
//!   session is not re-run (it is re-executed from its own recording, where its
//!   `subagent_linked` is written again before its requested turn). A call the recorded
//!   process never finished writes what it had written and parks at the stop.
//! - **Time** comes from a [`RecordedClock`] that serves the recorded `at` values in order, one
//!   per event. An executed tool's `duration_ms` is served with its recorded outcome (timing
//!   the replayed call uses up no stamp), so nothing imitates how the engine reads the clock.
//! - **Ids** come from [`RecordedIds`], which hands out the recorded request, turn and message
//!   ids in order (a deterministic recording's counting ids are simply replayed as recorded).
//! - **Inputs** are the recording's input events (`turn_requested`, `submission_accepted`,
//!   `client_tool_result`, `cancellation_requested`: see `mull_core::input`), re-issued through
//!   [`Session::command`] at the point where the recording appended them, so the session
//!   appends them again and acts on them exactly as it did. Nothing is inferred from what
//!   followed. A recorded cancellation lands inside a running turn, so it is re-issued as soon
//!   as the replay has written every event that preceded it (from the next hook or tool call).
//!   Before anything runs, the inputs are checked: a turn that no input requested before it
//!   is refused naming its seq ([`ReplayError::BadInput`]), as is an input no caller can make;
//!   a log written before inputs were events is refused naming its format
//!   ([`ReplayError::NoInputEvents`]) — it stays readable by every reader.
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
//! - **Delivery marks** (`response_owed` on a turn's end, `chat_response_delivered` after its
//!   `on_chat_response`) are made as the recording made them
//!   ([`Recording::marks_deliveries`]): a log written before deliveries were recorded, or by a
//!   session that opted out, re-executes without them rather than diverge at its first turn's
//!   end over bookkeeping the code under test did not decide.
//!
//! Events are compared whole (turn id, time, version and payload), except `seq`, which belongs
//! to the database the replay writes into. The replay stops issuing inputs once it has
//! diverged, so one changed decision is reported once, not as a cascade.

pub mod backtest;
mod divergence;
mod inputs;
mod recording;
mod served;
#[cfg(test)]
mod tests;
mod tools;
mod world;

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{FutureExt, StreamExt};
use mull_core::{EntryPath, Event, Input, LanguageModel};
use mull_store::{Log, StoreError};
use serde_json::Value;

use crate::agent::Agent;
use crate::error::EngineError;
use crate::extension::Extensions;
use crate::session::{ChatStream, CommandOptions, Reply, Session, SessionOptions, TurnOutcome};
use crate::tool::{ToolEntry, ToolSet};

use divergence::first_divergence;
use inputs::{cancellations, steps, stops, Step};
use recording::read_session;
use tools::{PresentedModel, RecordedTool, ToolRuns};
use world::Recorded;

pub use backtest::{
    backtest, BacktestError, BacktestOptions, BacktestReport, BacktestSummary, Decision,
    DecisionChange, ServeModel, SessionBacktest, Stop, StopKind, ToolSummary,
};
pub use divergence::{Divergence, ReplayReport};
pub use recording::Recording;
pub use served::{RecordedClock, RecordedIds};
/// Events read per page when the replayed session is read back.
const READ_PAGE: usize = 4096;

/// Why a replay could not run (as opposed to running and diverging).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The recording was made by another agent than the one given: its decisions would differ
    /// for that reason alone, so nothing is run.
    #[error("session {session_id} was recorded by agent {recorded:?}, and the replay was given agent {given:?}; re-execute it with the agent that recorded it")]
    OtherAgent {
        session_id: String,
        recorded: String,
        given: String,
    },
    /// The log to replay into already holds events of the session.
    #[error("the log already holds events of session {session_id}; replay into a fresh log")]
    SessionNotEmpty { session_id: String },
    /// The recording was written before inputs were recorded as events: it holds a turn that
    /// no input event requested. Readers (projection, dashboard, export) read it as ever;
    /// re-executing it needs its inputs, which it does not hold.
    #[error("session {session_id} was written in the event format v{v} before inputs were recorded as events (seq {seq}, {kind}, has no turn_requested before it); it stays readable, but it cannot be re-executed: record it again with this build")]
    NoInputEvents {
        session_id: String,
        seq: u64,
        kind: String,
        v: u16,
    },
    /// An input event cannot be acted on, or a turn comes before the input that requests it.
    #[error("seq {seq}: bad input: {what}")]
    BadInput { seq: u64, what: String },
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A cancellation to re-issue once the replay has written `before` events.
#[derive(Debug, Clone)]
struct PendingCancel {
    before: usize,
    input: mull_core::Input,
}

/// What the replay's outside world (its models, tools and hook points) and driver share.
struct Shared {
    clock: Arc<RecordedClock>,
    model: Arc<dyn LanguageModel>,
    tools: ToolRuns,
    cancels: Mutex<VecDeque<PendingCancel>>,
    /// The session open now (cancellations go to it). Cleared when the replay ends, since the
    /// session's options hold this (as its outside world).
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
            // A cancellation acts without waiting, so polling it once runs it to its end.
            let _ = session
                .command(cancel.input, CommandOptions::default())
                .now_or_never();
        }
    }

    /// `model` presented under the provider and id of the model the agent chose.
    fn present(self: &Arc<Self>, chosen: &Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        Arc::new(PresentedModel {
            provider: chosen.provider().to_owned(),
            model_id: chosen.model_id().to_owned(),
            server: chosen.server(),
            shared: Arc::clone(self),
        })
    }

    /// `tools` with every server tool's execute answered from the recording.
    fn wrap_tools(self: &Arc<Self>, tools: ToolSet) -> ToolSet {
        let mut out = ToolSet::new();
        for entry in tools.entries() {
            out.insert(match entry {
                ToolEntry::Server(tool) => ToolEntry::Server(Arc::new(RecordedTool {
                    tool: Arc::clone(tool),
                    shared: Arc::clone(self),
                })),
                ToolEntry::Client(spec) => ToolEntry::Client(spec.clone()),
            });
        }
        out
    }
}

/// What to replay with beyond the agent and the model. The agent runs as it is; its models and
/// tools are served from the recording through the session's outside world
/// ([`crate::outside`]).
#[derive(Clone, Default)]
pub struct ReplayOptions {
    /// Extensions to load, as the recorded session had them.
    pub extensions: Extensions,
    /// The session's MCP servers, as the recorded session had them (the agent's come from the
    /// agent). A replay lists their tools — names, descriptions and schemas are the code under
    /// test — but never calls one: calls are served from the recording.
    pub mcp_servers: Vec<Arc<dyn crate::tool_source::ToolSource>>,
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
    if recording.agent() != agent.name() {
        return Err(ReplayError::OtherAgent {
            session_id,
            recorded: recording.agent().to_owned(),
            given: agent.name().to_owned(),
        });
    }
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
    let steps = steps(recording)?;
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
        .with_auto_continue(auto_continue)
        .with_outside(Arc::new(Recorded {
            shared: Arc::clone(&shared),
        }));
    session_options.metadata = metadata;
    session_options.extensions = options.extensions;
    session_options.mcp_servers = options.mcp_servers;
    session_options.marks_deliveries = Some(recording.marks_deliveries());
    let driven = drive(
        log,
        &reader,
        recording,
        steps,
        &shared,
        agent,
        session_options,
    )
    .await;
    // The session's options hold `shared`: let go of the session, and stop the work a re-enacted
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
    reader: &dyn mull_store::ReadLog,
    recording: &Recording,
    steps: Vec<(usize, Step)>,
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

    for (before, step) in steps {
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
        match step {
            Step::Recover => {
                // The process before this one is over; the next writer's recovery resolves
                // the turn it left running, writing exactly what the log's recovery wrote.
                session.abort_background_turns();
                shared.restart(before);
                let running: Vec<_> = session.read_state(|s| {
                    s.turns
                        .iter()
                        .filter(|t| t.status == mull_core::TurnStatus::Running)
                        .cloned()
                        .collect()
                });
                for turn in &running {
                    crate::turn::finish_interrupted(
                        &crate::turn::parts::TurnParts::of(&session.inner),
                        turn,
                        false,
                    )
                    .await
                    .map_err(engine_err)?;
                }
            }
            Step::Reopen { reruns } => {
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
            Step::Linked(event) => {
                // A sub-agent's session: the link its parent's call wrote, written again.
                session
                    .inner
                    .recorder()
                    .append(None, *event)
                    .map_err(engine_err)?;
            }
            Step::AcceptOnly(input) => accept_only(&session, input).await?,
            Step::Issue(input) => issue(shared, &session, input).await?,
        }
    }
    Ok(())
}

/// Writes a submission's acceptance alone, as the session's command writes it.
async fn accept_only(session: &Session, input: Input) -> Result<(), ReplayError> {
    let engine_err = |source| ReplayError::Engine(Box::new(source));
    // The recorded process stopped before this submission's run wrote anything (it
    // waited for the turn lock, or had not got to it): the acceptance is all there
    // is to write, exactly as the session's command writes it.
    let Input::Submit {
        submission_id,
        idempotency_key,
        messages,
        body,
    } = input
    else {
        return Ok(());
    };
    let inner = &session.inner;
    inner
        .recorder()
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
    inner.recorder().flush().await.map_err(engine_err)?;
    Ok(())
}

/// Issues a recorded input through the session's command and waits for the work it started
/// (a streamed turn, a submission's run) unless the recorded process stopped first.
async fn issue(shared: &Arc<Shared>, session: &Session, input: Input) -> Result<(), ReplayError> {
    let engine_err = |source| ReplayError::Engine(Box::new(source));
    let reply = shared
        .unless_stopped(session.command(input, CommandOptions::default()))
        .await;
    let reply = match reply {
        Some(reply) => reply.map_err(engine_err)?,
        None => return Ok(()),
    };
    let finished = match reply {
        Reply::Stream(stream) => shared
            .unless_stopped(drain(stream))
            .await
            .map(|r| r.map(|_| ())),
        Reply::Submitted(receipt) => shared
            .unless_stopped(session.wait_submission(&receipt.submission_id))
            .await
            .map(|r| r.map(|_| ())),
        _ => None,
    };
    if let Some(outcome) = finished {
        outcome.map_err(engine_err)?;
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
        .is_none_or(|e| matches!(e.event, Event::SessionOpened { .. }))
        || inputs::recoveries(recording).contains(&divergence.index);
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
