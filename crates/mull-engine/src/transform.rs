//! Stream transforms: adapters over the stream of parts that rewrite, drop or add parts before
//! the user sees (and the conversation keeps) them, applied in order — Think's
//! `experimental_transform`. The log keeps what the model sent beside what the user saw, and the
//! engine keeps every tool call paired with its outcome whatever a transform does.

use std::sync::Arc;

use mull_core::StreamPart;

type Adapter = dyn Fn(StreamPart) -> Vec<StreamPart> + Send + Sync;

/// A named stream-to-stream adapter: each part the model (or a tool) produces goes in, in
/// order, and the parts to show in its place come out — the same part, a rewritten one, none,
/// or several. A transform that needs to remember earlier parts keeps its own state (a `Mutex`
/// in the closure); it sees the parts of one turn in the order they happen.
#[derive(Clone)]
pub struct StreamTransform {
    name: String,
    map: Arc<Adapter>,
}

impl StreamTransform {
    /// A transform that rewrites each part into exactly one part; `name` is what
    /// `turn_configured` records.
    pub fn new(
        name: impl Into<String>,
        map: impl Fn(StreamPart) -> StreamPart + Send + Sync + 'static,
    ) -> StreamTransform {
        StreamTransform::flat_map(name, move |part| vec![map(part)])
    }

    /// A transform that may rewrite, drop (return nothing) or add parts (return several).
    pub fn flat_map(
        name: impl Into<String>,
        map: impl Fn(StreamPart) -> Vec<StreamPart> + Send + Sync + 'static,
    ) -> StreamTransform {
        StreamTransform {
            name: name.into(),
            map: Arc::new(map),
        }
    }

    /// The transform's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parts this transform shows for `part`.
    pub fn apply(&self, part: StreamPart) -> Vec<StreamPart> {
        (self.map)(part)
    }
}

impl std::fmt::Debug for StreamTransform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// Applies `transforms` in order (each one runs on every part the one before it produced) and
/// keeps tool calls paired (see [`keep_tool_pairing`]). Returns the parts to show, or `None`
/// when they are exactly `part` (nothing changed).
pub fn apply_all(transforms: &[StreamTransform], part: &StreamPart) -> Option<Vec<StreamPart>> {
    if transforms.is_empty() {
        return None;
    }
    let mut parts = vec![part.clone()];
    for transform in transforms {
        parts = parts.into_iter().flat_map(|p| transform.apply(p)).collect();
    }
    let parts = keep_tool_pairing(part, parts);
    (parts.len() != 1 || parts[0] != *part).then_some(parts)
}

/// The call a tool part belongs to, and whether it is the call itself, its outcome (a final
/// result or an error), or something else of it (input streaming, a preliminary result).
fn tool_identity(part: &StreamPart) -> Option<(&str, ToolRole)> {
    Some(match part {
        StreamPart::ToolCall { call_id, .. } => (call_id, ToolRole::Call),
        StreamPart::ToolResult {
            call_id,
            preliminary: false,
            ..
        }
        | StreamPart::ToolError { call_id, .. } => (call_id, ToolRole::Outcome),
        StreamPart::ToolResult { call_id, .. }
        | StreamPart::ToolInputStart { call_id, .. }
        | StreamPart::ToolInputDelta { call_id, .. }
        | StreamPart::ToolInputEnd { call_id } => (call_id, ToolRole::Other),
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolRole {
    Call,
    Outcome,
    Other,
}

/// What the engine enforces on a transform's output so the conversation stays valid: a tool
/// call and its outcome (final result or error) always reach the user and the next model
/// request — a transform that dropped one gets the original back, in front of what it made —
/// and a transform cannot invent tool parts for a call other than the one it was given (they
/// are left out: no tool ran for them, so they would stand without a result).
pub fn keep_tool_pairing(original: &StreamPart, parts: Vec<StreamPart>) -> Vec<StreamPart> {
    let own = tool_identity(original);
    let mut kept: Vec<StreamPart> = parts
        .into_iter()
        .filter(|p| match tool_identity(p) {
            None => true,
            Some((call, _)) => own.is_some_and(|(id, _)| id == call),
        })
        .collect();
    if let Some((id, role @ (ToolRole::Call | ToolRole::Outcome))) = own {
        let present = kept.iter().any(|p| tool_identity(p) == Some((id, role)));
        if !present {
            kept.insert(0, original.clone());
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use mull_core::Source;
    use serde_json::json;

    fn result(call_id: &str) -> StreamPart {
        StreamPart::ToolResult {
            call_id: call_id.into(),
            tool_name: "search".into(),
            output: json!({"url": "https://example.com"}),
            preliminary: false,
        }
    }

    fn source(id: &str) -> StreamPart {
        StreamPart::Source {
            source: Source::Url {
                id: id.into(),
                url: "https://example.com".into(),
                title: None,
            },
        }
    }

    #[test]
    fn transforms_run_in_order_on_every_part_the_previous_one_made() {
        let split = StreamTransform::flat_map("split", |p| vec![p.clone(), p]);
        let count = StreamTransform::new("same", |p| p);
        let delta = StreamPart::TextDelta {
            id: "t".into(),
            text: "x".into(),
        };
        let out = apply_all(&[split, count], &delta).expect("changed");
        assert_eq!(out, [delta.clone(), delta.clone()]);
        let identity = StreamTransform::new("identity", |p| p);
        assert_eq!(apply_all(&[identity], &delta), None);
    }

    #[test]
    fn a_dropped_outcome_comes_back_and_invented_tool_parts_are_left_out() {
        let to_source = StreamTransform::flat_map("to-source", |p| match p {
            StreamPart::ToolResult { .. } => vec![source("s1"), result("someone-else")],
            other => vec![other],
        });
        let out = apply_all(&[to_source], &result("c1")).expect("changed");
        assert_eq!(out, [result("c1"), source("s1")]);
        let drop_all = StreamTransform::flat_map("drop", |_| Vec::new());
        let text = StreamPart::TextDelta {
            id: "t".into(),
            text: "x".into(),
        };
        assert_eq!(apply_all(&[drop_all], &text), Some(Vec::new()));
    }
}
