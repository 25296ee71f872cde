//! The cost ledger: what a session's model calls cost, as a fold of its log.
//!
//! A user turn (one request id) runs one or more **attempts** (overflow recovery re-runs it
//! under a new turn id); an attempt runs **steps**, one model call each. The ledger keeps, per
//! attempt, every finished step's model and tokens (cache reads and writes apart), how it ended
//! (completed, aborted, error), the calls that failed and were retried (`model_retried`), and
//! the call that never finished (cut short by a cancel, a crash or a stream error: the provider
//! reported no usage for it). Compaction summaries are counted apart: the model calls the
//! compaction callback made are `compaction_call` events, priced like steps (a call that failed
//! or was cut off before usage arrived is unknown); a compaction whose summarizer reported no
//! call (a custom summarizer, an older log) is counted as a summary of unknown cost.
//!
//! Prices are applied when reading ([`CostLedger::totals`]), so one fold serves any price
//! table: a step whose usage was not reported, or whose model has no price, is counted as a
//! call of **unknown** cost, never as free. `mull stats` and the dashboard read this fold.

use mull_core::{BilledTokens, Envelope, Event, EventRef, PriceTable, TurnStatus};

use crate::facts::{FactChange, Facts, StepStage, TurnStage};

/// One finished step's model call.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCost {
    pub step: u32,
    pub model_id: String,
    /// `None` when the provider reported no usage.
    pub tokens: Option<BilledTokens>,
}

/// One attempt of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptCost {
    pub turn_id: String,
    /// 0 for the first attempt.
    pub attempt: u32,
    /// `Running` until the attempt's `turn_finished`.
    pub status: TurnStatus,
    pub steps: Vec<StepCost>,
    /// Model calls that failed in a retryable way and were sent again.
    pub retried_calls: u32,
    /// A step whose model call started but never finished (no usage reported), with its model.
    pub unfinished_call: Option<String>,
    /// Whether the attempt failed on a model error (the unfinished call, when there is one).
    pub failed_on_model_error: bool,
}

/// One user turn: a request id and its attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestCost {
    pub request_id: String,
    pub attempts: Vec<AttemptCost>,
}

/// The fold. Feed it a session's events in order with [`CostLedger::apply`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CostLedger {
    pub requests: Vec<RequestCost>,
    /// Compactions that replaced messages with a summary whose model calls were not reported:
    /// one summarizer call of unknown cost each.
    pub compaction_summaries: u32,
    /// The model calls compaction callbacks reported (`compaction_call`), in order.
    pub compaction_calls: Vec<StepCost>,
    /// Calls reported since the last `compaction_applied`.
    calls_since_compaction: u32,
    /// The facts the attempts are read from (lifecycle events only).
    facts: Facts,
    /// The attempt of each of the facts' turns: (request, attempt) indices.
    attempts: Vec<Option<(usize, usize)>>,
}

/// A sum of costs: dollars of the calls whose cost is known, and how many calls are not.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Amount {
    pub dollars: f64,
    pub priced_calls: u32,
    pub unknown_calls: u32,
}

impl Amount {
    fn add_call(&mut self, cost: Option<f64>) {
        match cost {
            Some(dollars) => {
                self.dollars += dollars;
                self.priced_calls += 1;
            }
            None => self.unknown_calls += 1,
        }
    }

    fn add(&mut self, other: &Amount) {
        self.dollars += other.dollars;
        self.priced_calls += other.priced_calls;
        self.unknown_calls += other.unknown_calls;
    }

