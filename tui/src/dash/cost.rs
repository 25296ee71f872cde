//! What the open session's model calls cost, for the turns pane's title: the log's cost ledger
//! folded from the session's events when it is entered, kept current from the tail, and priced
//! with the dashboard's table (a model it does not know, or a call with no reported usage,
//! shows as unknown, never as free).

use mull_core::{Envelope, PriceTable};
use mull_store::{CostLedger, ReadLog, StoreError};

/// One session's ledger and the last seq folded into it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionCost {
    pub session_id: String,
    last_seq: u64,
    ledger: CostLedger,
}

impl SessionCost {
    /// Folds every event of `session_id` in the log.
    pub fn read(reader: &dyn ReadLog, session_id: &str) -> Result<SessionCost, StoreError> {
        let mut cost = SessionCost {
            session_id: session_id.to_owned(),
            last_seq: 0,
            ledger: CostLedger::new(),
        };
        reader.for_each_session_event(session_id, 0, &mut |env| cost.apply(&env))?;
        Ok(cost)
    }

    /// Folds an event in; events of other sessions, or already folded, are skipped.
    pub fn apply(&mut self, env: &Envelope) {
        if env.session_id == self.session_id && env.seq > self.last_seq {
            self.last_seq = env.seq;
            self.ledger.apply(env);
        }
    }

    /// `$0.001234` at `prices`, or what is unknown about it.
    pub fn show(&self, prices: &PriceTable) -> String {
        self.ledger.totals(prices).total.show()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use mull_core::{EntryPath, Event, StepRecord, TurnStatus, Usage};

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
                    record: Box::new(StepRecord {
                        model_id: "gpt-4o-mini".into(),
                        usage: Usage {
                            input_tokens: Some(1_000_000),
                            output_tokens: Some(0),
                            ..Usage::default()
                        },
                        ..StepRecord::default()
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
                },
            ),
        ]
    }

    #[test]
    fn a_priced_call_is_counted_once_and_other_sessions_not_at_all() {
        let mut cost = SessionCost {
            session_id: "s".into(),
            last_seq: 0,
            ledger: CostLedger::new(),
        };
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
        let mut cost = SessionCost {
            session_id: "s".into(),
            last_seq: 0,
            ledger: CostLedger::new(),
        };
        for e in turn("s", 1) {
            cost.apply(&e);
        }
        let doubled = PriceTable::defaults()
            .parse(r#"{"models": {"gpt-4o-mini": {"input": 0.3, "output": 1.2}}}"#)
            .expect("a price file");
        assert_eq!(cost.show(&doubled), "$0.300000");
        assert!(cost.show(&PriceTable::new()).contains("unknown"));
    }
}
