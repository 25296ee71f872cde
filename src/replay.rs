//! Re-execution over the log: everything in [`mull_engine::replay`], plus [`backtest()`] with the
//! model served by the providers' `ReplayModel` and a scratch log of its own.

use std::sync::Arc;

use mull_core::LanguageModel;
use mull_engine::Agent;
use mull_providers::replay::ReplayModel;
use mull_store::{Log, ReadLog};

pub use mull_engine::replay::*;

/// Backtests `agent` over `sessions` of `log` (all of its sessions but sub-agents' when empty): each is
/// re-executed with the model's output and the tools' results served from the recording —
/// no model is called and no tool runs — and every tool decision that would change is
/// reported, with where each recording stops being usable. `log` is only read; the
/// re-executions go to a scratch log that is deleted afterwards. See
/// [`mull_engine::replay::backtest()`].
pub async fn backtest(
    log: &dyn ReadLog,
    sessions: &[String],
    agent: Arc<dyn Agent>,
) -> Result<BacktestReport, BacktestError> {
    backtest_with(log, sessions, agent, BacktestOptions::default()).await
}

/// [`backtest()`] with extensions (the new hook code may be one) and a concurrency.
pub async fn backtest_with(
    log: &dyn ReadLog,
    sessions: &[String],
    agent: Arc<dyn Agent>,
    options: BacktestOptions,
) -> Result<BacktestReport, BacktestError> {
    let scratch_err = |e: &dyn std::fmt::Display| BacktestError::Scratch(e.to_string());
    let dir = tempfile::tempdir().map_err(|e| scratch_err(&e))?;
    let scratch = Log::open(dir.path().join("backtest.db")).map_err(|e| scratch_err(&e))?;
    let serve = |recording: &Recording| {
        ReplayModel::from_envelopes(recording.envelopes().to_vec())
            .map(|model| Arc::new(model) as Arc<dyn LanguageModel>)
            .map_err(|e| e.to_string())
    };
    let report =
        mull_engine::replay::backtest(log, &scratch, sessions, agent, &serve, options).await;
    // The scratch log is thrown away; failing to close it loses nothing the caller has.
    let _ = scratch.close();
    report
}