    /// `$0.001234`, `$0.001234 + 2 calls of unknown cost`, `unknown (3 calls)`, or `$0` for no
    /// calls at all.
    pub fn show(&self) -> String {
        match (self.priced_calls, self.unknown_calls) {
            (_, 0) => format!("${:.6}", self.dollars),
            (0, n) => format!("unknown ({n} call{})", plural(n)),
            (_, n) => format!(
                "${:.6} + {n} call{} of unknown cost",
                self.dollars,
                plural(n)
            ),
        }
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A ledger priced: the session's cost split the ways a reader asks about.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CostTotals {
    /// Every call: finished ones, and the unfinished ones (as unknown).
    pub total: Amount,
    /// The calls of attempts that completed, were aborted, or ended in an error.
    pub completed: Amount,
    pub aborted: Amount,
    pub failed: Amount,
    /// The calls of attempts that a later attempt of the same turn replaced.
    pub superseded: Amount,
    /// The summarizer calls of compactions (within `total`).
    pub compaction: Amount,
    /// The tokens of every call whose usage was reported.
    pub tokens: BilledTokens,
    /// What cache reads and cache writes cost (within `total`).
    pub cache_read_dollars: f64,
    pub cache_write_dollars: f64,
    /// Calls retried after a retryable error, calls that never finished, summaries written by
    /// compaction: none of them reported usage to the log.
    pub retried_calls: u32,
    pub unfinished_calls: u32,
    pub compaction_summaries: u32,
}

impl CostTotals {
    /// Adds `other` into `self` (to total several sessions).
    pub fn add(&mut self, other: &CostTotals) {
        self.total.add(&other.total);
        self.completed.add(&other.completed);
        self.aborted.add(&other.aborted);
        self.failed.add(&other.failed);
        self.superseded.add(&other.superseded);
        self.compaction.add(&other.compaction);
        self.tokens.add(&other.tokens);
        self.cache_read_dollars += other.cache_read_dollars;
        self.cache_write_dollars += other.cache_write_dollars;
        self.retried_calls += other.retried_calls;
        self.unfinished_calls += other.unfinished_calls;
        self.compaction_summaries += other.compaction_summaries;
    }
}

impl CostTotals {
    /// Counts a call's reported tokens and what its cache reads and writes cost.
    fn add_tokens(&mut self, call: &StepCost, prices: &PriceTable) {
        let Some(tokens) = &call.tokens else { return };
        self.tokens.add(tokens);
        if let Some(price) = prices.price(&call.model_id) {
            let per = |n: u64, p: Option<f64>| n as f64 * p.unwrap_or(price.input) / 1e6;
            self.cache_read_dollars += per(tokens.cache_read, price.cache_read);
            self.cache_write_dollars += per(tokens.cache_write, price.cache_write);
        }
    }
}

impl StepCost {
    /// This call's cost under `prices`; unknown without usage or a price.
    pub fn cost(&self, prices: &PriceTable) -> Option<f64> {
        prices.cost(&self.model_id, self.tokens.as_ref()?)
    }
}

impl AttemptCost {
    /// The attempt's finished calls under `prices`.
    pub fn cost(&self, prices: &PriceTable) -> Amount {
        let mut amount = Amount::default();
        for step in &self.steps {
            amount.add_call(step.cost(prices));
        }
        amount
    }
}

impl CostLedger {
    /// An empty ledger.
    pub fn new() -> CostLedger {
        CostLedger::default()
    }

    /// Folds one event of the session.
    pub fn apply(&mut self, env: &Envelope) {
        self.apply_ref(EventRef::of(env));
    }

