//! `mull stats DB [--prices FILE]`: sessions, turns, events by kind, tokens, and what the model
//! calls cost (the log's cost ledger priced with the built-in table, or a file laid over it).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use mull_core::{PriceTable, Usage};
use mull_store::{CostLedger, CostTotals, LogReader};

/// Events read per page while counting kinds.
const PAGE: usize = 8192;

/// Prints the counts of a log, its costs priced with `prices` (a price file) over the defaults.
pub fn run(db: &Path, prices: Option<&Path>) -> Result<()> {
    let table = match prices {
        None => PriceTable::defaults(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the price file {}", path.display()))?;
            PriceTable::defaults()
                .parse(&text)
                .with_context(|| format!("reading the price file {}", path.display()))?
        }
    };
    let reader = LogReader::open(db).with_context(|| format!("opening {}", db.display()))?;
    print!("{}", report(&reader, &table)?);
    Ok(())
}

/// The counts, as printed.
pub fn report(reader: &LogReader, prices: &PriceTable) -> Result<String> {
    let sessions = reader.sessions()?;
    let mut turns = 0usize;
    let mut by_status: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut usage = Usage::default();
    let mut unreported = 0usize;
    let mut cost = CostTotals::default();
    for session in &sessions {
        let mut ledger = CostLedger::new();
        reader.for_each_session_event(&session.session_id, 0, |env| ledger.apply(&env))?;
        cost.add(&ledger.totals(prices));
        for turn in reader.turns(&session.session_id)? {
            turns += 1;
            *by_status.entry(turn.status.as_str()).or_default() += 1;
            if turn.usage.input_tokens.is_none() && turn.usage.output_tokens.is_none() {
                unreported += 1;
            }
            usage.add(&turn.usage);
        }
    }
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut events = 0u64;
    let mut after = 0u64;
    loop {
        let page = reader.page(after, PAGE)?;
        for env in &page {
            *kinds.entry(env.kind().to_owned()).or_default() += 1;
            after = env.seq;
        }
        events += page.len() as u64;
        if page.len() < PAGE {
            break;
        }
    }
    let mut out = String::new();
    out.push_str(&format!("sessions  {}\n", sessions.len()));
    let statuses: Vec<String> = by_status.iter().map(|(s, n)| format!("{n} {s}")).collect();
    out.push_str(&format!("turns     {turns} ({})\n", statuses.join(", ")));
    out.push_str(&format!("events    {events}\n"));
    for (kind, count) in &kinds {
        out.push_str(&format!("  {kind:<26} {count:>10}\n"));
    }
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
    out.push_str(&cost_lines(&cost));
    Ok(out)
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
    out.push_str(&format!(
        "  no usage     {} retried · {} unfinished · {} compaction summaries (their tokens are not in the log)\n",
        cost.retried_calls, cost.unfinished_calls, cost.compaction_summaries
    ));
    out
}
