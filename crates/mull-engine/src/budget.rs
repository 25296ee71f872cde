//! Spend caps: a [`Budget`] on the session's configuration, and the one check that stands
//! before every model call — a step's first call, each retry, each compaction summary, and
//! so every recovery attempt and every sub-agent's call too.
//!
//! The check reads the session's budget fold ([`mull_store::BudgetFold`], kept current by the
//! recorder with every event), so its decision is a function of the log: a replay of the
//! same log, under the same configuration, decides the same at the same place. When a limit
//! is used up, a `budget_exceeded` event names the limit, the spend and what is left; the
//! call is not made and the turn ends with an error at stage [`ErrorStage::Budget`]. A
//! request stopped once is not checked (nor logged) again: its later checks repeat the
//! decision.
//!
//! A sub-agent inherits its parent's remainder: the tightest of what is left of the parent's
//! turn, session and inherited limits when the child starts, written in the child's
//! `subagent_linked`. The child's spend comes back in the parent's `subagent_finished` and
//! counts against the parent's limits from there.
//!
//! ```
//! use mull_engine::{Budget, SessionConfig};
//!
//! // At most 20 000 tokens and 8 model calls a turn, and five cents a session, priced with
//! // the built-in price table.
//! let config = SessionConfig::new().budget(
//!     Budget::new()
//!         .turn_tokens(20_000)
//!         .turn_calls(8)
//!         .session_dollars(0.05),
//! );
//! assert!(config.budget_settings().is_some());
//! ```

use mull_core::{
    BudgetLimits, BudgetScope, BudgetSpend, ErrorStage, Event, ModelCallKind, PriceTable,
};
use mull_store::{BudgetDecision, BudgetFold};

use crate::error::{ChatError, EngineError};
use crate::recorder::Recorder;
pub use crate::session_config::budget::Budget;
use crate::session_config::SessionConfig;

/// Builds the session's budget fold from its log when it needs one (a budget is configured,
/// or the session is a sub-agent's, which may have inherited limits); called once at open,
/// before the session writes anything.
pub(crate) async fn load(recorder: &Recorder, config: &SessionConfig) -> Result<(), EngineError> {
    let child = recorder.read(|s| s.parent.is_some());
    if !child && !config.budget_settings().is_some_and(Budget::is_set) {
        return Ok(());
    }
    let mut fold = BudgetFold::new();
    let mut after = 0;
    loop {
        let page = recorder.page(after, 1_000).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for env in &page {
            fold.apply(mull_core::EventRef::of(env));
        }
    }
    recorder.keep_budget_fold(fold);
    Ok(())
}

/// The prices this session counts dollars with.
fn prices(config: &SessionConfig) -> PriceTable {
    config
        .budget_settings()
        .map(|b| b.prices().clone())
        .unwrap_or_else(PriceTable::defaults)
}

/// The limits that hold, in the order they are checked: the turn's, the session's, the
/// inherited ones.
fn limits(config: &SessionConfig, fold: &BudgetFold) -> Vec<(BudgetScope, BudgetLimits)> {
    let mut out = Vec::with_capacity(3);
    if let Some(budget) = config.budget_settings() {
        out.push((BudgetScope::Turn, budget.turn));
        out.push((BudgetScope::Session, budget.session));
    }
    if let Some(inherited) = fold.inherited() {
        out.push((BudgetScope::Inherited, inherited));
    }
    out
}

/// The check before a model call of the turn `turn_id` (`None`: outside a turn). `Ok(None)`:
/// the call may be made. `Ok(Some(error))`: a limit is used up — the `budget_exceeded` event
/// is written (once per request) and the error is what the turn ends with.
pub(crate) fn before_call(
    recorder: &Recorder,
    config: &SessionConfig,
    turn_id: Option<&str>,
    call: ModelCallKind,
    step: Option<u32>,
) -> Result<Option<ChatError>, EngineError> {
    let checked = recorder.budget_fold(|fold| {
        let fold = fold?;
        let request = turn_id.and_then(|t| fold.request_of(t));
        if let Some(stopped) = fold.stopped(request.as_deref()) {
            return Some((request, stopped, false));
        }
        // Built only where a budget is kept: a session without one pays nothing per call.
        let prices = prices(config);
        let decision = fold.decide(request.as_deref(), &limits(config, fold), &prices)?;
        Some((request, decision, true))
    });
    let Some((request_id, decision, new)) = checked else {
        return Ok(None);
    };
    if new {
        recorder.append(
            turn_id,
            Event::BudgetExceeded {
                request_id: request_id.clone(),
                scope: decision.scope,
                measure: decision.measure,
                limit: decision.limit,
                spent: decision.spent,
                remaining: decision.remaining,
                call,
                step,
            },
        )?;
    }
    Ok(Some(error_of(request_id, &decision)))
}

/// The error a request a budget stopped ends with, if one did (`turn_id`'s request).
pub(crate) fn stopped(recorder: &Recorder, turn_id: Option<&str>) -> Option<ChatError> {
    recorder.budget_fold(|fold| {
        let fold = fold?;
        let request = turn_id.and_then(|t| fold.request_of(t));
        let decision = fold.stopped(request.as_deref())?;
        Some(error_of(request, &decision))
    })
}

fn error_of(request_id: Option<String>, decision: &BudgetDecision) -> ChatError {
    ChatError {
        request_id,
        ..ChatError::new(ErrorStage::Budget, decision.message())
    }
}

/// What a sub-agent started now by the turn `turn_id` inherits: the tightest of what is left
/// of every limit that holds here. `None` when no limit holds.
pub(crate) fn remainder(
    recorder: &Recorder,
    config: &SessionConfig,
    turn_id: &str,
) -> Option<BudgetLimits> {
    let prices = prices(config);
    recorder.budget_fold(|fold| {
        let fold = fold?;
        let request = fold.request_of(turn_id);
        let mut left: Option<BudgetLimits> = None;
        for (scope, limit) in limits(config, fold) {
            if !limit.is_set() {
                continue;
            }
            let spend = match scope {
                BudgetScope::Turn => fold.spend(request.as_deref(), &prices),
                _ => fold.spend(None, &prices),
            };
            let here = limit.remaining_after(&spend);
            left = Some(left.map_or(here, |l| l.tightest(here)));
        }
        left
    })
}

/// This session's whole spend, when it keeps a budget fold.
pub(crate) fn session_spend(recorder: &Recorder, config: &SessionConfig) -> Option<BudgetSpend> {
    let prices = prices(config);
    recorder.budget_fold(|fold| fold.map(|f| f.spend(None, &prices)))
}
