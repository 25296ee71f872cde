//! What the open session's model calls cost, for the turns pane's title: the log's cost ledger
//! folded from the session's events when it is entered, kept current from the tail, and priced
//! with the dashboard's table (a model it does not know, or a call with no reported usage,
//! shows as unknown, never as free). The same fold counts the calls a budget refused
//! (`budget_exceeded`), so the title shows spend and the stops it ran into together.

use std::collections::BTreeMap;

use mull_core::{wire_name, Envelope, Event, PriceTable};
use mull_store::{CostLedger, ReadLog, StoreError};

/// One session's ledger, its budget stops, and the last seq folded into them.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionCost {
    pub session_id: String,
    last_seq: u64,
    ledger: CostLedger,
    /// Budget stops by the limit that made them (`session tokens`, …), as `mull stats` names
    /// them.
    budget_stops: BTreeMap<String, u64>,
}

impl SessionCost {
    /// Nothing folded yet.
    fn new(session_id: &str) -> SessionCost {
        SessionCost {
            session_id: session_id.to_owned(),
            last_seq: 0,
            ledger: CostLedger::new(),
            budget_stops: BTreeMap::new(),
        }
    }

    /// Folds every event of `session_id` in the log.
    pub fn read(reader: &dyn ReadLog, session_id: &str) -> Result<SessionCost, StoreError> {
        let mut cost = SessionCost::new(session_id);
        reader.for_each_session_event(session_id, 0, &mut |env| cost.apply(&env))?;
        Ok(cost)
    }

    /// Folds an event in; events of other sessions, or already folded, are skipped.
    pub fn apply(&mut self, env: &Envelope) {
        if env.session_id == self.session_id && env.seq > self.last_seq {
            self.last_seq = env.seq;
            self.ledger.apply(env);
            if let Event::BudgetExceeded { scope, measure, .. } = &env.event {
                let limit = format!("{} {}", wire_name(scope), wire_name(measure));
                *self.budget_stops.entry(limit).or_default() += 1;
            }
        }
    }

    /// `$0.001234` at `prices`, or what is unknown about it.
    pub fn show(&self, prices: &PriceTable) -> String {
        self.ledger.totals(prices).total.show()
    }

    /// The budget stops, `1 budget stop (session tokens)`, or the count alone when `short`;
    /// `None` when no budget stopped a call.
    pub fn budget_stops(&self, short: bool) -> Option<String> {
        let total: u64 = self.budget_stops.values().sum();
        if total == 0 {
            return None;
        }
        let noun = if total == 1 {
            "budget stop"
        } else {
            "budget stops"
        };
        if short {
            return Some(format!("{total} {noun}"));
        }
        let limits: Vec<String> = self
            .budget_stops
            .iter()
            .map(|(limit, n)| {
                if self.budget_stops.len() == 1 {
                    limit.clone()
                } else {
                    format!("{limit} {n}")
                }
            })
            .collect();
        Some(format!("{total} {noun} ({})", limits.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use mull_core::{EntryPath, Event, StepReport, TurnStatus, Usage};

    fn env(seq: u64, session: &str, event: Event) -> Envelope {
        Envelope {
            seq,
            session_id: session.into(),
            turn_id: Some("t1".into()),
            at: Utc::now(),
            v: 1,
            event,
        }
    }

    fn turn(session: &str, first_seq: u64) -> Vec<Envelope> {
        vec![
            env(
                first_seq,
                session,
                Event::TurnStarted {
                    request_id: "r".into(),
                    message_id: "m".into(),
                    entry: EntryPath::Chat,
                    continuation: false,
                    attempt: 0,
                    body: serde_json::Value::Null,
                },
            ),
            env(
                first_seq + 1,
                session,
                Event::StepFinished {
                    record: Box::new(StepReport {
                        model_id: "gpt-4o-mini".into(),
                        usage: Usage {
                            input_tokens: Some(1_000_000),
                            output_tokens: Some(0),
                            ..Usage::default()
                        },
                        ..StepReport::default()
                    }),
                },
            ),
            env(
                first_seq + 2,
                session,
                Event::TurnFinished {
                    request_id: "r".into(),
                    status: TurnStatus::Completed,
                    error: None,
                    steps: 1,
                    usage: Usage::default(),
                    response_owed: false,
                },
            ),
        ]
    }

    #[test]
    fn a_priced_call_is_counted_once_and_other_sessions_not_at_all() {
        let mut cost = SessionCost::new("s");
        let prices = PriceTable::defaults();
        assert_eq!(cost.show(&prices), "$0.000000");
        for e in turn("s", 1) {
            cost.apply(&e);
        }
        assert_eq!(cost.show(&prices), "$0.150000");
        // The tail delivering what the read already folded, and another session's turn.
        for e in turn("s", 1).into_iter().chain(turn("other", 4)) {
            cost.apply(&e);
        }
        assert_eq!(cost.show(&prices), "$0.150000");
    }

    #[test]
    fn the_cost_is_shown_at_the_prices_given_and_unknown_without_one() {
        let mut cost = SessionCost::new("s");
        for e in turn("s", 1) {
            cost.apply(&e);
        }
        let doubled = PriceTable::defaults()
            .parse(r#"{"models": {"gpt-4o-mini": {"input": 0.3, "output": 1.2}}}"#)
            .expect("a price file");
        assert_eq!(cost.show(&doubled), "$0.300000");
        assert!(cost.show(&PriceTable::new()).contains("unknown"));
    }

    #[test]
    fn budget_stops_are_counted_by_limit_once_each() {
        let stop = |seq, scope, measure| {
            env(
                seq,
                "s",
                Event::BudgetExceeded {
                    request_id: Some("r".into()),
                    scope,
                    measure,
                    limit: 200.0,
                    spent: 210.0,
                    remaining: mull_core::BudgetLimits::none(),
                    call: mull_core::ModelCallKind::Step,
                    step: Some(1),
                },
            )
        };
        use mull_core::{BudgetMeasure, BudgetScope};
        let mut cost = SessionCost::new("s");
        assert_eq!(cost.budget_stops(false), None);
        cost.apply(&stop(1, BudgetScope::Session, BudgetMeasure::Tokens));
        assert_eq!(
            cost.budget_stops(false).as_deref(),
            Some("1 budget stop (session tokens)")
        );
        // The tail repeating what the read folded counts nothing twice.
        cost.apply(&stop(1, BudgetScope::Session, BudgetMeasure::Tokens));
        cost.apply(&stop(2, BudgetScope::Turn, BudgetMeasure::Dollars));
        cost.apply(&stop(3, BudgetScope::Session, BudgetMeasure::Tokens));
        assert_eq!(
            cost.budget_stops(false).as_deref(),
            Some("3 budget stops (session tokens 2, turn dollars 1)")
        );
        assert_eq!(cost.budget_stops(true).as_deref(), Some("3 budget stops"));
    }
}
