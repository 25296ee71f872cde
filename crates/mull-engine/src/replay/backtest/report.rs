//! What a backtest found: the changed decisions, where each recording stops being usable, how
//! turns end, and a summary — built from the store's diff of the recorded and the re-executed
//! run, and rendered as a table or serialized as JSON.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use mull_core::{DecisionAction, Envelope};
use mull_store::diff::{diff_runs, Aspect, CallRun, DiffOptions, Difference, Run};
use serde::Serialize;
use serde_json::Value;

/// How many rows of each list the table shows (the JSON has them all).
const TABLE_ROWS: usize = 20;

/// A tool decision as the log records it (`tool_decided`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// `allow`, `rewrite`, `block`, `substitute`, `invalid` or `hook_failed`.
    pub action: String,
    pub reason: Option<String>,
    /// The input the tool runs with (or would have).
    pub effective_input: Value,
    /// The output the model sees instead of running (block, substitute).
    pub output: Value,
}

impl Decision {
    fn from_call(call: &CallRun) -> Option<Decision> {
        let facts = call.decided.as_ref()?;
        let field = |name: &str| facts.field(name).cloned().unwrap_or(Value::Null);
        Some(Decision {
            action: field("action").as_str().unwrap_or_default().to_owned(),
            reason: field("reason").as_str().map(str::to_owned),
            effective_input: field("effective_input"),
            output: field("output"),
        })
    }

    /// Whether the tool runs under this decision.
    pub fn executes(&self) -> bool {
        [DecisionAction::Allow, DecisionAction::Rewrite]
            .iter()
            .any(|a| a.as_str() == self.action)
    }

    /// `block (policy x: weather may not run)`.
    fn label(&self) -> String {
        match &self.reason {
            Some(reason) => format!("{} ({reason})", self.action),
            None => self.action.clone(),
        }
    }
}

/// One tool call whose decision would change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionChange {
    pub session_id: String,
    /// The turn, counted from 1.
    pub turn: usize,
    pub step: Option<u32>,
    /// The call, counted from 1 within its step.
    pub call: Option<usize>,
    pub tool: Option<String>,
    pub call_id: Option<String>,
    /// The recorded `tool_decided` event's seq.
    pub recorded_seq: Option<u64>,
    /// What the recording decided (`None`: the recording made no decision there).
    pub old: Option<Decision>,
    /// What the new code decides.
    pub new: Option<Decision>,
}

/// Why the comparison of a session ends before its recording does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopKind {
    /// The recorded model output cannot be served honestly past this point.
    Unusable,
    /// The re-execution stopped issuing the recording's inputs after an earlier turn wrote
    /// differently, so this turn was not re-executed.
    NotReissued,
}

/// Where the comparison of a session ends, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stop {
    pub kind: StopKind,
    pub turn: usize,
    /// The recorded turn's id (a fork before it continues from there).
    pub turn_id: Option<String>,
    pub step: Option<u32>,
    pub call: Option<usize>,
    pub tool: Option<String>,
    /// The event and field that differ there.
    pub event: String,
    pub field: String,
    pub recorded_seq: Option<u64>,
    pub reason: String,
}

impl Stop {
    /// `turn 2, step 0, call 1 (weather)`.
    pub fn location(&self) -> String {
        let mut out = format!("turn {}", self.turn);
        if let Some(step) = self.step {
            let _ = write!(out, ", step {step}");
        }
        if let Some(call) = self.call {
            let _ = write!(out, ", call {call}");
            if let Some(tool) = &self.tool {
                let _ = write!(out, " ({tool})");
            }
        }
        out
    }
}

/// A turn whose status differs, before any point where the recording stopped being usable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ending {
    pub turn: usize,
    pub field: String,
    pub recorded: Value,
    pub now: Value,
}

/// One session's backtest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionBacktest {
    pub session_id: String,
    /// Why the session was not re-executed (a fork, a recording the engine cannot re-issue).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    pub recorded_turns: usize,
    pub changes: Vec<DecisionChange>,
    /// Where the comparison ends early; `None` when the whole recording was compared.
    pub stop: Option<Stop>,
    /// Turns whose status differs (before `stop`).
    pub endings: Vec<Ending>,
}

