use super::*;
use serde_json::json;

#[test]
fn known_events_round_trip_through_decode() {
    let event = Event::TurnStarted {
        request_id: "req_1".into(),
        message_id: "msg_1".into(),
        entry: EntryPath::SaveMessages,
        continuation: false,
        attempt: 0,
        body: json!({"mode": "x"}),
    };
    let text = event.encode();
    assert!(text.starts_with(r#"{"type":"turn_started","request_id":"req_1""#));
    assert_eq!(Event::decode(1, &text).expect("decodes"), event);
    assert_eq!(event.kind(), "turn_started");
}

#[test]
fn unknown_kinds_are_kept_verbatim() {
    let text = r#"{"type":"telepathy_detected","strength":9000,"nested":{"b":1,"a":2}}"#;
    let event = Event::decode(2, text).expect("unknown kinds decode");
    assert_eq!(event.kind(), "telepathy_detected");
    assert!(matches!(event, Event::Unknown(_)));
    assert_eq!(event.encode(), text);
}

#[test]
fn a_known_kind_with_a_bad_shape_is_an_error_naming_it() {
    let err = Event::decode(1, r#"{"type":"turn_started","request_id":5}"#)
        .expect_err("bad shape must fail");
    let msg = err.to_string();
    assert!(msg.contains("turn_started"), "{msg}");
}

#[test]
fn not_json_and_untyped_payloads_are_errors() {
    assert!(matches!(
        Event::decode(1, "{nope"),
        Err(EventDecodeError::NotJson(_))
    ));
    assert!(matches!(
        Event::decode(1, r#"{"a":1}"#),
        Err(EventDecodeError::NoType)
    ));
}

#[test]
fn every_known_kind_is_listed_once() {
    let mut kinds = Event::KNOWN_KINDS.to_vec();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), Event::KNOWN_KINDS.len());
}

#[test]
fn context_block_updates_round_trip() {
    let event = Event::ContextBlockUpdated {
        block: "memory".into(),
        content: "Prefers tea.".into(),
        source: ContextBlockSource::Model,
        call_id: Some("call_1".into()),
    };
    let text = event.encode();
    assert_eq!(
        text,
        r#"{"type":"context_block_updated","block":"memory","content":"Prefers tea.","source":"model","call_id":"call_1"}"#
    );
    assert_eq!(Event::decode(1, &text).expect("decodes"), event);
}

#[test]
fn only_chunks_skip_the_flush_barrier() {
    let chunk = Event::Chunk {
        step: 0,
        part: crate::stream::StreamPart::TextDelta {
            id: "t".into(),
            text: "a".into(),
        },
        original: None,
    };
    assert!(!chunk.needs_flush());
    assert!(Event::StepStarted { step: 0 }.needs_flush());
}
