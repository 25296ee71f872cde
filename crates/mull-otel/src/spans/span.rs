//! What a span built from the log is: its kind, attributes, events and times — plain data the
//! exporter converts, so the mapping in the parent module is tested without OpenTelemetry.

use chrono::{DateTime, Utc};

/// What kind of operation a span is, as OpenTelemetry's `SpanKind` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// Work inside mull: a turn attempt, a tool execution.
    Internal,
    /// A call to a remote service: a model call.
    Client,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    StrList(Vec<String>),
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> AttrValue {
        AttrValue::Str(s.to_owned())
    }
}
impl From<String> for AttrValue {
    fn from(s: String) -> AttrValue {
        AttrValue::Str(s)
    }
}
impl From<u64> for AttrValue {
    fn from(n: u64) -> AttrValue {
        AttrValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}
impl From<u32> for AttrValue {
    fn from(n: u32) -> AttrValue {
        AttrValue::Int(i64::from(n))
    }
}
impl From<f64> for AttrValue {
    fn from(x: f64) -> AttrValue {
        AttrValue::Float(x)
    }
}
impl From<bool> for AttrValue {
    fn from(b: bool) -> AttrValue {
        AttrValue::Bool(b)
    }
}

/// Something that happened at a moment inside a span (a retried model call, a compaction).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    pub name: &'static str,
    pub at: DateTime<Utc>,
    pub attributes: Vec<(&'static str, AttrValue)>,
}

/// One span built from the log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSpan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The enclosing span; `None` for a turn attempt, the root of its trace.
    pub parent_id: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub attributes: Vec<(&'static str, AttrValue)>,
    pub events: Vec<SpanEvent>,
    /// The failure's description when the operation failed.
    pub error: Option<String>,
}

impl LogSpan {
    /// The value of attribute `key`, if set.
    pub fn attribute(&self, key: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    pub(super) fn set(&mut self, key: &'static str, value: impl Into<AttrValue>) {
        let value = value.into();
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((key, value)),
        }
    }

    pub(super) fn close(mut self, at: DateTime<Utc>, out: &mut Vec<LogSpan>) {
        self.end = at.max(self.start);
        out.push(self);
    }
}
