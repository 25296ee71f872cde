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

// The direct encoding of deltas writes exactly what serde writes.

/// The direct payload `Event::encode` takes for `event`, if any.
fn delta_payload(event: &Event) -> Option<String> {
    match event {
        Event::Chunk {
            step,
            part,
            original: None,
        } => crate::delta_payload::encode(*step, part),
        _ => None,
    }
}

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
                assert_eq!(delta_payload(&event).as_deref(), Some(serde.as_str()));
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
        assert_eq!(delta_payload(&event), None);
        assert_eq!(
            event.encode(),
            serde_json::to_string(&event).expect("serializes")
        );
    }
}

#[test]
fn a_step_finished_that_repeated_the_step_s_content_still_reads() {
    // As logs wrote it before the content was kept only in chunks and tool call events.
    let text = r#"{"type":"step_finished","record":{"step":1,"model_id":"m","text":"Hi","reasoning_text":null,"sources":[],"files":[],"tool_calls":[{"call_id":"c1","tool_name":"t","input":{}}],"tool_results":[],"finish_reason":"stop","raw_finish_reason":null,"usage":{"input_tokens":3},"warnings":[],"request":{"hash":"h"},"response":{},"provider_metadata":null}}"#;
    let Event::StepFinished { record } = Event::decode(1, text).expect("decodes") else {
        panic!("a step_finished");
    };
    assert_eq!(record.step, 1);
    assert_eq!(record.finish_reason, crate::stream::FinishReason::Stop);
    assert_eq!(record.usage.input_tokens, Some(3));
    assert_eq!(record.request, json!({"hash": "h"}));
    // What it writes now holds the report only.
    assert!(!Event::StepFinished { record }.encode().contains("\"text\""));
}
