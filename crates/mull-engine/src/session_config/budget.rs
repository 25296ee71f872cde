//! The budget a session's configuration holds: limits on what its model calls may spend, and
//! the prices dollars are counted at. The check that applies it is the engine's `budget`
//! module.

use mull_core::{BudgetLimits, PriceTable};

/// Limits on what a session's model calls may spend, per turn and per session, in tokens,
/// dollars (at [`Budget::with_prices`], the built-in [`PriceTable::defaults`] unless set) and
/// model calls. Set on the session's configuration with
/// [`SessionConfig::budget`](super::SessionConfig::budget).
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Limits on each user turn (every attempt of its request).
    pub turn: BudgetLimits,
    /// Limits on the whole session.
    pub session: BudgetLimits,
    prices: PriceTable,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget::new()
    }
}

impl Budget {
    /// No limits yet, priced with the built-in price table.
    pub fn new() -> Budget {
        Budget {
            turn: BudgetLimits::none(),
            session: BudgetLimits::none(),
            prices: PriceTable::defaults(),
        }
    }

    /// At most `tokens` tokens (input and output) per turn.
    pub fn turn_tokens(mut self, tokens: u64) -> Budget {
        self.turn.tokens = Some(tokens);
        self
    }

    /// At most `dollars` per turn.
    pub fn turn_dollars(mut self, dollars: f64) -> Budget {
        self.turn.dollars = Some(dollars);
        self
    }

    /// At most `calls` model calls per turn (retries and compaction summaries included).
    pub fn turn_calls(mut self, calls: u32) -> Budget {
        self.turn.calls = Some(calls);
        self
    }

    /// At most `tokens` tokens per session.
    pub fn session_tokens(mut self, tokens: u64) -> Budget {
        self.session.tokens = Some(tokens);
        self
    }

    /// At most `dollars` per session.
    pub fn session_dollars(mut self, dollars: f64) -> Budget {
        self.session.dollars = Some(dollars);
        self
    }

    /// At most `calls` model calls per session.
    pub fn session_calls(mut self, calls: u32) -> Budget {
        self.session.calls = Some(calls);
        self
    }

    /// Prices dollars with `prices` instead of the built-in table.
    pub fn with_prices(mut self, prices: PriceTable) -> Budget {
        self.prices = prices;
        self
    }

    /// The price table dollars are counted with.
    pub fn prices(&self) -> &PriceTable {
        &self.prices
    }

    /// This budget held to `cap` too: each limit the tighter of the two, priced at this
    /// budget's prices.
    pub fn capped_by(mut self, cap: &Budget) -> Budget {
        self.turn = self.turn.tightest(cap.turn);
        self.session = self.session.tightest(cap.session);
        self
    }

    /// Whether any limit is set.
    pub fn is_set(&self) -> bool {
        self.turn.is_set() || self.session.is_set()
    }
}
