//! Backtest: "what would this new hook code have decided?", answered from the log.
//!
//! A backtest re-executes recorded sessions with an agent (and extensions) carrying new hook
//! code, on the machinery of [`reexecute`]: the model's output is served from the recording
//! (by request hash), the tools' results from the recording (by call id), time and ids from
//! the recording. Nothing calls a model or runs a tool. Each re-execution is written into a
//! scratch log, folded like the recording with the store's diff folds, and compared with it
//! call by call ([`mull_store::diff`]).
//!
//! What the report holds, per session ([`SessionBacktest`]):
//! - every tool decision that changed: where (turn, step, call, tool), the recorded decision
//!   and the new one, with their reasons ([`DecisionChange`]);
//! - where the recording stops being usable ([`Stop`]): the first change after which the
//!   recorded model output can no longer be served honestly — a call now blocked or
//!   substituted (the model never saw the answer it would get), a call now allowed or run with
//!   other input (the tool never ran that way, so its result is unknown), a turn or step
//!   configured differently (the model was never sent that request). The report names that
//!   point and stops there: nothing after it is reported, because anything after it would be
//!   invented;
//! - whether a turn ends differently (its status), when that happens before any such point.
//!
//! A decision that changes in a way the model cannot see (a call still run with the same
//! input) does not stop the comparison. [`reexecute`] stops issuing the recording's inputs
//! after the first turn that writes differently, so turns after such a turn are reported as
//! not re-executed ([`StopKind::NotReissued`]) rather than guessed at.

mod report;

use std::sync::Arc;

use futures::StreamExt;
use mull_core::LanguageModel;
use mull_store::{Log, ReadLog, StoreError};

use super::{reexecute, Recording, ReplayOptions};
use crate::agent::Agent;

pub use report::{
    BacktestReport, BacktestSummary, Decision, DecisionChange, SessionBacktest, Stop, StopKind,
    ToolSummary,
};

/// Serves one recorded session's model output: a [`LanguageModel`] answering from the
/// recording (the providers crate's `ReplayModel`), or why it cannot.
pub type ServeModel = dyn Fn(&Recording) -> Result<Arc<dyn LanguageModel>, String> + Send + Sync;

/// How to backtest.
#[derive(Clone)]
pub struct BacktestOptions {
    /// Extensions to run with the agent (the new hook code may be one).
    pub replay: ReplayOptions,
    /// How many sessions are re-executed at once.
    pub concurrency: usize,
}

impl Default for BacktestOptions {
    fn default() -> BacktestOptions {
        BacktestOptions {
            replay: ReplayOptions::default(),
            concurrency: 4,
        }
    }
}

/// Why a backtest did not run (a session that cannot be re-executed is not an error: the
/// report lists it as skipped, with why).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BacktestError {
    /// A session asked for is not in the log.
    #[error("no session {0:?} in the log")]
    NoSession(String),
    /// The log holds no session at all.
    #[error("the log holds no session to backtest")]
    NoSessions,
    /// The scratch log the re-executions are written to could not be made.
    #[error("creating the backtest's scratch log: {0}")]
    Scratch(String),
    /// Reading the recorded log failed.
    #[error("backtest: {0}")]
    Store(#[from] StoreError),
}

/// Backtests `agent` (with `options.replay.extensions`) over `sessions` of the recorded log
/// (all of its sessions but sub-agents' when empty), re-executing each into `scratch` — a log that holds none
/// of them, which the caller throws away — with model output from `serve`.
///
/// The recorded log is only read. See the module docs for what the report holds.
pub async fn backtest(
    recorded: &dyn ReadLog,
    scratch: &Log,
    sessions: &[String],
    agent: Arc<dyn Agent>,
    serve: &ServeModel,
    options: BacktestOptions,
) -> Result<BacktestReport, BacktestError> {
    let ids: Vec<String> = if sessions.is_empty() {
        // A sub-agent's session is left out: its parent's re-execution serves what it did from
        // the recording, and its own policy is backtested by naming it with its own agent.
        let overviews = recorded.session_overviews()?;
        let all: Vec<String> = recorded
            .sessions()?
            .into_iter()
            .map(|s| s.session_id)
            .filter(|id| overviews.get(id).is_none_or(|o| o.parent.is_none()))
            .collect();
        if all.is_empty() {
            return Err(BacktestError::NoSessions);
        }
        all
    } else {
        for id in sessions {
            if !recorded.has_session(id)? {
                return Err(BacktestError::NoSession(id.clone()));
            }
        }
        sessions.to_vec()
    };
    let replay = &options.replay;
    let results: Vec<SessionBacktest> = futures::stream::iter(ids)
        .map(|id| {
            // Read before any await, so the reader is used by one session at a time.
            let recording = Recording::read(recorded, &id);
            let agent = Arc::clone(&agent);
            async move {
                let recording = match recording {
                    Ok(recording) => recording,
                    Err(e) => return SessionBacktest::skipped(id, e.to_string()),
                };
                let model = match serve(&recording) {
                    Ok(model) => model,
                    Err(e) => return SessionBacktest::skipped(id, e),
                };
                match reexecute(scratch, agent, model, &recording, replay.clone()).await {
                    Ok(report) => report::judge(&id, recording.envelopes(), &report.actual),
                    Err(e) => SessionBacktest::skipped(id, e.to_string()),
                }
            }
        })
        .buffered(options.concurrency.max(1))
        .collect()
        .await;
    Ok(BacktestReport::new(results))
}
