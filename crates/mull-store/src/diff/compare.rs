//! The alignment: turns, steps and tool calls paired by their ordinals, facts compared field
//! by field.

use serde_json::{json, Value};

use super::fold::{CallRun, Facts, Run, StepRun, TurnRun};
use super::{Aspect, Difference};

/// Whether two runs are of one conversation: one a fork of the other, or the same first user
/// message. (A shared session id is no evidence: two logs may each call theirs `sess_1`.)
pub(super) fn related(a: &Run, b: &Run) -> bool {
    a.lineage.contains(&b.session_id)
        || b.lineage.contains(&a.session_id)
        || a.first_user_text == b.first_user_text
}

/// Where a difference is: the turn, step and call it belongs to, and the position that orders
/// it (in the first run, or the nearest enclosing item's there).
#[derive(Clone)]
struct Place {
    turn: usize,
    step: Option<u32>,
    call: Option<usize>,
    tool: Option<String>,
    pos: usize,
}

struct Out {
    differences: Vec<Difference>,
}

impl Out {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        place: &Place,
        aspect: Aspect,
        event: &str,
        field: &str,
        a: Value,
        b: Value,
        seqs: (Option<u64>, Option<u64>),
        pos: Option<usize>,
        note: Option<String>,
    ) {
        self.differences.push(Difference {
            aspect,
            turn: place.turn,
            step: place.step,
            call: place.call,
            tool: place.tool.clone(),
            event: event.to_owned(),
            field: field.to_owned(),
            a,
            b,
            a_seq: seqs.0,
            b_seq: seqs.1,
            note,
            order: (place.turn, pos.unwrap_or(place.pos)),
        });
    }

    /// Compares one event's facts on both sides, field by field. A side without the event
    /// counts as `null` in every field.
    fn facts(&mut self, place: &Place, a: Option<&Facts>, b: Option<&Facts>) {
        let Some(event) = a.or(b).map(|f| f.event.as_str()) else {
            return;
        };
        let value = |f: Option<&Facts>, name: &str| {
            f.and_then(|f| f.field(name))
                .cloned()
                .unwrap_or(Value::Null)
        };
        for name in super::fields::union(fields_of(a), fields_of(b)) {
            let (va, vb) = (value(a, name), value(b, name));
            if va != vb {
                self.push(
                    place,
                    aspect_of(event, name),
                    event,
                    name,
                    va,
                    vb,
                    (a.map(|f| f.seq), b.map(|f| f.seq)),
                    a.map(|f| f.pos),
                    None,
                );
            }
        }
    }

    fn timing(&mut self, place: &Place, event: &str, field: &str, a: Option<u64>, b: Option<u64>) {
        if a != b {
            self.push(
                place,
                Aspect::Timing,
                event,
                field,
                json!(a),
                json!(b),
                (None, None),
                None,
                None,
            );
        }
    }

    /// Time to the first chunk, duration and the longest silence before a chunk.
    fn timings(&mut self, place: &Place, event: &str, a: [Option<u64>; 3], b: [Option<u64>; 3]) {
        let fields = [
            "time_to_first_chunk_ms",
            "duration_ms",
            "longest_chunk_gap_ms",
        ];
        for (i, field) in fields.into_iter().enumerate() {
            self.timing(place, event, field, a[i], b[i]);
        }
    }
}

fn fields_of(facts: Option<&Facts>) -> &[(String, Value)] {
    facts.map(|f| &f.fields[..]).unwrap_or(&[])
}

/// A turn's timings: from its pacing, and its start and end.
fn turn_timings(turn: &TurnRun) -> [Option<u64>; 3] {
    [
        turn.pacing.first_chunk_ms,
        turn.timing.duration_ms(),
        turn.pacing.longest_gap().map(|c| c.gap_ms),
    ]
}

/// A step's timings: its chunks in the turn's pacing (a step's first chunk's silence is counted
/// from the step's start), and its start and end.
fn step_timings(turn: &TurnRun, step: &StepRun) -> [Option<u64>; 3] {
    let mut chunks = turn.pacing.chunks.iter().filter(|c| c.step == step.step);
    let first = chunks.next().map(|c| c.gap_ms);
    let longest = first.map(|f| chunks.map(|c| c.gap_ms).fold(f, u64::max));
    [first, step.timing.duration_ms(), longest]
}

