//! The budget fold: what a session has spent against its limits, and the decision a budget
//! check takes before a model call — both functions of the log.
//!
//! Tokens and dollars come from the [`CostLedger`] (usage is folded once, there); this fold
//! adds what budgets need beside it:
//! - **calls started**, per request: every `step_configured` (a step's first call), every
//!   `model_retried` (a call sent again) and every `compaction_call`, so a call that failed
//!   before reporting usage still counts;
//! - which request each compaction call and each sub-agent ran in (a sub-agent's spend arrives
//!   with its `subagent_finished`, counted once, here);
//! - the limits a sub-agent's session inherited (its `subagent_linked`);
//! - the `budget_exceeded` decisions already taken, so a request stopped once is not stopped
//!   (and logged) again.
//!
//! A turn's spend is its request's: every attempt (recoveries and overflow retries included),
//! its compaction calls and its sub-agents. A session's spend is all of it.

use mull_core::{
    BudgetLimits, BudgetMeasure, BudgetScope, BudgetSpend, Event, EventRef, PriceTable,
};

use crate::ledger::{CostLedger, StepCost};

/// A decision a budget check took: which limit is used up, and what is left of the scope.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetDecision {
    pub scope: BudgetScope,
    pub measure: BudgetMeasure,
    pub limit: f64,
    pub spent: f64,
    pub remaining: BudgetLimits,
}

impl BudgetDecision {
    /// What a caller is told: `the turn's token budget is used up: 1200 tokens spent of 1000`.
    pub fn message(&self) -> String {
        let scope = match self.scope {
            BudgetScope::Turn => "the turn's",
            BudgetScope::Session => "the session's",
            _ => "the inherited",
        };
        let measure = match self.measure {
            BudgetMeasure::Tokens => "token",
            BudgetMeasure::Dollars => "dollar",
            _ => "model-call",
        };
        format!(
            "budget exceeded: {scope} {measure} budget is used up ({} spent of {}); no further model call is made",
            self.measure.show(self.spent),
            self.measure.show(self.limit),
        )
    }
}

/// The fold. Feed it a session's events in order with [`BudgetFold::apply`].
#[derive(Debug, Clone, Default)]
pub struct BudgetFold {
    ledger: CostLedger,
    /// Calls started per request, in the order requests first appear.
    calls: Vec<(String, u32)>,
    /// Calls started outside any request (a compaction asked for by the application).
    calls_outside: u32,
    /// The request of each of the ledger's compaction calls, index for index.
    compaction_requests: Vec<Option<String>>,
    /// Sub-agents' spend, with the request whose tool call ran them.
    subagents: Vec<(Option<String>, BudgetSpend)>,
    inherited: Option<BudgetLimits>,
    /// Requests a `budget_exceeded` stopped, with the decision.
    stopped: Vec<(Option<String>, BudgetDecision)>,
}

impl BudgetFold {
    /// An empty fold.
    pub fn new() -> BudgetFold {
        BudgetFold::default()
    }

    /// Folds one event of the session.
    pub fn apply(&mut self, e: EventRef<'_>) {
        match e.event {
            Event::Chunk { .. } => return,
            Event::StepConfigured { .. } | Event::ModelRetried { .. } => {
                let request = e.turn_id.and_then(|t| self.request_of(t));
                self.count_call(request);
            }
            Event::CompactionCall { .. } => {
                let request = e.turn_id.and_then(|t| self.request_of(t));
                self.count_call(request.clone());
                self.compaction_requests.push(request);
            }
            Event::SubagentFinished {
                spend: Some(spend), ..
            } => {
                let request = e.turn_id.and_then(|t| self.request_of(t));
                self.subagents.push((request, *spend));
            }
            Event::SubagentLinked {
                budget: Some(limits),
                ..
            } => self.inherited = Some(*limits),
            Event::BudgetExceeded {
                request_id,
                scope,
                measure,
                limit,
                spent,
                remaining,
                ..
            } => self.stopped.push((
                request_id.clone(),
                BudgetDecision {
                    scope: *scope,
                    measure: *measure,
                    limit: *limit,
                    spent: *spent,
                    remaining: *remaining,
                },
            )),
            _ => {}
        }
        self.ledger.apply_ref(e);
    }

