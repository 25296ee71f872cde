//! A diff as a readable table.

use std::fmt::Write as _;

use serde_json::Value;

use super::{Aspect, Difference, RunDiff};

/// How many characters of a value a table cell shows.
const CELL: usize = 32;

impl RunDiff {
    /// The diff as a table: both runs, the first divergence, one row per difference, and the
    /// count per aspect.
    pub fn table(&self) -> String {
        let mut out = String::new();
        for (side, run) in [("A", &self.a), ("B", &self.b)] {
            let _ = writeln!(
                out,
                "{side}  {} ({} turns, {} events)",
                run.label, run.turns, run.events
            );
        }
        match &self.first_divergence {
            Some(d) => {
                let _ = writeln!(
                    out,
                    "first divergence: {}: {} → {}{}",
                    d.location(),
                    cell(d, &d.a),
                    cell(d, &d.b),
                    seqs(d)
                );
            }
            None => {
                let _ = writeln!(out, "no divergence: the runs behave alike (timing aside)");
            }
        }
        if self.differences.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "\n{:>4} {:>4} {:>4} {:<14} {:<13} {:<30} {:<CELL$}  {:<CELL$}",
            "turn", "step", "call", "tool", "aspect", "event.field", "A", "B"
        );
        for d in &self.differences {
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "{:>4} {:>4} {:>4} {:<14} {:<13} {:<30} {:<CELL$}  {:<CELL$}",
                d.turn,
                opt(d.step.map(|s| s.to_string())),
                opt(d.call.map(|c| c.to_string())),
                opt(d.tool.clone()),
                d.aspect.as_str(),
                format!("{}.{}", d.event, d.field),
                cell(d, &d.a),
                cell(d, &d.b),
            );
        }
        let counts: Vec<String> = self
            .by_aspect
            .iter()
            .map(|(aspect, n)| format!("{} {n}", aspect.as_str()))
            .collect();
        let mut out: String = out.lines().map(|l| format!("{}\n", l.trim_end())).collect();
        let _ = writeln!(
            out,
            "\n{} differences: {}",
            self.differences.len(),
            counts.join(", ")
        );
        out
    }
}

fn seqs(d: &Difference) -> String {
    let seq = |s: Option<u64>| s.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
    if d.a_seq.is_none() && d.b_seq.is_none() {
        return String::new();
    }
    format!(" (seq {} / {})", seq(d.a_seq), seq(d.b_seq))
}

/// A value as one table cell: strings bare, other JSON compact, `-` for none, cut to fit.
/// Streamed text is shown from a little before where it first differs.
fn cell(d: &Difference, value: &Value) -> String {
    let text = match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) if d.aspect == Aspect::Timing => format!("{n} ms"),
        other => other.to_string(),
    };
    let skip = match (d.aspect, &d.note) {
        (Aspect::Text | Aspect::Reasoning, Some(note)) => note
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .map(|at| at.saturating_sub(8))
            .unwrap_or(0),
        _ => 0,
    };
    let mut shown: String = text.chars().skip(skip).collect();
    if skip > 0 {
        shown.insert(0, '…');
    }
    let shown = shown.replace('\n', "⏎");
    if shown.chars().count() > CELL {
        let mut cut: String = shown.chars().take(CELL - 1).collect();
        cut.push('…');
        cut
    } else {
        shown
    }
}
