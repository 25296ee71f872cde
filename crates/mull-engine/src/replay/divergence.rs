//! Comparing a replay with its recording: the first event that differs, and how.

use std::fmt;

use mull_core::Envelope;
use serde_json::Value;

/// How many differing JSON paths a divergence lists before it stops.
pub(super) const MAX_DIFF_LINES: usize = 16;

/// How many characters of a differing value a divergence shows.
pub(super) const MAX_VALUE_CHARS: usize = 160;

/// The first event where a replay differs from its recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// Position in the session (0 = its `session_opened`).
    pub index: usize,
    /// The recorded event's `seq` (or, when the recording ended first, the replayed one's).
    pub seq: u64,
    /// The recorded event; `None` when the replay wrote more events than were recorded.
    pub expected: Option<Envelope>,
    /// The replayed event; `None` when the replay wrote fewer events than were recorded.
    pub actual: Option<Envelope>,
}

impl Divergence {
    /// The differing JSON paths, `path: expected ≠ actual` (`seq` is not compared).
    pub fn differences(&self) -> Vec<String> {
        let expected = self
            .expected
            .as_ref()
            .map(comparable)
            .unwrap_or(Value::Null);
        let actual = self.actual.as_ref().map(comparable).unwrap_or(Value::Null);
        let mut lines = Vec::new();
        diff_into("", &expected, &actual, &mut lines);
        lines
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = |e: &Option<Envelope>| {
            e.as_ref()
                .map(|e| e.kind().to_owned())
                .unwrap_or_else(|| "nothing".to_owned())
        };
        write!(
            f,
            "first divergence at seq {} (event {} of the session): expected {}, got {}",
            self.seq,
            self.index + 1,
            kind(&self.expected),
            kind(&self.actual)
        )?;
        if self.expected.is_none() || self.actual.is_none() {
            let (label, shown) = match (&self.expected, &self.actual) {
                (Some(e), None) => ("missing", e),
                (None, Some(a)) => ("extra", a),
                _ => return Ok(()),
            };
            return write!(f, "\n  {label}: {}", clip(&comparable(shown).to_string()));
        }
        let lines = self.differences();
        write!(f, "\n  expected → actual:")?;
        for line in lines.iter().take(MAX_DIFF_LINES) {
            write!(f, "\n  {line}")?;
        }
        if lines.len() > MAX_DIFF_LINES {
            write!(
                f,
                "\n  … and {} more differences",
                lines.len() - MAX_DIFF_LINES
            )?;
        }
        Ok(())
    }
}

/// How a replay went.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    pub session_id: String,
    /// How many events the recording holds.
    pub expected_events: usize,
    /// The events the replay wrote.
    pub actual: Vec<Envelope>,
    /// The first difference; `None` means the replay wrote exactly the recording.
    pub divergence: Option<Divergence>,
}

impl ReplayReport {
    /// Whether the replay wrote exactly the recorded events.
    pub fn is_identical(&self) -> bool {
        self.divergence.is_none()
    }
}

/// An envelope as compared: everything but `seq`.
pub(super) fn comparable(envelope: &Envelope) -> Value {
    let mut value = serde_json::to_value(envelope).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("seq");
    }
    value
}

/// The first position where `actual` differs from `expected`, looking only at the events
/// both have when `complete` is false (the replay is still running).
pub(super) fn first_divergence(
    expected: &[Envelope],
    actual: &[Envelope],
    complete: bool,
) -> Option<Divergence> {
    let common = expected.len().min(actual.len());
    for i in 0..common {
        if comparable(&expected[i]) != comparable(&actual[i]) {
            return Some(Divergence {
                index: i,
                seq: expected[i].seq,
                expected: Some(expected[i].clone()),
                actual: Some(actual[i].clone()),
            });
        }
    }
    if !complete || expected.len() == actual.len() {
        return None;
    }
    let expected_at = expected.get(common).cloned();
    let actual_at = actual.get(common).cloned();
    let seq = expected_at
        .as_ref()
        .or(actual_at.as_ref())
        .map(|e| e.seq)
        .unwrap_or_default();
    Some(Divergence {
        index: common,
        seq,
        expected: expected_at,
        actual: actual_at,
    })
}

pub(super) fn diff_into(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    let sub = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (expected, actual) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().collect();
            keys.extend(b.keys().filter(|k| !a.contains_key(*k)));
            for key in keys {
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff_into(&sub(key), x, y, out),
                    (Some(x), None) => {
                        out.push(format!("{}: {} ≠ (absent)", sub(key), clip(&x.to_string())))
                    }
                    (None, Some(y)) => {
                        out.push(format!("{}: (absent) ≠ {}", sub(key), clip(&y.to_string())))
                    }
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let at = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => diff_into(&at, x, y, out),
                    (Some(x), None) => {
                        out.push(format!("{at}: {} ≠ (absent)", clip(&x.to_string())))
                    }
                    (None, Some(y)) => {
                        out.push(format!("{at}: (absent) ≠ {}", clip(&y.to_string())))
                    }
                    (None, None) => {}
                }
            }
        }
        (a, b) if a == b => {}
        (a, b) => {
            let at = if path.is_empty() { "(event)" } else { path };
            out.push(format!(
                "{at}: {} ≠ {}",
                clip(&a.to_string()),
                clip(&b.to_string())
            ));
        }
    }
}

pub(super) fn clip(text: &str) -> String {
    if text.chars().count() <= MAX_VALUE_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
    cut.push('…');
    cut
}
