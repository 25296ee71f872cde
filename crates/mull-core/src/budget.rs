//! The vocabulary of spend caps: limits in tokens, dollars and model calls ([`BudgetLimits`]),
//! what was spent against them ([`BudgetSpend`]), and the names a [`budget_exceeded`] event
//! uses for the limit that stopped a turn.
//!
//! Data only: the fold that sums spend lives in the store (`mull_store::budget`), the check
//! before every model call in the engine. A limit is either set or absent; an absent limit
//! never stops anything.
//!
//! [`budget_exceeded`]: crate::Event::BudgetExceeded

use serde::{Deserialize, Serialize};

/// Limits on spend; `None` is no limit. Tokens count every input and output token a model call
/// reported (cache reads and writes included); dollars are priced from the price table
/// ([`crate::PriceTable`]), a call of unknown price adding nothing; calls count every model call
/// started: each step's, each retry, each compaction summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u32>,
}

impl BudgetLimits {
    /// No limit at all.
    pub fn none() -> BudgetLimits {
        BudgetLimits::default()
    }

    /// Whether any limit is set.
    pub fn is_set(&self) -> bool {
        self.tokens.is_some() || self.dollars.is_some() || self.calls.is_some()
    }

    /// The tighter of two sets of limits, measure by measure.
    pub fn tightest(self, other: BudgetLimits) -> BudgetLimits {
        fn min<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b < a { b } else { a }),
                (a, None) => a,
                (None, b) => b,
            }
        }
        BudgetLimits {
            tokens: min(self.tokens, other.tokens),
            dollars: min(self.dollars, other.dollars),
            calls: min(self.calls, other.calls),
        }
    }

    /// What is left of these limits after `spend` (zero where it is used up; absent where
    /// there is no limit).
    pub fn remaining_after(&self, spend: &BudgetSpend) -> BudgetLimits {
        BudgetLimits {
            tokens: self.tokens.map(|t| t.saturating_sub(spend.tokens)),
            dollars: self.dollars.map(|d| (d - spend.dollars).max(0.0)),
            calls: self.calls.map(|c| c.saturating_sub(spend.calls)),
        }
    }
}

/// What was spent: tokens reported, dollars of the calls whose price is known, model calls
/// started (and how many of them have no known price).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetSpend {
    pub tokens: u64,
    pub dollars: f64,
    pub calls: u32,
    /// Calls whose cost is not known (no usage reported, or a model with no price): counted
    /// as calls, adding no dollars.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unpriced_calls: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl BudgetSpend {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &BudgetSpend) {
        self.tokens += other.tokens;
        self.dollars += other.dollars;
        self.calls += other.calls;
        self.unpriced_calls += other.unpriced_calls;
    }
}

/// Which limits a budget decision applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetScope {
    /// One user turn: every attempt of its request (recoveries and overflow retries included).
    Turn,
    /// The whole session.
    Session,
    /// What a sub-agent's session inherited: its parent's remainder when it started.
    Inherited,
}

/// What a limit measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetMeasure {
    Tokens,
    Dollars,
    Calls,
}

/// The model call a budget check stood before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelCallKind {
    /// A step's first call.
    Step,
    /// A step's call sent again after a retryable error.
    Retry,
    /// A compaction's summary.
    Compaction,
}

impl BudgetMeasure {
    /// `1200 tokens`, `$0.012000`, `3 calls`.
    pub fn show(self, amount: f64) -> String {
        match self {
            BudgetMeasure::Tokens => format!("{amount:.0} tokens"),
            BudgetMeasure::Dollars => format!("${amount:.6}"),
            BudgetMeasure::Calls => format!("{amount:.0} model calls"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tightest_limits_are_taken_measure_by_measure() {
        let turn = BudgetLimits {
            tokens: Some(100),
            dollars: None,
            calls: Some(5),
        };
        let inherited = BudgetLimits {
            tokens: Some(40),
            dollars: Some(0.5),
            calls: Some(9),
        };
        let both = turn.tightest(inherited);
        assert_eq!(
            both,
            BudgetLimits {
                tokens: Some(40),
                dollars: Some(0.5),
                calls: Some(5)
            }
        );
        let spend = BudgetSpend {
            tokens: 50,
            dollars: 0.2,
            calls: 2,
            unpriced_calls: 0,
        };
        let left = both.remaining_after(&spend);
        assert_eq!(left.tokens, Some(0));
        assert_eq!(left.calls, Some(3));
        assert!((left.dollars.unwrap_or_default() - 0.3).abs() < 1e-12);
        assert!(!BudgetLimits::none().is_set());
    }
}
