//! Reading payloads back into events, with a fast path for the bulk of a log.
//!
//! Text and reasoning deltas are most rows. serde reads an internally tagged enum by
//! buffering every field before it can pick the variant (twice here: the event and its
//! part), so those two shapes are first read by plain structs; anything else, or anything
//! that does not fit exactly, goes through [`Event::decode`], which stays the reference.

use std::borrow::Cow;

use mull_core::{Event, EventDecodeError, StreamPart, EVENT_VERSION};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeltaChunk<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    step: u32,
    #[serde(borrow)]
    part: DeltaPart<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeltaPart<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    id: String,
    text: String,
}

/// Decodes a stored payload of version `v`: the same result as [`Event::decode`], faster for
/// text and reasoning deltas.
pub fn decode(v: u16, payload: &str) -> Result<Event, EventDecodeError> {
    match fast_delta(v, payload.as_bytes()) {
        Some(event) => Ok(event),
        None => Event::decode(v, payload),
    }
}

/// A text or reasoning delta read straight from the payload's bytes by plain structs (serde_json
/// checks the UTF-8 of every string it reads); `None` for anything else, which then goes
/// through [`Event::decode`].
pub fn fast_delta(v: u16, payload: &[u8]) -> Option<Event> {
    if v == EVENT_VERSION && payload.starts_with(br#"{"type":"chunk","#) {
        if let Ok(chunk) = serde_json::from_slice::<DeltaChunk<'_>>(payload) {
            let DeltaPart { kind, id, text } = chunk.part;
            let part = match (&*chunk.kind, &*kind) {
                ("chunk", "text-delta") => Some(StreamPart::TextDelta { id, text }),
                ("chunk", "reasoning-delta") => Some(StreamPart::ReasoningDelta { id, text }),
                _ => None,
            };
            if let Some(part) = part {
                return Some(Event::Chunk {
                    step: chunk.step,
                    part,
                    original: None,
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_path_agrees_with_event_decode() {
        let payloads = [
            r#"{"type":"chunk","step":0,"part":{"type":"text-delta","id":"t0","text":"hi"}}"#,
            r#"{"type":"chunk","step":3,"part":{"type":"reasoning-delta","id":"r\"0","text":"a\nb é"}}"#,
            r#"{"type":"chunk","step":0,"part":{"type":"text-start","id":"t0"}}"#,
            r#"{"type":"chunk","step":0,"part":{"type":"text-delta","id":"t0","text":"x"},"original":{"type":"text-delta","id":"t0","text":"X"}}"#,
            r#"{"type":"chunk","step":0,"part":{"type":"tool-input-delta","call_id":"c","delta":"{"}}"#,
            r#"{"type":"step_started","step":1}"#,
            r#"{"type":"from_the_future","text":"x"}"#,
        ];
        for payload in payloads {
            let fast = decode(1, payload).expect("decodes");
            let reference = Event::decode(1, payload).expect("decodes");
            assert_eq!(fast, reference, "{payload}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_left_to_the_checked_path() {
        let mut payload =
            br#"{"type":"chunk","step":0,"part":{"type":"text-delta","id":"t0","text":"#.to_vec();
        payload.extend_from_slice(b"\"a\xff\"}}");
        assert_eq!(fast_delta(1, &payload), None);
        let good =
            br#"{"type":"chunk","step":0,"part":{"type":"text-delta","id":"t0","text":"a"}}"#;
        assert!(fast_delta(1, good).is_some());
    }

    #[test]
    fn bad_shapes_still_fail_the_same_way() {
        let payload =
            r#"{"type":"chunk","step":"zero","part":{"type":"text-delta","id":"t0","text":"hi"}}"#;
        let err = decode(1, payload).expect_err("bad step");
        assert!(matches!(err, EventDecodeError::BadShape { .. }), "{err}");
    }
}