impl SessionBacktest {
    pub(super) fn skipped(session_id: String, why: String) -> SessionBacktest {
        SessionBacktest {
            session_id,
            skipped: Some(why),
            recorded_turns: 0,
            changes: Vec::new(),
            stop: None,
            endings: Vec::new(),
        }
    }

    /// Re-executed to the end with nothing different.
    pub fn is_same(&self) -> bool {
        self.skipped.is_none()
            && self.changes.is_empty()
            && self.stop.is_none()
            && self.endings.is_empty()
    }

    /// Whether the recording became unusable.
    pub fn is_unusable(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.kind == StopKind::Unusable)
    }
}

/// Per tool: how many of its decisions would change, and how.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolSummary {
    pub changed: usize,
    /// Recorded as run, now blocked.
    pub newly_blocked: usize,
    /// Recorded as not run, now run.
    pub newly_allowed: usize,
    /// Any other change (a different reason, input or substitute).
    pub other: usize,
}

/// The totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BacktestSummary {
    pub sessions: usize,
    pub skipped: usize,
    pub same: usize,
    pub decisions_changed: usize,
    pub sessions_with_changes: usize,
    pub sessions_unusable: usize,
    pub sessions_ending_differently: usize,
    pub per_tool: BTreeMap<String, ToolSummary>,
}

/// A whole backtest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BacktestReport {
    pub summary: BacktestSummary,
    pub sessions: Vec<SessionBacktest>,
}

impl BacktestReport {
    pub(super) fn new(sessions: Vec<SessionBacktest>) -> BacktestReport {
        let mut summary = BacktestSummary {
            sessions: sessions.len(),
            ..BacktestSummary::default()
        };
        for s in &sessions {
            summary.skipped += usize::from(s.skipped.is_some());
            summary.same += usize::from(s.is_same());
            summary.sessions_with_changes += usize::from(!s.changes.is_empty());
            summary.sessions_unusable += usize::from(s.is_unusable());
            summary.sessions_ending_differently += usize::from(!s.endings.is_empty());
            for change in &s.changes {
                summary.decisions_changed += 1;
                let tool = change.tool.clone().unwrap_or_else(|| "?".to_owned());
                let entry = summary.per_tool.entry(tool).or_default();
                entry.changed += 1;
                let ran = |d: &Option<Decision>| d.as_ref().is_some_and(Decision::executes);
                match (ran(&change.old), ran(&change.new)) {
                    (true, false) if change.new.as_ref().is_some_and(|d| d.action == "block") => {
                        entry.newly_blocked += 1
                    }
                    (false, true) => entry.newly_allowed += 1,
                    _ => entry.other += 1,
                }
            }
        }
        BacktestReport { summary, sessions }
    }

    /// Every changed decision, session by session.
    pub fn changes(&self) -> impl Iterator<Item = &DecisionChange> {
        self.sessions.iter().flat_map(|s| s.changes.iter())
    }

