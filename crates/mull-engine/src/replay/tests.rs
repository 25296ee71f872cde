//! Unit tests of the recording's clock, ids and divergence report.

use chrono::{DateTime, Duration as TimeDelta, Utc};
use mull_core::{Clock, EntryPath, Envelope, Event, IdSource};
use serde_json::Value;

use super::divergence::first_divergence;
use super::served::{RecordedClock, RecordedIds};
use mull_core::{DecisionAction, FixedClock, EVENT_VERSION};
use serde_json::json;

fn envelope(seq: u64, turn: Option<&str>, at_ms: i64, event: Event) -> Envelope {
    let epoch = FixedClock::at_fixture_epoch().now();
    Envelope {
        seq,
        session_id: "s".into(),
        turn_id: turn.map(str::to_owned),
        at: epoch + TimeDelta::milliseconds(at_ms),
        v: EVENT_VERSION,
        event,
    }
}

fn decided(call: &str, action: DecisionAction) -> Event {
    Event::ToolDecided {
        step: 0,
        call_id: call.into(),
        tool: "t".into(),
        action,
        model_input: json!({}),
        effective_input: json!({}),
        reason: None,
        output: None,
    }
}

fn finished(call: &str, duration_ms: u64) -> Event {
    Event::ToolCallFinished {
        step: 0,
        call_id: call.into(),
        tool: "t".into(),
        success: true,
        output: Some(json!(1)),
        error: None,
        duration_ms,
    }
}

#[test]
fn the_clock_serves_one_stamp_per_event_and_timing_uses_none() {
    let log = vec![
        envelope(
            1,
            None,
            0,
            Event::SessionOpened {
                agent: "a".into(),
                metadata: Value::Null,
            },
        ),
        envelope(2, Some("t1"), 10, decided("c1", DecisionAction::Allow)),
        envelope(3, Some("t1"), 50, finished("c1", 30)),
    ];
    let clock = RecordedClock::new(&log);
    let ms = |d: DateTime<Utc>| (d - log[0].at).num_milliseconds();
    assert_eq!(ms(clock.now()), 0);
    assert_eq!(ms(clock.now()), 10);
    assert_eq!(clock.events_stamped(), 2);
    // Timing a tool's run reads the clock without using up a stamp.
    let started = clock.timer();
    let ended = clock.timer();
    assert_eq!(started, ended);
    assert_eq!(clock.events_stamped(), 2, "tool timing is not an event");
    assert_eq!(ms(clock.now()), 50);
    assert_eq!(ms(clock.now()), 50, "past the end it stays put");
    assert_eq!(clock.events_stamped(), 4);
}

#[test]
fn ids_replay_in_order_per_prefix_then_count() {
    let log = vec![envelope(
        1,
        Some("turn_x"),
        0,
        Event::TurnStarted {
            request_id: "req_a".into(),
            message_id: "msg_a".into(),
            entry: EntryPath::SaveMessages,
            continuation: false,
            attempt: 0,
            body: Value::Null,
        },
    )];
    let ids = RecordedIds::new(&log);
    assert_eq!(ids.next_id("req"), "req_a");
    assert_eq!(ids.next_id("turn"), "turn_x");
    assert_eq!(ids.next_id("msg"), "msg_a");
    assert_eq!(ids.next_id("msg"), "msg_replay_1");
    assert_eq!(ids.next_id("summary"), "summary_replay_1");
}

#[test]
fn a_divergence_names_seq_kinds_and_paths() {
    let expected = vec![envelope(
        7,
        Some("t"),
        0,
        decided("c", DecisionAction::Block),
    )];
    let actual = vec![envelope(
        1,
        Some("t"),
        0,
        decided("c", DecisionAction::Allow),
    )];
    let d = first_divergence(&expected, &actual, true).expect("differs");
    assert_eq!((d.index, d.seq), (0, 7));
    assert_eq!(d.differences(), vec![r#"event.action: "block" ≠ "allow""#]);
    let text = d.to_string();
    assert!(
        text.contains("seq 7") && text.contains("expected tool_decided, got tool_decided"),
        "{text}"
    );
    let shorter = first_divergence(&expected, &[], true).expect("missing event");
    assert!(shorter.actual.is_none() && shorter.to_string().contains("got nothing"));
    assert!(first_divergence(&expected, &[], false).is_none());
}