/// Every difference between two runs, unordered.
pub(super) fn runs(a: &Run, b: &Run) -> Vec<Difference> {
    let mut out = Out {
        differences: Vec::new(),
    };
    let n = a.turns.len().max(b.turns.len());
    for i in 0..n {
        let (ta, tb) = (a.turns.get(i), b.turns.get(i));
        let place = Place {
            turn: i + 1,
            step: None,
            call: None,
            tool: None,
            pos: ta.map(|t| t.started.pos).unwrap_or(usize::MAX),
        };
        match (ta, tb) {
            (Some(ta), Some(tb)) => turn(&mut out, &place, ta, tb),
            _ => out.push(
                &place,
                Aspect::Structure,
                "turn_started",
                "turn",
                json!(ta.map(turn_label)),
                json!(tb.map(turn_label)),
                (ta.map(|t| t.started.seq), tb.map(|t| t.started.seq)),
                None,
                Some(format!(
                    "only the {} run has turn {}",
                    if ta.is_some() { "first" } else { "second" },
                    i + 1
                )),
            ),
        }
    }
    out.differences
}

fn turn_label(turn: &TurnRun) -> String {
    turn.turn_id
        .clone()
        .unwrap_or_else(|| turn.request_id.clone())
}

fn turn(out: &mut Out, place: &Place, a: &TurnRun, b: &TurnRun) {
    out.facts(place, Some(&a.started), Some(&b.started));
    out.facts(place, a.configured.as_ref(), b.configured.as_ref());
    let n = a.steps.len().max(b.steps.len());
    for i in 0..n {
        let (sa, sb) = (a.steps.get(i), b.steps.get(i));
        let mut at = place.clone();
        at.step = sa.or(sb).map(|s| s.step);
        at.pos = sa.map(|s| s.pos).unwrap_or_else(|| end_of(a));
        match (sa, sb) {
            (Some(sa), Some(sb)) => step(out, &at, (a, sa), (b, sb)),
            _ => out.push(
                &at,
                Aspect::Structure,
                "step_started",
                "step",
                json!(sa.map(|s| s.step)),
                json!(sb.map(|s| s.step)),
                (sa.map(|s| s.seq), sb.map(|s| s.seq)),
                None,
                Some(format!(
                    "only the {} run has step {} of turn {}",
                    if sa.is_some() { "first" } else { "second" },
                    i,
                    place.turn
                )),
            ),
        }
    }
    let n = a.hook_failures.len().max(b.hook_failures.len());
    for i in 0..n {
        let (fa, fb) = (a.hook_failures.get(i), b.hook_failures.get(i));
        let mut at = place.clone();
        at.pos = fa.map(|f| f.pos).unwrap_or_else(|| end_of(a));
        out.facts(&at, fa, fb);
    }
    let mut end = place.clone();
    end.pos = end_of(a);
    out.facts(&end, a.failed.as_ref(), b.failed.as_ref());
    out.facts(&end, a.finished.as_ref(), b.finished.as_ref());
    out.timings(&end, "turn", turn_timings(a), turn_timings(b));
}

/// The position of a turn's last known event, where what it lacks is listed.
fn end_of(turn: &TurnRun) -> usize {
    turn.finished
        .as_ref()
        .or(turn.failed.as_ref())
        .map(|f| f.pos)
        .or_else(|| turn.steps.last().map(|s| s.pos))
        .unwrap_or(turn.started.pos)
}