    /// A readable table: the summary, the changed decisions, where recordings became unusable,
    /// turns that end differently, skipped sessions, and the per-tool counts.
    pub fn table(&self) -> String {
        let s = &self.summary;
        let mut out = format!(
            "backtest: {} ({} re-executed, {} skipped) · {} changed in {} · {} unusable from a change · {} ending differently · {} unchanged\n",
            count(s.sessions, "session"),
            s.sessions - s.skipped,
            s.skipped,
            count(s.decisions_changed, "decision"),
            count(s.sessions_with_changes, "session"),
            count(s.sessions_unusable, "recording"),
            count(s.sessions_ending_differently, "session"),
            s.same,
        );
        let changes: Vec<&DecisionChange> = self.changes().collect();
        if !changes.is_empty() {
            out.push_str("\ndecisions that would change\n");
            let _ = writeln!(
                out,
                "  {:<16} {:>4} {:>4} {:>4}  {:<16} recorded → now",
                "session", "turn", "step", "call", "tool"
            );
            for c in changes.iter().take(TABLE_ROWS) {
                let show = |d: &Option<Decision>| {
                    d.as_ref()
                        .map(Decision::label)
                        .unwrap_or_else(|| "(none)".to_owned())
                };
                let _ = writeln!(
                    out,
                    "  {:<16} {:>4} {:>4} {:>4}  {:<16} {} → {}",
                    c.session_id,
                    c.turn,
                    opt(c.step),
                    opt(c.call),
                    c.tool.as_deref().unwrap_or("?"),
                    show(&c.old),
                    show(&c.new)
                );
            }
            more(&mut out, changes.len());
        }
        let stops: Vec<(&str, &Stop)> = self
            .sessions
            .iter()
            .filter_map(|s| s.stop.as_ref().map(|stop| (s.session_id.as_str(), stop)))
            .collect();
        if !stops.is_empty() {
            out.push_str("\nwhere the comparison stops (nothing after it is reported)\n");
            for (session, stop) in stops.iter().take(TABLE_ROWS) {
                let _ = writeln!(out, "  {session:<16} {}: {}", stop.location(), stop.reason);
            }
            more(&mut out, stops.len());
        }
        let endings: Vec<(&str, &Ending)> = self
            .sessions
            .iter()
            .flat_map(|s| s.endings.iter().map(move |e| (s.session_id.as_str(), e)))
            .collect();
        if !endings.is_empty() {
            out.push_str("\nturns that would end differently\n");
            for (session, e) in endings.iter().take(TABLE_ROWS) {
                let _ = writeln!(
                    out,
                    "  {session:<16} turn {}: {} {} → {}",
                    e.turn, e.field, e.recorded, e.now
                );
            }
            more(&mut out, endings.len());
        }
        let skipped: Vec<&SessionBacktest> = self
            .sessions
            .iter()
            .filter(|s| s.skipped.is_some())
            .collect();
        if !skipped.is_empty() {
            out.push_str("\nskipped\n");
            for s in skipped.iter().take(TABLE_ROWS) {
                let _ = writeln!(
                    out,
                    "  {:<16} {}",
                    s.session_id,
                    s.skipped.as_deref().unwrap_or_default()
                );
            }
            more(&mut out, skipped.len());
        }
        if !s.per_tool.is_empty() {
            out.push_str("\nper tool\n");
            let _ = writeln!(
                out,
                "  {:<16} {:>8} {:>14} {:>14} {:>6}",
                "tool", "changed", "newly blocked", "newly allowed", "other"
            );
            for (tool, t) in &s.per_tool {
                let _ = writeln!(
                    out,
                    "  {tool:<16} {:>8} {:>14} {:>14} {:>6}",
                    t.changed, t.newly_blocked, t.newly_allowed, t.other
                );
            }
        }
        out
    }
}

/// `1 session`, `2 sessions`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn opt<T: ToString>(value: Option<T>) -> String {
    value
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".to_owned())
}

fn more(out: &mut String, total: usize) {
    if total > TABLE_ROWS {
        let _ = writeln!(
            out,
            "  … and {} more (--json lists all)",
            total - TABLE_ROWS
        );
    }
}

