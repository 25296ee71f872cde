//! The stored payload of a text or reasoning delta's `chunk` event, written directly.
//!
//! Deltas are most of a log's rows, and serde's internally tagged enums go through a generic
//! map serializer for every field. This writes the same bytes (a test compares them with
//! serde's for awkward strings) with one buffer and two escaped strings.

use crate::stream::StreamPart;

/// The payload of the `chunk` event of step `step` showing `part` as it came (no `original`),
/// if `part` is a delta; `None` for any other part, which serde encodes.
pub(crate) fn encode(step: u32, part: &StreamPart) -> Option<String> {
    let (kind, id, text) = match part {
        StreamPart::TextDelta { id, text } => ("text-delta", id, text),
        StreamPart::ReasoningDelta { id, text } => ("reasoning-delta", id, text),
        _ => return None,
    };
    let mut out = Vec::with_capacity(72 + id.len() + text.len());
    out.extend_from_slice(br#"{"type":"chunk","step":"#);
    serde_json::to_writer(&mut out, &step).ok()?;
    out.extend_from_slice(br#","part":{"type":""#);
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(br#"","id":"#);
    serde_json::to_writer(&mut out, id).ok()?;
    out.extend_from_slice(br#","text":"#);
    serde_json::to_writer(&mut out, text).ok()?;
    out.extend_from_slice(b"}}");
    String::from_utf8(out).ok()
}
