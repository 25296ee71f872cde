//! The stored payload of a text or reasoning delta's `chunk` event, written directly.
//!
//! Deltas are most of a log's rows, and serde's internally tagged enums go through a generic
//! map serializer for every field. This writes the same bytes (a test compares them with
//! serde's for awkward strings) with one buffer and two escaped strings.

use crate::event::Event;
use crate::stream::StreamPart;

/// The payload of `event` if it is a delta's chunk (with no `original`); `None` for any other
/// event, which serde encodes.
pub(crate) fn encode(event: &Event) -> Option<String> {
    let Event::Chunk {
        step,
        part,
        original: None,
    } = event
    else {
        return None;
    };
    let (kind, id, text) = match part {
        StreamPart::TextDelta { id, text } => ("text-delta", id, text),
        StreamPart::ReasoningDelta { id, text } => ("reasoning-delta", id, text),
        _ => return None,
    };
    let mut out = Vec::with_capacity(72 + id.len() + text.len());
    out.extend_from_slice(br#"{"type":"chunk","step":"#);
    serde_json::to_writer(&mut out, step).ok()?;
    out.extend_from_slice(br#","part":{"type":""#);
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(br#"","id":"#);
    serde_json::to_writer(&mut out, id).ok()?;
    out.extend_from_slice(br#","text":"#);
    serde_json::to_writer(&mut out, text).ok()?;
    out.extend_from_slice(b"}}");
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(step: u32, part: StreamPart, original: Option<StreamPart>) -> Event {
        Event::Chunk {
            step,
            part,
            original: original.map(Box::new),
        }
    }

    #[test]
    fn deltas_are_written_exactly_as_serde_writes_them() {
        let texts = [
            "",
            "w1 ",
            "quote \" backslash \\ slash /",
            "tab\tnewline\ncarriage\rbell\u{7}nul\u{0}del\u{7f}",
            "é ü 中文 🚀 \u{2028}\u{2029}",
            "</script><!-- & ' -->",
        ];
        for (n, text) in texts.iter().enumerate() {
            for step in [0, 7, u32::MAX] {
                let id = format!("txt_{n}\"\\");
                for part in [
                    StreamPart::TextDelta {
                        id: id.clone(),
                        text: (*text).to_owned(),
                    },
                    StreamPart::ReasoningDelta {
                        id: id.clone(),
                        text: (*text).to_owned(),
                    },
                ] {
                    let event = chunk(step, part, None);
                    let serde = serde_json::to_string(&event).expect("serializes");
                    assert_eq!(encode(&event).as_deref(), Some(serde.as_str()));
                    assert_eq!(event.encode(), serde);
                    assert_eq!(Event::decode(1, &serde).expect("decodes"), event);
                }
            }
        }
    }

    #[test]
    fn other_chunks_and_events_are_left_to_serde() {
        let delta = StreamPart::TextDelta {
            id: "t".into(),
            text: "x".into(),
        };
        let others = [
            chunk(0, delta.clone(), Some(delta.clone())),
            chunk(0, StreamPart::TextStart { id: "t".into() }, None),
            Event::StepStarted { step: 0 },
        ];
        for event in others {
            assert_eq!(encode(&event), None);
            assert_eq!(
                event.encode(),
                serde_json::to_string(&event).expect("serializes")
            );
        }
    }
}