    fn count_call(&mut self, request: Option<String>) {
        match request {
            Some(request) => match self.calls.iter_mut().find(|(r, _)| *r == request) {
                Some((_, n)) => *n += 1,
                None => self.calls.push((request, 1)),
            },
            None => self.calls_outside += 1,
        }
    }

    /// The request a turn attempt belongs to.
    pub fn request_of(&self, turn_id: &str) -> Option<String> {
        self.ledger
            .requests
            .iter()
            .rev()
            .find(|r| r.attempts.iter().any(|a| a.turn_id == turn_id))
            .map(|r| r.request_id.clone())
    }

    /// The limits this session inherited from the parent that started it, if any.
    pub fn inherited(&self) -> Option<BudgetLimits> {
        self.inherited
    }

    /// The decision that already stopped `request_id`, if one did.
    pub fn stopped(&self, request_id: Option<&str>) -> Option<BudgetDecision> {
        self.stopped
            .iter()
            .find(|(r, _)| r.as_deref() == request_id)
            .map(|(_, d)| *d)
    }

    /// The spend of one request (`None`: the session's whole spend).
    pub fn spend(&self, request_id: Option<&str>, prices: &PriceTable) -> BudgetSpend {
        let mine = |r: Option<&str>| request_id.is_none() || r == request_id;
        let mut spend = BudgetSpend::default();
        let mut priced = 0u32;
        let mut add = |call: &StepCost| {
            if let Some(t) = &call.tokens {
                spend.tokens += t.uncached_input + t.cache_read + t.cache_write + t.output;
            }
            if let Some(dollars) = call.cost(prices) {
                spend.dollars += dollars;
                priced += 1;
            }
        };
        for request in &self.ledger.requests {
            if mine(Some(&request.request_id)) {
                request
                    .attempts
                    .iter()
                    .flat_map(|a| &a.steps)
                    .for_each(&mut add);
            }
        }
        for (call, request) in self
            .ledger
            .compaction_calls
            .iter()
            .zip(&self.compaction_requests)
        {
            if mine(request.as_deref()) {
                add(call);
            }
        }
        // Calls are counted as started (a call that failed before reporting usage counts
        // too); those without a known price are the rest.
        spend.calls = match request_id {
            None => self.calls.iter().map(|(_, n)| n).sum::<u32>() + self.calls_outside,
            Some(id) => self
                .calls
                .iter()
                .find(|(r, _)| r == id)
                .map_or(0, |(_, n)| *n),
        };
        spend.unpriced_calls = spend.calls.saturating_sub(priced);
        for (request, child) in &self.subagents {
            if mine(request.as_deref()) {
                spend.add(child);
            }
        }
        spend
    }

