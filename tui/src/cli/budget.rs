//! Budget flags for `mull chat`, `mull serve` and `mull demo`: caps on what a session's model
//! calls may spend, per turn and per session, in tokens, dollars and model calls, laid over
//! whatever budget the agent sets itself (each limit the tighter of the two). A turn that
//! reaches one ends with a `budget_exceeded` event and an error naming the limit; `mull stats`
//! and the dashboard show it.

use std::path::PathBuf;

use anyhow::{bail, Result};
use mull::engine::{Budget, SessionOptions};

/// The budget flags, shared by the commands that run turns.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BudgetArgs {
    /// The most tokens (input and output, cache reads and writes included) one turn's model
    /// calls may use, retries and compaction included.
    #[arg(long, value_name = "TOKENS")]
    pub budget_turn_tokens: Option<u64>,
    /// The most US dollars one turn's model calls may cost (priced with --prices).
    #[arg(long, value_name = "USD")]
    pub budget_turn_usd: Option<f64>,
    /// The most model calls one turn may start (retries and compaction summaries included).
    #[arg(long, value_name = "CALLS")]
    pub budget_turn_calls: Option<u32>,
    /// The most tokens the whole session's model calls may use.
    #[arg(long, value_name = "TOKENS")]
    pub budget_session_tokens: Option<u64>,
    /// The most US dollars the whole session's model calls may cost.
    #[arg(long, value_name = "USD")]
    pub budget_session_usd: Option<f64>,
    /// The most model calls the whole session may start.
    #[arg(long, value_name = "CALLS")]
    pub budget_session_calls: Option<u32>,
    /// A price file the dollar budgets are counted with, laid over the built-in prices (the
    /// shape `mull stats --prices` reads).
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
}

impl BudgetArgs {
    /// The budget the flags ask for, checked; `None` when no limit is given.
    pub fn budget(&self) -> Result<Option<Budget>> {
        for (flag, usd) in [
            ("--budget-turn-usd", self.budget_turn_usd),
            ("--budget-session-usd", self.budget_session_usd),
        ] {
            if let Some(usd) = usd.filter(|usd| !usd.is_finite() || *usd < 0.0) {
                bail!("{flag} {usd}: a budget in dollars is a number of zero or more, e.g. {flag} 0.05");
            }
        }
        let mut budget = Budget::new();
        budget.turn.tokens = self.budget_turn_tokens;
        budget.turn.dollars = self.budget_turn_usd;
        budget.turn.calls = self.budget_turn_calls;
        budget.session.tokens = self.budget_session_tokens;
        budget.session.dollars = self.budget_session_usd;
        budget.session.calls = self.budget_session_calls;
        if !budget.is_set() {
            if self.prices.is_some() {
                bail!("--prices prices the dollar budgets: give one too, e.g. --budget-session-usd 0.50");
            }
            return Ok(None);
        }
        let prices = super::stats::price_table(self.prices.as_deref())?;
        Ok(Some(budget.with_prices(prices)))
    }
}

/// `options` with `budget` laid over the agent's own, when there is one.
pub fn with_budget(options: SessionOptions, budget: Option<&Budget>) -> SessionOptions {
    match budget {
        Some(budget) => options.with_budget(budget.clone()),
        None => options,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_make_a_budget_and_bad_dollars_are_refused() {
        let none = BudgetArgs::default();
        assert!(none.budget().unwrap().is_none());
        let args = BudgetArgs {
            budget_turn_tokens: Some(500),
            budget_session_usd: Some(0.25),
            ..BudgetArgs::default()
        };
        let budget = args.budget().unwrap().expect("a budget");
        assert_eq!(budget.turn.tokens, Some(500));
        assert_eq!(budget.session.dollars, Some(0.25));
        assert_eq!(budget.turn.calls, None);
        let negative = BudgetArgs {
            budget_turn_usd: Some(-1.0),
            ..BudgetArgs::default()
        };
        let err = negative.budget().unwrap_err().to_string();
        assert!(err.contains("--budget-turn-usd -1"), "{err}");
    }
}