    /// Folds one event of the session, borrowed in parts (what a live fold has).
    pub fn apply_ref(&mut self, e: EventRef<'_>) {
        match e.event {
            Event::CompactionCall {
                model_id,
                finished,
                usage,
                ..
            } => {
                self.calls_since_compaction += 1;
                self.compaction_calls.push(StepCost {
                    step: 0,
                    model_id: model_id.clone(),
                    tokens: finished.then(|| BilledTokens::of(usage, None)).flatten(),
                });
                return;
            }
            Event::CompactionApplied { shortened, .. } => {
                // A summary whose calls were reported is priced from them.
                if *shortened && self.calls_since_compaction == 0 {
                    self.compaction_summaries += 1;
                }
                self.calls_since_compaction = 0;
                return;
            }
            // A chunk costs nothing the step's usage does not say.
            Event::Chunk { .. } => return,
            _ => {}
        }
        match self.facts.push_ref(e) {
            Some(FactChange::Turn {
                turn,
                stage: TurnStage::Started,
            }) => self.attempt_started(turn),
            Some(FactChange::Step { turn, step, stage }) => {
                let step = &self.facts.turns()[turn].steps[step];
                let cost = step.end.as_ref().map(|end| StepCost {
                    step: step.step,
                    model_id: end.model_id.clone(),
                    tokens: BilledTokens::of(
                        &end.usage,
                        mull_core::price::cache_write_tokens(end.provider_metadata.as_ref()),
                    ),
                });
                let Some(attempt) = self.attempt(turn) else {
                    return;
                };
                match (stage, cost) {
                    (StepStage::Retried, _) => attempt.retried_calls += 1,
                    (StepStage::Finished, Some(cost)) => attempt.steps.push(cost),
                    _ => {}
                }
            }
            Some(FactChange::Turn { turn, stage }) => {
                let fact = &self.facts.turns()[turn];
                let model_error = fact.failure.as_ref().is_some_and(|f| f.model_error);
                let status = fact.status();
                let unfinished = fact.unfinished_call().map(str::to_owned);
                let Some(attempt) = self.attempt(turn) else {
                    return;
                };
                match stage {
                    TurnStage::Failed => attempt.failed_on_model_error |= model_error,
                    TurnStage::Finished => {
                        attempt.status = status;
                        attempt.unfinished_call = unfinished;
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// A turn attempt began: it joins its request's attempts.
    fn attempt_started(&mut self, turn: usize) {
        let fact = &self.facts.turns()[turn];
        let Some(start) = &fact.start else { return };
        let attempt = AttemptCost {
            turn_id: fact.turn_id.clone().unwrap_or_default(),
            attempt: start.attempt,
            status: TurnStatus::Running,
            steps: Vec::new(),
            retried_calls: 0,
            unfinished_call: None,
            failed_on_model_error: false,
        };
        let request = match self
            .requests
            .iter()
            .rposition(|r| r.request_id == start.request_id)
        {
            Some(request) => request,
            None => {
                self.requests.push(RequestCost {
                    request_id: start.request_id.clone(),
                    attempts: Vec::new(),
                });
                self.requests.len() - 1
            }
        };
        self.requests[request].attempts.push(attempt);
        let at = (request, self.requests[request].attempts.len() - 1);
        self.attempts.resize(turn + 1, None);
        self.attempts[turn] = Some(at);
    }

    /// The attempt of the facts' turn at `turn`, when its start was seen.
    fn attempt(&mut self, turn: usize) -> Option<&mut AttemptCost> {
        let (request, attempt) = (*self.attempts.get(turn)?)?;
        Some(&mut self.requests[request].attempts[attempt])
    }
    /// The ledger priced with `prices`.
    pub fn totals(&self, prices: &PriceTable) -> CostTotals {
        let mut totals = CostTotals {
            compaction_summaries: self.compaction_summaries,
            ..CostTotals::default()
        };
        for request in &self.requests {
            let last = request.attempts.len().saturating_sub(1);
            for (i, attempt) in request.attempts.iter().enumerate() {
                let mut amount = attempt.cost(prices);
                // A call cut short was billed for what it streamed, but nobody reported it.
                amount.unknown_calls += u32::from(attempt.unfinished_call.is_some());
                totals.total.add(&amount);
                let bucket = if i < last {
                    &mut totals.superseded
                } else {
                    match attempt.status {
                        TurnStatus::Completed => &mut totals.completed,
                        TurnStatus::Aborted => &mut totals.aborted,
                        TurnStatus::Error | TurnStatus::Running | TurnStatus::Interrupted => {
                            &mut totals.failed
                        }
                    }
                };
                bucket.add(&amount);
                totals.retried_calls += attempt.retried_calls;
                totals.unfinished_calls += u32::from(attempt.unfinished_call.is_some());
                for step in &attempt.steps {
                    totals.add_tokens(step, prices);
                }
            }
        }
        for call in &self.compaction_calls {
            let cost = call.cost(prices);
            totals.total.add_call(cost);
            totals.compaction.add_call(cost);
            totals.add_tokens(call, prices);
        }
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use mull_core::{EntryPath, ModelErrorKind, ModelErrorRecord, StepReport, ToolChoice, Usage};
    use serde_json::{json, Value};

    fn env(turn: Option<&str>, event: Event) -> Envelope {
        Envelope {
            seq: 0,
            session_id: "s".into(),
            turn_id: turn.map(str::to_owned),
            at: Utc.timestamp_opt(0, 0).single().expect("time"),
            v: 1,
            event,
        }
    }

    fn started(request: &str, attempt: u32) -> Event {
        Event::TurnStarted {
            request_id: request.into(),
            message_id: "m".into(),
            entry: EntryPath::SaveMessages,
            continuation: false,
            attempt,
            body: json!({}),
        }
    }

    fn configured(step: u32, model: &str) -> Event {
        Event::StepConfigured {
            step,
            model_id: model.into(),
            active_tools: None,
            tool_choice: ToolChoice::Auto,
            system: None,
            message_count: 1,
            overrides: Vec::new(),
            request_hash: None,
        }
    }

    fn finished_step(step: u32, model: &str, usage: Usage, meta: Option<Value>) -> Event {
        Event::StepFinished {
            record: Box::new(StepReport {
                step,
                model_id: model.into(),
                usage,
                provider_metadata: meta,
                ..StepReport::default()
            }),
        }
    }

    fn ended(status: TurnStatus) -> Event {
        Event::TurnFinished {
            request_id: "r".into(),
            status,
            error: None,
            steps: 1,
            usage: Usage::default(),
            response_owed: false,
        }
    }

    fn usage(input: u64, cached: u64, output: u64) -> Usage {
        Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cached_input_tokens: Some(cached),
            ..Usage::default()
        }
    }

    #[test]
    fn a_session_is_priced_by_outcome_with_unknowns_counted_apart() {
        let mut ledger = CostLedger::new();
        let events = vec![
            // Turn 1 completes in two steps on a priced model, the first with a cache write.
            env(Some("t1"), started("r1", 0)),
            env(Some("t1"), configured(0, "claude-sonnet-4-5-20250929")),
            env(
                Some("t1"),
                finished_step(
                    0,
                    "claude-sonnet-4-5-20250929",
                    usage(1_000_000, 0, 0),
                    Some(json!({"anthropic": {"cache_creation_input_tokens": 1_000_000}})),
                ),
            ),
            env(Some("t1"), configured(1, "claude-sonnet-4-5-20250929")),
            env(
                Some("t1"),
                Event::ModelRetried {
                    step: 1,
                    attempt: 0,
                    error: "529".into(),
                    delay_ms: 1,
                },
            ),
            env(
                Some("t1"),
                finished_step(
                    1,
                    "claude-sonnet-4-5-20250929",
                    usage(1_000_000, 1_000_000, 1_000_000),
                    None,
                ),
            ),
            env(Some("t1"), ended(TurnStatus::Completed)),
            // Turn 2 overflows, is compacted, and its second attempt is cancelled mid-call.
            env(Some("t2"), started("r2", 0)),
            env(Some("t2"), configured(0, "gpt-4o-mini")),
            env(
                Some("t2"),
                Event::TurnFailed {
                    request_id: Some("r2".into()),
                    stage: mull_core::ErrorStage::Stream,
                    messages_persisted: true,
                    classification: None,
                    error: "too long".into(),
                    model_error: Some(ModelErrorRecord {
                        kind: ModelErrorKind::InvalidRequest,
                        message: "too long".into(),
                        status: Some(400),
                        retry_after_ms: None,
                        body: None,
                    }),
                },
            ),
            env(Some("t2"), ended(TurnStatus::Error)),
            env(
                None,
                Event::CompactionApplied {
                    reason: mull_core::CompactionReason::Reactive,
                    attempt: 1,
                    shortened: true,
                    replaced_ids: vec!["a".into(), "b".into()],
                    summary: None,
                    tokens_before: 10,
                    tokens_after: 5,
                },
            ),
            env(Some("t3"), started("r2", 1)),
            env(Some("t3"), configured(0, "gpt-4o-mini")),
            env(
                Some("t3"),
                finished_step(0, "gpt-4o-mini", Usage::default(), None),
            ),
            env(Some("t3"), configured(1, "local")),
            env(Some("t3"), ended(TurnStatus::Aborted)),
        ];
        for e in &events {
            ledger.apply(e);
        }
        assert_eq!(ledger.requests.len(), 2);
        assert_eq!(ledger.requests[1].attempts.len(), 2);
        let second = &ledger.requests[1].attempts[0];
        assert!(second.failed_on_model_error);
        assert_eq!(second.unfinished_call.as_deref(), Some("gpt-4o-mini"));
        assert_eq!(
            ledger.requests[1].attempts[1].unfinished_call.as_deref(),
            Some("local")
        );

        let totals = ledger.totals(&PriceTable::defaults());
        // Step 0: 1M cache-write tokens at 3.75. Step 1: 1M cache reads at 0.30 + 1M out at 15.
        assert!((totals.completed.dollars - (3.75 + 0.30 + 15.0)).abs() < 1e-9);
        assert_eq!(totals.completed.priced_calls, 2);
        assert!((totals.cache_write_dollars - 3.75).abs() < 1e-9);
        assert!((totals.cache_read_dollars - 0.30).abs() < 1e-9);
        assert_eq!(totals.tokens.uncached_input, 0);
        // The aborted attempt's finished step reported no usage: unknown, not free.
        // So is the call it was cancelled in, and the one the first attempt failed in.
        assert_eq!(totals.aborted.show(), "unknown (2 calls)");
        assert_eq!(totals.superseded.show(), "unknown (1 call)");
        assert_eq!(totals.total.show(), "$19.050000 + 3 calls of unknown cost");
        assert_eq!(totals.retried_calls, 1);
        assert_eq!(totals.unfinished_calls, 2);
        assert_eq!(totals.compaction_summaries, 1);

        // With no price table every finished call is unknown.
        let unpriced = ledger.totals(&PriceTable::new());
        assert_eq!(unpriced.total.show(), "unknown (5 calls)");
    }

    fn compaction_call(model: &str, usage: Option<Usage>) -> Event {
        Event::CompactionCall {
            provider: "test".into(),
            model_id: model.into(),
            finished: usage.is_some(),
            usage: usage.unwrap_or_default(),
        }
    }

    fn compacted(shortened: bool) -> Event {
        Event::CompactionApplied {
            reason: mull_core::CompactionReason::Threshold,
            attempt: 1,
            shortened,
            replaced_ids: Vec::new(),
            summary: None,
            tokens_before: 10,
            tokens_after: 5,
        }
    }

    #[test]
    fn compaction_calls_are_priced_and_unreported_summaries_stay_unknown() {
        let mut ledger = CostLedger::new();
        for event in [
            // A summary whose call reported usage: priced.
            compaction_call("gpt-4o-mini", Some(usage(1_000_000, 0, 1_000_000))),
            compacted(true),
            // A call that failed before usage arrived: unknown; the compaction shortened nothing.
            compaction_call("gpt-4o-mini", None),
            compacted(false),
            // A summary from a summarizer that reported no call (an older log): unknown.
            compacted(true),
        ] {
            ledger.apply(&env(None, event));
        }
        let totals = ledger.totals(&PriceTable::defaults());
        // gpt-4o-mini: 1M input at 0.15 + 1M output at 0.60.
        assert!(
            (totals.compaction.dollars - 0.75).abs() < 1e-9,
            "{totals:?}"
        );
        assert_eq!(
            totals.compaction.show(),
            "$0.750000 + 1 call of unknown cost"
        );
        assert_eq!(totals.total.show(), "$0.750000 + 1 call of unknown cost");
        assert_eq!(totals.tokens.output, 1_000_000);
        assert_eq!(totals.compaction_summaries, 1);
    }
}
