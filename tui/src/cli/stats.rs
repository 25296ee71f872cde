//! `mull stats DB`: sessions, turns, events by kind and tokens.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use mull_core::Usage;
use mull_store::LogReader;

/// Events read per page while counting kinds.
const PAGE: usize = 8192;

/// Prints the counts of a log.
pub fn run(db: &Path) -> Result<()> {
    let reader = LogReader::open(db).with_context(|| format!("opening {}", db.display()))?;
    print!("{}", report(&reader)?);
    Ok(())
}

/// The counts, as printed.
pub fn report(reader: &LogReader) -> Result<String> {
    let sessions = reader.sessions()?;
    let mut turns = 0usize;
    let mut by_status: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut usage = Usage::default();
    for session in &sessions {
        for turn in reader.turns(&session.session_id)? {
            turns += 1;
            *by_status.entry(turn.status.as_str()).or_default() += 1;
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
    let n = |v: Option<u64>| v.unwrap_or(0);
    out.push_str(&format!(
        "tokens    in {} · out {} · cached {} · reasoning {} · total {}\n",
        n(usage.input_tokens),
        n(usage.output_tokens),
        n(usage.cached_input_tokens),
        n(usage.reasoning_tokens),
        usage.total()
    ));
    Ok(out)
}