    /// The check before a model call of `request_id`: the first limit (in the order given)
    /// whose measure is used up, or that one more call would pass. A token or dollar limit
    /// stops the next call once the spend has reached it (a call's size is not known before
    /// it is made, so the call that crosses a limit finishes); a call limit stops the call
    /// that would be one too many.
    pub fn decide(
        &self,
        request_id: Option<&str>,
        limits: &[(BudgetScope, BudgetLimits)],
        prices: &PriceTable,
    ) -> Option<BudgetDecision> {
        for (scope, limit) in limits {
            if !limit.is_set() {
                continue;
            }
            let spend = match scope {
                BudgetScope::Turn => match request_id {
                    Some(_) => self.spend(request_id, prices),
                    None => continue,
                },
                _ => self.spend(None, prices),
            };
            let remaining = limit.remaining_after(&spend);
            let decision = |measure, limit: f64, spent: f64| BudgetDecision {
                scope: *scope,
                measure,
                limit,
                spent,
                remaining,
            };
            if let Some(max) = limit.tokens.filter(|max| spend.tokens >= *max) {
                return Some(decision(
                    BudgetMeasure::Tokens,
                    max as f64,
                    spend.tokens as f64,
                ));
            }
            if let Some(max) = limit.dollars.filter(|max| spend.dollars >= *max) {
                return Some(decision(BudgetMeasure::Dollars, max, spend.dollars));
            }
            if let Some(max) = limit.calls.filter(|max| spend.calls >= *max) {
                return Some(decision(
                    BudgetMeasure::Calls,
                    f64::from(max),
                    f64::from(spend.calls),
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use mull_core::{EntryPath, StepReport, ToolChoice, TurnStatus, Usage};
    use serde_json::json;

    fn feed(fold: &mut BudgetFold, turn: Option<&str>, event: Event) {
        let at = Utc.timestamp_opt(0, 0).single().expect("time");
        fold.apply(EventRef {
            seq: 0,
            at,
            turn_id: turn,
            event: &event,
        });
    }

    fn started(request: &str, attempt: u32) -> Event {
        Event::TurnStarted {
            request_id: request.into(),
            message_id: "m".into(),
            entry: EntryPath::Chat,
            continuation: false,
            attempt,
            body: json!({}),
        }
    }

    fn configured(step: u32) -> Event {
        Event::StepConfigured {
            step,
            model_id: "gpt-4o-mini".into(),
            active_tools: None,
            tool_choice: ToolChoice::Auto,
            system: None,
            message_count: 1,
            overrides: Vec::new(),
            request_hash: None,
        }
    }

    fn finished(step: u32, input: u64, output: u64) -> Event {
        Event::StepFinished {
            record: Box::new(StepReport {
                step,
                model_id: "gpt-4o-mini".into(),
                usage: Usage {
                    input_tokens: Some(input),
                    output_tokens: Some(output),
                    ..Usage::default()
                },
                ..StepReport::default()
            }),
        }
    }

    #[test]
    fn spend_counts_every_call_started_and_prices_what_reported_usage() {
        let mut fold = BudgetFold::new();
        // Request r1: a step that finished after one retry, then a step cut off by an error.
        feed(&mut fold, Some("t1"), started("r1", 0));
        feed(&mut fold, Some("t1"), configured(0));
        feed(
            &mut fold,
            Some("t1"),
            Event::ModelRetried {
                step: 0,
                attempt: 1,
                error: "503".into(),
                delay_ms: 1,
            },
        );
        feed(&mut fold, Some("t1"), finished(0, 1_000_000, 1_000_000));
        feed(&mut fold, Some("t1"), configured(1));
        feed(
            &mut fold,
            Some("t1"),
            Event::TurnFinished {
                request_id: "r1".into(),
                status: TurnStatus::Error,
                error: None,
                steps: 1,
                usage: Usage::default(),
                response_owed: false,
            },
        );
        // Request r2: one finished step.
        feed(&mut fold, Some("t2"), started("r2", 0));
        feed(&mut fold, Some("t2"), configured(0));
        feed(&mut fold, Some("t2"), finished(0, 100, 20));
        let prices = PriceTable::defaults();
        let r1 = fold.spend(Some("r1"), &prices);
        assert_eq!(r1.tokens, 2_000_000);
        // gpt-4o-mini: 0.15 in + 0.60 out per million.
        assert!((r1.dollars - 0.75).abs() < 1e-9, "{r1:?}");
        assert_eq!(
            r1.calls, 3,
            "the first call, its retry and the cut-off step"
        );
        let session = fold.spend(None, &prices);
        assert_eq!(session.tokens, 2_000_120);
        assert_eq!(session.calls, 4);

        // The turn's call limit of 3 is used up for r1; r2 has room; the session's is not.
        let turn = BudgetLimits {
            calls: Some(3),
            ..BudgetLimits::none()
        };
        let decision = fold
            .decide(Some("r1"), &[(BudgetScope::Turn, turn)], &prices)
            .expect("r1 is at its limit");
        assert_eq!(decision.measure, BudgetMeasure::Calls);
        assert_eq!((decision.limit, decision.spent), (3.0, 3.0));
        assert_eq!(decision.remaining.calls, Some(0));
        assert!(fold
            .decide(Some("r2"), &[(BudgetScope::Turn, turn)], &prices)
            .is_none());
        // A session token limit below the spend stops any request, naming the session.
        let session_limit = BudgetLimits {
            tokens: Some(1_000),
            ..BudgetLimits::none()
        };
        let stop = fold
            .decide(
                Some("r2"),
                &[
                    (BudgetScope::Turn, turn),
                    (BudgetScope::Session, session_limit),
                ],
                &prices,
            )
            .expect("the session is over its tokens");
        assert_eq!(stop.scope, BudgetScope::Session);
        assert_eq!(
            stop.message(),
            "budget exceeded: the session's token budget is used up (2000120 tokens spent of 1000 tokens); no further model call is made"
        );
    }
}
