//! `mull stats DB [--prices FILE]`: sessions, turns, events by kind, tokens, and what the model
//! calls cost (the log's cost ledger priced with the built-in table, or a file laid over it).
//!
//! A log that reads without rows files beside it hold (see [`ReadLog::side_damage`]) still gets
//! its counts printed, of what it reads, and then an error naming the damage: the exit status
//! is 1, so the counts are never taken for the whole log's.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use mull_core::{BudgetMeasure, BudgetScope, Event, PriceTable, Usage};
use mull_store::{CostLedger, CostTotals, ReadLog, TurnSummary};

/// Prints the counts of a log, its costs priced with `prices` (a price file) over the defaults.
pub fn run(db: &Path, prices: Option<&Path>) -> Result<()> {
    let table = price_table(prices)?;
    let reader = crate::cli::pg::open_log(db)?;
    print!("{}", report(&*reader, &table)?);
    reader
        .ensure_whole()
        .context("the counts above leave out rows the log lacks")?;
    Ok(())
}

/// The built-in prices with the price file at `prices` laid over them.
pub fn price_table(prices: Option<&Path>) -> Result<PriceTable> {
    match prices {
        None => Ok(PriceTable::defaults()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the price file {}", path.display()))?;
            PriceTable::defaults()
                .parse(&text)
                .with_context(|| format!("reading the price file {}", path.display()))
        }
    }
}

/// The counts, as printed.
pub fn report(reader: &dyn ReadLog, prices: &PriceTable) -> Result<String> {
    let sessions = reader.sessions()?;
    let mut tally = Tally::new(sessions.len());
    for session in &sessions {
        let mut ledger = CostLedger::new();
        reader.for_each_session_event(&session.session_id, 0, &mut |env| {
            ledger.apply(&env);
            tally.event(env.kind());
            if let Event::BudgetExceeded { scope, measure, .. } = &env.event {
                tally.budget_stop(*scope, *measure);
            }
        })?;
        tally.cost.add(&ledger.totals(prices));
        for turn in reader.turns(&session.session_id)? {
            tally.turn(&turn);
        }
    }
    Ok(tally.render())
}

/// What `mull stats` counts, whatever the log is stored in.
#[derive(Default)]
pub struct Tally {
    sessions: usize,
    turns: usize,
    by_status: BTreeMap<&'static str, usize>,
    usage: Usage,
    unreported: usize,
    /// The sessions' cost ledgers, priced.
    pub cost: CostTotals,
    kinds: BTreeMap<String, u64>,
    events: u64,
    /// Model calls a budget refused, by the limit that refused them (`turn tokens`, …).
    budget_stops: BTreeMap<String, u64>,
}

impl Tally {
    /// Counts for a log of `sessions` sessions.
    pub fn new(sessions: usize) -> Tally {
        Tally {
            sessions,
            ..Tally::default()
        }
    }

    /// Counts a turn.
    pub fn turn(&mut self, turn: &TurnSummary) {
        self.turns += 1;
        *self.by_status.entry(turn.status.as_str()).or_default() += 1;
        if turn.usage.input_tokens.is_none() && turn.usage.output_tokens.is_none() {
            self.unreported += 1;
        }
        self.usage.add(&turn.usage);
    }

    /// Counts an event of `kind`.
    pub fn event(&mut self, kind: &str) {
        self.events += 1;
        match self.kinds.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.kinds.insert(kind.to_owned(), 1);
            }
        }
    }

    /// Counts a `budget_exceeded`: a model call the `scope`'s `measure` limit refused.
    pub fn budget_stop(&mut self, scope: BudgetScope, measure: BudgetMeasure) {
        let scope = match scope {
            BudgetScope::Turn => "turn",
            BudgetScope::Session => "session",
            _ => "inherited",
        };
        let measure = match measure {
            BudgetMeasure::Tokens => "tokens",
            BudgetMeasure::Dollars => "dollars",
            _ => "calls",
        };
        *self
            .budget_stops
            .entry(format!("{scope} {measure}"))
            .or_default() += 1;
    }

    /// The counts, as printed.
    pub fn render(&self) -> String {
        let Tally {
            sessions,
            turns,
            by_status,
            usage,
            unreported,
            cost,
            kinds,
            events,
            budget_stops,
        } = self;
        let (turns, unreported) = (*turns, *unreported);
        let mut out = String::new();
        out.push_str(&format!("sessions  {sessions}\n"));
        let statuses: Vec<String> = by_status.iter().map(|(s, n)| format!("{n} {s}")).collect();
        out.push_str(&format!("turns     {turns} ({})\n", statuses.join(", ")));
        out.push_str(&format!("events    {events}\n"));
        let rows = kinds
            .iter()
            .map(|(kind, count)| vec![kind.clone(), count.to_string()])
            .collect();
        out.push_str(&super::table::render(None, &[1], rows));
        // A count no provider reported is unknown, not zero.
        let n = |v: Option<u64>| v.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
        let total = usage
            .total_tokens
            .or(match (usage.input_tokens, usage.output_tokens) {
                (Some(input), Some(output)) => Some(input + output),
                _ => None,
            });
        out.push_str(&format!(
            "tokens    in {} · out {} · cached {} · reasoning {} · total {}\n",
            n(usage.input_tokens),
            n(usage.output_tokens),
            n(usage.cached_input_tokens),
            n(usage.reasoning_tokens),
            n(total)
        ));
        if unreported > 0 {
            out.push_str(&format!(
                "          {unreported} of {turns} turns reported no usage: their tokens are not counted\n"
            ));
        }
        out.push_str(&cost_lines(cost));
        out.push_str(&budget_line(budget_stops));
        out
    }
}

/// The stops budgets made (a `budget_exceeded` each: a turn's, once per request), by the limit
/// reached; nothing when there were none.
fn budget_line(stops: &BTreeMap<String, u64>) -> String {
    let total: u64 = stops.values().sum();
    if total == 0 {
        return String::new();
    }
    let limits: Vec<String> = stops
        .iter()
        .map(|(limit, n)| format!("{limit} {n}"))
        .collect();
    format!(
        "budgets   {total} {} at a limit, no further model call made: {}\n",
        if total == 1 { "stop" } else { "stops" },
        limits.join(" · ")
    )
}

/// The cost section: the total, by outcome, the cache's share, and the calls that reported no
/// usage to the log.
fn cost_lines(cost: &CostTotals) -> String {
    let mut out = format!("cost      {}\n", cost.total.show());
    out.push_str(&format!(
        "  by outcome   completed {} · aborted {} · error {} · replaced by a retry {}\n",
        cost.completed.show(),
        cost.aborted.show(),
        cost.failed.show(),
        cost.superseded.show()
    ));
    out.push_str(&format!(
        "  cache        read {} tokens ${:.6} · write {} tokens ${:.6}\n",
        cost.tokens.cache_read,
        cost.cache_read_dollars,
        cost.tokens.cache_write,
        cost.cache_write_dollars
    ));
    if cost.compaction.priced_calls + cost.compaction.unknown_calls > 0 {
        out.push_str(&format!(
            "  compaction   {} (the summarizer's model calls)\n",
            cost.compaction.show()
        ));
    }
    out.push_str(&format!(
        "  no usage     {} retried · {} unfinished · {} compaction summaries (their tokens are not in the log)\n",
        cost.retried_calls, cost.unfinished_calls, cost.compaction_summaries
    ));
    out
}