fn step(
    out: &mut Out,
    place: &Place,
    (ta, a): (&TurnRun, &StepRun),
    (tb, b): (&TurnRun, &StepRun),
) {
    out.facts(place, a.configured.as_ref(), b.configured.as_ref());
    streamed(
        out,
        place,
        Aspect::Text,
        (&a.text, &a.text_chunks),
        (&b.text, &b.text_chunks),
    );
    streamed(
        out,
        place,
        Aspect::Reasoning,
        (&a.reasoning, &a.reasoning_chunks),
        (&b.reasoning, &b.reasoning_chunks),
    );
    let n = a.calls.len().max(b.calls.len());
    for i in 0..n {
        let (ca, cb) = (a.calls.get(i), b.calls.get(i));
        let mut at = place.clone();
        at.call = Some(i + 1);
        at.tool = ca.or(cb).map(|c| c.tool.clone());
        at.pos = ca.map(|c| c.started.pos).unwrap_or(place.pos);
        match (ca, cb) {
            (Some(ca), Some(cb)) => call(out, &at, ca, cb),
            _ => out.push(
                &at,
                Aspect::Structure,
                "tool_call_started",
                "call",
                json!(ca.map(|c| &c.tool)),
                json!(cb.map(|c| &c.tool)),
                (ca.map(|c| c.started.seq), cb.map(|c| c.started.seq)),
                None,
                Some(format!(
                    "only the {} run makes tool call {} of step {}",
                    if ca.is_some() { "first" } else { "second" },
                    i + 1,
                    a.step
                )),
            ),
        }
    }
    let n = a.errors.len().max(b.errors.len());
    for i in 0..n {
        let (ea, eb) = (a.errors.get(i), b.errors.get(i));
        let mut at = place.clone();
        at.pos = ea.map(|e| e.pos).unwrap_or(place.pos);
        if ea.map(|e| &e.event) == eb.map(|e| &e.event) || ea.is_none() || eb.is_none() {
            out.facts(&at, ea, eb);
        } else {
            out.facts(&at, ea, None);
            out.facts(&at, None, eb);
        }
    }
    let mut end = place.clone();
    end.pos = a.finished.as_ref().map(|f| f.pos).unwrap_or(place.pos);
    out.facts(&end, a.finished.as_ref(), b.finished.as_ref());
    out.timings(&end, "step", step_timings(ta, a), step_timings(tb, b));
}

fn call(out: &mut Out, place: &Place, a: &CallRun, b: &CallRun) {
    out.facts(place, Some(&a.started), Some(&b.started));
    out.facts(place, a.decided.as_ref(), b.decided.as_ref());
    out.facts(place, a.finished.as_ref(), b.finished.as_ref());
    let ms = |c: &CallRun| c.duration_ms;
    let mut end = place.clone();
    end.pos = a.finished.as_ref().map(|f| f.pos).unwrap_or(place.pos);
    out.timing(&end, "tool_call_finished", "duration_ms", ms(a), ms(b));
}

/// Compares streamed text: where it first differs, and the chunk on each side that holds that
/// character.
fn streamed(
    out: &mut Out,
    place: &Place,
    aspect: Aspect,
    a: (&String, &Vec<(usize, u64, usize)>),
    b: (&String, &Vec<(usize, u64, usize)>),
) {
    if a.0 == b.0 {
        return;
    }
    let offset =
        a.0.char_indices()
            .zip(b.0.chars())
            .find(|((_, ca), cb)| ca != cb)
            .map(|((i, _), _)| i)
            .unwrap_or_else(|| a.0.len().min(b.0.len()));
    let chars = a.0[..offset.min(a.0.len())].chars().count();
    let chunk = |chunks: &Vec<(usize, u64, usize)>| {
        chunks
            .iter()
            .find(|(end, _, _)| *end > offset)
            .or(chunks.last())
            .copied()
    };
    let (ca, cb) = (chunk(a.1), chunk(b.1));
    let field = if aspect == Aspect::Text {
        "text"
    } else {
        "reasoning"
    };
    out.push(
        place,
        aspect,
        "chunk",
        field,
        json!(a.0),
        json!(b.0),
        (ca.map(|c| c.1), cb.map(|c| c.1)),
        ca.map(|c| c.2),
        Some(format!("first differs at char {chars}")),
    );
}

/// The aspect of one compared field.
fn aspect_of(event: &str, field: &str) -> Aspect {
    match (event, field) {
        ("turn_started", _) => Aspect::Input,
        ("turn_configured" | "step_configured", _) => Aspect::Config,
        ("tool_call_started", _) => Aspect::ToolInput,
        ("tool_decided", _) => Aspect::Decision,
        ("tool_call_finished" | "client_tool_result", _) => Aspect::ToolOutput,
        ("step_finished", "finish_reason") => Aspect::FinishReason,
        (_, f) if f.starts_with("usage.") => Aspect::Usage,
        ("turn_finished", "status" | "steps") => Aspect::Status,
        _ => Aspect::Error,
    }
}
