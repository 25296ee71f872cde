//! Tool statistics: per tool, how many calls, how many failed, how many a hook blocked or
//! answered itself, and how long the calls that ran took. One fold for a turn's calls and a
//! session's, so two tables built from different reads cannot disagree on what a call counts
//! as.

use std::collections::BTreeMap;

use mull_core::DecisionAction;

use crate::projection::{SessionToolCalls, ToolCallRecord};

/// Per-tool usage: calls, failures, decisions that kept a call from running, durations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolUsage {
    pub tool: String,
    pub calls: usize,
    /// Calls that ran (or were meant to) and failed; blocked and substituted calls are not.
    pub failures: usize,
    /// Calls `before_tool_call` blocked.
    pub blocks: usize,
    /// Calls `before_tool_call` answered with its own output.
    pub substitutions: usize,
    /// Durations of calls that ran, in milliseconds.
    pub durations_ms: Vec<u64>,
}

impl ToolUsage {
    /// The mean duration of calls that ran; `None` when none did.
    pub fn mean_ms(&self) -> Option<f64> {
        if self.durations_ms.is_empty() {
            return None;
        }
        let sum: u64 = self.durations_ms.iter().sum();
        Some(sum as f64 / self.durations_ms.len() as f64)
    }

    /// The 95th-percentile duration (nearest rank) of calls that ran; `None` when none did.
    pub fn p95_ms(&self) -> Option<u64> {
        if self.durations_ms.is_empty() {
            return None;
        }
        let mut sorted = self.durations_ms.clone();
        sorted.sort_unstable();
        let rank = (sorted.len() * 95).div_ceil(100).max(1);
        sorted.get(rank - 1).copied()
    }
}

/// What the usage tables need to know about one call, whether it came from a timeline row
/// (this turn) or from the log's lifecycle events (the session): both count through
/// [`tool_usage`], so the two tables cannot disagree on what a call counts as.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallFacts<'a> {
    pub tool: &'a str,
    pub decision: Option<DecisionAction>,
    pub success: Option<bool>,
    pub duration_ms: Option<u64>,
}

impl<'a> From<&'a ToolCallRecord> for CallFacts<'a> {
    fn from(call: &'a ToolCallRecord) -> Self {
        CallFacts {
            tool: &call.tool,
            decision: call.decision,
            success: call.success,
            duration_ms: call.duration_ms,
        }
    }
}

/// Tool usage over calls, sorted by tool name. A call whose decision kept it from running
/// (blocked, substituted, invalid input, a failed hook) has a recorded duration of zero that
/// measures nothing, so it adds no duration.
pub fn tool_usage<'a>(calls: impl IntoIterator<Item = CallFacts<'a>>) -> Vec<ToolUsage> {
    let mut by_tool: BTreeMap<&str, ToolUsage> = BTreeMap::new();
    for call in calls {
        let usage = by_tool.entry(call.tool).or_insert_with(|| ToolUsage {
            tool: call.tool.to_owned(),
            ..ToolUsage::default()
        });
        usage.calls += 1;
        match call.decision {
            Some(DecisionAction::Block) => usage.blocks += 1,
            Some(DecisionAction::Substitute) => usage.substitutions += 1,
            _ if call.success == Some(false) => usage.failures += 1,
            _ => {}
        }
        let ran = call.decision.is_none_or(DecisionAction::executes);
        if let Some(ms) = call.duration_ms.filter(|_| ran) {
            usage.durations_ms.push(ms);
        }
    }
    by_tool.into_values().collect()
}

/// Tool usage over every call of a session.
pub fn session_tool_usage(calls: &SessionToolCalls) -> Vec<ToolUsage> {
    tool_usage(calls.calls.iter().map(CallFacts::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(
        tool: &str,
        decision: Option<DecisionAction>,
        success: Option<bool>,
        duration_ms: Option<u64>,
    ) -> CallFacts<'_> {
        CallFacts {
            tool,
            decision,
            success,
            duration_ms,
        }
    }

    #[test]
    fn p95_is_the_nearest_rank() {
        let usage = |durations_ms: Vec<u64>| ToolUsage {
            durations_ms,
            ..ToolUsage::default()
        };
        // Rank ⌈0.95 n⌉ of the sorted durations, never an interpolation.
        assert_eq!(usage((1..=20).rev().collect()).p95_ms(), Some(19));
        assert_eq!(usage((1..=10).collect()).p95_ms(), Some(10));
        assert_eq!(usage((1..=100).collect()).p95_ms(), Some(95));
        assert_eq!(usage(vec![7]).p95_ms(), Some(7));
        assert_eq!(usage((1..=20).collect()).mean_ms(), Some(10.5));
        assert_eq!(usage(Vec::new()).p95_ms(), None);
        assert_eq!(usage(Vec::new()).mean_ms(), None);
    }

    #[test]
    fn tool_usage_counts_each_outcome_and_times_only_calls_that_ran() {
        use DecisionAction::{Allow, Block, Invalid, Rewrite, Substitute};
        let usage = tool_usage([
            facts("search", Some(Allow), Some(true), Some(100)),
            facts("search", Some(Rewrite), Some(true), Some(300)),
            facts("search", Some(Allow), Some(false), Some(50)),
            // Still running: counted, not yet timed.
            facts("search", Some(Allow), None, None),
            // Kept from running: the recorded 0 ms measures nothing.
            facts("rm", Some(Block), Some(false), Some(0)),
            facts("rm", Some(Block), Some(true), Some(0)),
            facts("fetch", Some(Substitute), Some(true), Some(0)),
            facts("fetch", Some(Allow), Some(true), Some(8)),
            facts("bad", Some(Invalid), Some(false), Some(0)),
            // No decision recorded: what was measured counts.
            facts("client", None, Some(true), Some(12)),
        ]);
        let rows: Vec<_> = usage
            .iter()
            .map(|u| {
                (
                    u.tool.as_str(),
                    u.calls,
                    u.failures,
                    u.blocks,
                    u.substitutions,
                    u.mean_ms(),
                    u.p95_ms(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("bad", 1, 1, 0, 0, None, None),
                ("client", 1, 0, 0, 0, Some(12.0), Some(12)),
                ("fetch", 2, 0, 0, 1, Some(8.0), Some(8)),
                ("rm", 2, 0, 2, 0, None, None),
                ("search", 4, 1, 0, 0, Some(150.0), Some(300)),
            ]
        );
    }
}