/// Compares a recorded session with its re-execution: see the module docs of `backtest`.
pub(super) fn judge(
    session_id: &str,
    recorded: &[Envelope],
    replayed: &[Envelope],
) -> SessionBacktest {
    let a = Run::from_events("recorded", recorded);
    let b = Run::from_events("backtest", replayed);
    let options = DiffOptions {
        allow_unrelated: true,
        ignore_timing: true,
    };
    let mut out = SessionBacktest {
        session_id: session_id.to_owned(),
        skipped: None,
        recorded_turns: a.turns.len(),
        changes: Vec::new(),
        stop: None,
        endings: Vec::new(),
    };
    let diff = match diff_runs(&a, &b, &options) {
        Ok(diff) => diff,
        Err(e) => return SessionBacktest::skipped(session_id.to_owned(), e.to_string()),
    };
    let mut calls_seen = HashSet::new();
    for d in &diff.differences {
        match d.aspect {
            Aspect::Decision => {
                if !calls_seen.insert((d.turn, d.step, d.call)) {
                    continue;
                }
                let (ca, cb) = (call_of(&a, d), call_of(&b, d));
                let old = ca.and_then(Decision::from_call);
                let new = cb.and_then(Decision::from_call);
                let consequence = consequence(&old, &new, d.tool.as_deref().unwrap_or("the tool"));
                out.changes.push(DecisionChange {
                    session_id: session_id.to_owned(),
                    turn: d.turn,
                    step: d.step,
                    call: d.call,
                    tool: d.tool.clone(),
                    call_id: ca.or(cb).map(|c| c.call_id.clone()),
                    recorded_seq: d.a_seq,
                    old,
                    new,
                });
                if let Some(reason) = consequence {
                    out.stop = Some(stop(&a, d, StopKind::Unusable, reason));
                    break;
                }
            }
            Aspect::Status => out.endings.push(Ending {
                turn: d.turn,
                field: d.field.clone(),
                recorded: d.a.clone(),
                now: d.b.clone(),
            }),
            // A failed hook is reported by how the turn ends, if it changes that.
            Aspect::Error => {}
            _ => {
                let (kind, reason) = other_reason(d);
                out.stop = Some(stop(&a, d, kind, reason));
                break;
            }
        }
    }
    out
}

fn call_of<'r>(run: &'r Run, d: &Difference) -> Option<&'r CallRun> {
    let turn = run.turns.get(d.turn.checked_sub(1)?)?;
    let step = turn.steps.iter().find(|s| Some(s.step) == d.step)?;
    step.calls.get(d.call?.checked_sub(1)?)
}

fn stop(run: &Run, d: &Difference, kind: StopKind, reason: String) -> Stop {
    Stop {
        kind,
        turn: d.turn,
        turn_id: d
            .turn
            .checked_sub(1)
            .and_then(|i| run.turns.get(i))
            .and_then(|t| t.turn_id.clone()),
        step: d.step,
        call: d.call,
        tool: d.tool.clone(),
        event: d.event.clone(),
        field: d.field.clone(),
        recorded_seq: d.a_seq,
        reason,
    }
}

/// Why a changed decision leaves the rest of the recording unusable, or `None` when the model
/// sees the same thing either way (the call still runs, with the same input).
fn consequence(old: &Option<Decision>, new: &Option<Decision>, tool: &str) -> Option<String> {
    let (Some(old), Some(new)) = (old, new) else {
        return Some(format!(
            "the {} run makes no decision about this {tool} call",
            if old.is_none() { "recorded" } else { "new" }
        ));
    };
    match (old.executes(), new.executes()) {
        (true, true) if old.effective_input == new.effective_input => None,
        (true, true) => Some(format!(
            "{tool} would run with other input; the recording only has its result for the recorded input"
        )),
        (true, false) => Some(format!(
            "the model never saw the answer it would get instead ({}); the recorded later steps answer the {tool} result, so they cannot be served",
            new.action
        )),
        (false, true) => Some(format!(
            "{tool} never ran in the recording ({}), so its result is unknown",
            old.action
        )),
        (false, false) => Some(format!(
            "the model would see another answer for this {tool} call ({} instead of {}); the recorded later steps answer the old one",
            new.label(),
            old.label()
        )),
    }
}

fn other_reason(d: &Difference) -> (StopKind, String) {
    let what = format!("{}.{}", d.event, d.field);
    match d.aspect {
        Aspect::Structure if d.b.is_null() && d.field == "turn" => (
            StopKind::NotReissued,
            "not re-executed: a replay stops issuing the recording's inputs after the first turn that writes differently"
                .to_owned(),
        ),
        Aspect::Config => (
            StopKind::Unusable,
            format!(
                "{what} differs ({} → {}): the model was never sent this request, so its recorded output cannot be served",
                d.a, d.b
            ),
        ),
        _ => (
            StopKind::Unusable,
            format!(
                "{what} differs ({} → {}): the re-execution no longer follows the recording",
                super::super::divergence::clip(&d.a.to_string()),
                super::super::divergence::clip(&d.b.to_string())
            ),
        ),
    }
}
