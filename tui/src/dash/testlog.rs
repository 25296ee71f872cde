//! A small, realistic log with fixed timestamps, shared by the dashboard's tests.

use mull_core::{
    DecisionAction, Envelope, ErrorStage, Event, FinishReason, Role, StreamPart, ToolPart,
    ToolPartState, TurnConfigRecord, TurnStatus, UIMessage, UIPart, Usage,
};
use serde_json::json;

mod budget;
mod build;

pub use budget::budget_log;
use build::{chunk, step_finished, text, tool_call, turn_started, usage};
pub use build::{t0, LogBuilder};

/// One completed turn: a text block, an allowed tool call, a blocked one, a second step whose
/// text stalls for 2.3 s.
pub fn sample_turn() -> Vec<Envelope> {
    let mut b = LogBuilder::new();
    push_completed_turn(&mut b);
    b.events
}

/// A completed turn, event by event: long because it reads as the log it writes.
fn push_completed_turn(b: &mut LogBuilder) {
    let (s, t) = ("sess_1", "turn_1");
    b.push(s, Some(t), 0, turn_started("req_1", "msg_a1"));
    b.push(
        s,
        Some(t),
        5,
        Event::TurnConfigured {
            config: Box::new(TurnConfigRecord {
                provider: "scripted".into(),
                model_id: "scripted-1".into(),
                tool_names: vec!["search".into(), "delete_all".into()],
                max_steps: 5,
                ..TurnConfigRecord::default()
            }),
        },
    );
    b.push(s, Some(t), 10, Event::StepStarted { step: 0 });
    text(
        b,
        s,
        t,
        0,
        200,
        "t0",
        &[(250, "Let me "), (300, "look that up.")],
    );
    tool_call(
        b,
        (s, t),
        400,
        ("call_1", "search", json!({"q": "rust 1.95"})),
        DecisionAction::Allow,
        Ok(json!(["Rust 1.95 released"])),
        420,
    );
    tool_call(
        b,
        (s, t),
        830,
        ("call_2", "delete_all", json!({})),
        DecisionAction::Block,
        Err("blocked: destructive tools are off"),
        0,
    );
    b.push(
        s,
        Some(t),
        900,
        chunk(
            0,
            StreamPart::Finish {
                finish_reason: FinishReason::ToolCalls,
                raw_finish_reason: None,
                usage: usage(812, 40, Some(600)),
                provider_metadata: None,
            },
        ),
    );
    b.push(
        s,
        Some(t),
        901,
        step_finished(0, FinishReason::ToolCalls, usage(812, 40, Some(600))),
    );
    b.push(s, Some(t), 910, Event::StepStarted { step: 1 });
    text(
        b,
        s,
        t,
        1,
        1000,
        "t1",
        &[
            (1050, "Rust 1.95 "),
            (1100, "is out"),
            (3400, " — released today."),
        ],
    );
    b.push(
        s,
        Some(t),
        3460,
        step_finished(1, FinishReason::Stop, usage(900, 12, None)),
    );
    b.push(
        s,
        Some(t),
        3470,
        Event::AssistantMessageSaved {
            request_id: "req_1".into(),
            message: UIMessage {
                id: "msg_a1".into(),
                role: Role::Assistant,
                metadata: None,
                parts: vec![
                    UIPart::StepStart,
                    UIPart::Text {
                        text: "Let me look that up.".into(),
                        streaming: false,
                    },
                    UIPart::Tool(ToolPart {
                        call_id: "call_1".into(),
                        tool_name: "search".into(),
                        state: ToolPartState::OutputAvailable,
                        input: json!({"q": "rust 1.95"}),
                        output: Some(json!(["Rust 1.95 released"])),
                        error_text: None,
                        preliminary: false,
                    }),
                    UIPart::StepStart,
                    UIPart::Text {
                        text: "Rust 1.95 is out — released today.".into(),
                        streaming: false,
                    },
                ],
            },
        },
    );
    b.push(
        s,
        Some(t),
        3480,
        Event::TurnFinished {
            request_id: "req_1".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 2,
            usage: usage(1712, 52, Some(600)),
            response_owed: false,
        },
    );
}

/// Two sessions: the first has a completed turn, a failed one and one still running; the
/// second a single short turn.
///
/// Long because it is a log written out event by event.
pub fn sample_log() -> Vec<Envelope> {
    let mut b = LogBuilder::new();
    let s = "sess_1";
    b.push(
        s,
        None,
        -20,
        Event::SessionOpened {
            agent: "demo".into(),
            metadata: json!({}),
        },
    );
    b.push(
        s,
        None,
        -10,
        Event::UserMessagesSaved {
            request_id: Some("req_1".into()),
            messages: vec![UIMessage::user("msg_u1", "What's new in Rust?")],
        },
    );
    push_completed_turn(&mut b);

    let t = "turn_2";
    b.push(
        s,
        None,
        10_000,
        Event::UserMessagesSaved {
            request_id: Some("req_2".into()),
            messages: vec![UIMessage::user("msg_u2", "And in Go?")],
        },
    );
    b.push(s, Some(t), 10_010, turn_started("req_2", "msg_a2"));
    b.push(s, Some(t), 10_020, Event::StepStarted { step: 0 });
    b.push(
        s,
        Some(t),
        10_100,
        chunk(0, StreamPart::ReasoningStart { id: "r0".into() }),
    );
    b.push(
        s,
        Some(t),
        10_150,
        chunk(
            0,
            StreamPart::ReasoningDelta {
                id: "r0".into(),
                text: "The user asks about Go; I have no tool for that.".into(),
            },
        ),
    );
    b.push(
        s,
        Some(t),
        10_160,
        chunk(0, StreamPart::ReasoningEnd { id: "r0".into() }),
    );
    b.push(
        s,
        Some(t),
        12_000,
        chunk(
            0,
            StreamPart::Error {
                message: "upstream 529: overloaded".into(),
            },
        ),
    );
    b.push(
        s,
        Some(t),
        12_001,
        Event::TurnFailed {
            request_id: Some("req_2".into()),
            stage: ErrorStage::Stream,
            messages_persisted: true,
            classification: None,
            error: "upstream 529: overloaded".into(),
            model_error: None,
        },
    );
    b.push(
        s,
        Some(t),
        12_002,
        Event::TurnFinished {
            request_id: "req_2".into(),
            status: TurnStatus::Error,
            error: Some("upstream 529: overloaded".into()),
            steps: 1,
            usage: Usage::default(),
            response_owed: false,
        },
    );

    let t = "turn_3";
    b.push(
        s,
        None,
        20_000,
        Event::UserMessagesSaved {
            request_id: Some("req_3".into()),
            messages: vec![UIMessage::user("msg_u3", "Try again please.")],
        },
    );
    b.push(s, Some(t), 20_010, turn_started("req_3", "msg_a3"));
    b.push(s, Some(t), 20_020, Event::StepStarted { step: 0 });
    text(&mut b, s, t, 0, 20_100, "t0", &[(20_150, "Go 1.26 ")]);
    // Still streaming: drop the text-end the helper wrote.
    b.events.pop();

    let s = "sess_2";
    let t = "turn_4";
    b.push(
        s,
        None,
        30_000,
        Event::SessionOpened {
            agent: "demo".into(),
            metadata: json!({}),
        },
    );
    b.push(
        s,
        None,
        30_001,
        Event::UserMessagesSaved {
            request_id: Some("req_4".into()),
            messages: vec![UIMessage::user("msg_u4", "Hello")],
        },
    );
    b.push(s, Some(t), 30_010, turn_started("req_4", "msg_a4"));
    b.push(s, Some(t), 30_020, Event::StepStarted { step: 0 });
    text(
        &mut b,
        s,
        t,
        0,
        30_100,
        "t0",
        &[(30_150, "Hi! How can I help?")],
    );
    b.push(
        s,
        Some(t),
        30_200,
        step_finished(0, FinishReason::Stop, usage(20, 7, None)),
    );
    b.push(
        s,
        Some(t),
        30_210,
        Event::AssistantMessageSaved {
            request_id: "req_4".into(),
            message: UIMessage::text("msg_a4", Role::Assistant, "Hi! How can I help?"),
        },
    );
    b.push(
        s,
        Some(t),
        30_220,
        Event::TurnFinished {
            request_id: "req_4".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: usage(20, 7, None),
            response_owed: false,
        },
    );
    b.events
}

/// Writes `events` into a fresh log at `dir/test.db` through the store (seqs come out the same
/// as the envelopes' since the log is empty) and returns its path. The writer is closed, as
/// after a process that stopped: a turn the events leave open reads as interrupted.
pub fn write_db(dir: &std::path::Path, events: &[Envelope]) -> std::path::PathBuf {
    let (path, log) = write_live_db(dir, events);
    log.close().expect("commit test log");
    path
}

/// [`write_db`] with the writer left open, as a process still writing the log: a turn the
/// events leave open reads as running, and more events can be appended through it.
pub fn write_live_db(
    dir: &std::path::Path,
    events: &[Envelope],
) -> (std::path::PathBuf, mull_store::Log) {
    let path = dir.join("test.db");
    let log = mull_store::Log::open(&path).expect("open test log");
    append_all(&log, events);
    log.flush_blocking().expect("commit test log");
    (path, log)
}

/// Appends `events` through `log`, checking each keeps its seq.
pub fn append_all(log: &mull_store::Log, events: &[Envelope]) {
    for env in events {
        let written = log
            .append(
                &env.session_id,
                env.turn_id.as_deref(),
                env.at,
                env.event.clone(),
            )
            .expect("append");
        assert_eq!(written.seq, env.seq, "the test log must start empty");
    }
}

/// One session whose second turn compacts the first exchange (four messages) into a summary
/// before its step runs.
///
/// Long because it is a log written out event by event.
pub fn compaction_log() -> Vec<Envelope> {
    let mut b = LogBuilder::new();
    let s = "sess_c";
    let said = |b: &mut LogBuilder, turn: &str, ms: i64, id: &str, text: &str| {
        b.push(
            s,
            Some(turn),
            ms,
            Event::AssistantMessageSaved {
                request_id: format!("req_{turn}"),
                message: UIMessage {
                    id: id.into(),
                    role: Role::Assistant,
                    metadata: None,
                    parts: vec![
                        UIPart::StepStart,
                        UIPart::Text {
                            text: text.into(),
                            streaming: false,
                        },
                    ],
                },
            },
        );
    };
    b.push(
        s,
        None,
        0,
        Event::SessionOpened {
            agent: "demo".into(),
            metadata: json!({}),
        },
    );
    b.push(
        s,
        None,
        10,
        Event::UserMessagesSaved {
            request_id: Some("req_turn_1".into()),
            messages: vec![
                UIMessage::user("msg_u1", "Plan a trip to Lisbon."),
                UIMessage::user("msg_u2", "Three days, in May."),
            ],
        },
    );
    b.push(s, Some("turn_1"), 20, turn_started("req_turn_1", "msg_a1"));
    b.push(s, Some("turn_1"), 30, Event::StepStarted { step: 0 });
    text(
        &mut b,
        s,
        "turn_1",
        0,
        40,
        "t0",
        &[(60, "Day 1: Alfama. Day 2: Belém. Day 3: Sintra.")],
    );
    b.push(
        s,
        Some("turn_1"),
        80,
        step_finished(0, FinishReason::Stop, usage(40_000, 900, None)),
    );
    said(
        &mut b,
        "turn_1",
        90,
        "msg_a1",
        "Day 1: Alfama. Day 2: Belém. Day 3: Sintra.",
    );
    b.push(
        s,
        Some("turn_1"),
        100,
        Event::TurnFinished {
            request_id: "req_turn_1".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: usage(40_000, 900, None),
            response_owed: false,
        },
    );
    let t = "turn_2";
    b.push(
        s,
        None,
        5_000,
        Event::UserMessagesSaved {
            request_id: Some("req_turn_2".into()),
            messages: vec![UIMessage::user("msg_u3", "Where should we eat?")],
        },
    );
    b.push(s, Some(t), 5_010, turn_started("req_turn_2", "msg_a2"));
    b.push(
        s,
        Some(t),
        5_020,
        Event::CompactionApplied {
            reason: mull_core::CompactionReason::Proactive,
            attempt: 0,
            shortened: false,
            replaced_ids: vec!["msg_u1".into(), "msg_u2".into(), "msg_a1".into()],
            summary: Some(UIMessage {
                id: "msg_sum1".into(),
                role: Role::User,
                metadata: Some(json!({"compaction": {"replaced": 3}})),
                parts: vec![UIPart::Text {
                    text: "Summary of the earlier conversation:\nA three-day Lisbon trip in May \
                           was planned: Alfama, Belém, Sintra."
                        .into(),
                    streaming: false,
                }],
            }),
            tokens_before: 41_200,
            tokens_after: 1_350,
        },
    );
    b.push(s, Some(t), 5_030, Event::StepStarted { step: 0 });
    text(
        &mut b,
        s,
        t,
        0,
        5_040,
        "t1",
        &[(5_060, "Try Time Out Market in Cais do Sodré.")],
    );
    b.push(
        s,
        Some(t),
        5_080,
        step_finished(0, FinishReason::Stop, usage(1_400, 20, None)),
    );
    said(
        &mut b,
        t,
        5_090,
        "msg_a2",
        "Try Time Out Market in Cais do Sodré.",
    );
    b.push(
        s,
        Some(t),
        5_100,
        Event::TurnFinished {
            request_id: "req_turn_2".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: usage(1_400, 20, None),
            response_owed: false,
        },
    );
    b.events
}

/// A session whose first answer was regenerated: turn 1 answers, the answer is retracted (the
/// retraction filed under turn 1), and turn 2 answers again.
pub fn regenerate_log() -> Vec<Envelope> {
    let mut b = LogBuilder::new();
    let s = "sess_r";
    let answer = |b: &mut LogBuilder, turn: &str, request: &str, ms: i64, id: &str, said: &str| {
        b.push(s, Some(turn), ms, Event::StepStarted { step: 0 });
        text(b, s, turn, 0, ms + 10, "t0", &[(ms + 20, said)]);
        b.push(
            s,
            Some(turn),
            ms + 30,
            step_finished(0, FinishReason::Stop, usage(120, 8, None)),
        );
        b.push(
            s,
            Some(turn),
            ms + 40,
            Event::AssistantMessageSaved {
                request_id: request.into(),
                message: UIMessage {
                    id: id.into(),
                    role: Role::Assistant,
                    metadata: None,
                    parts: vec![
                        UIPart::StepStart,
                        UIPart::Text {
                            text: said.into(),
                            streaming: false,
                        },
                    ],
                },
            },
        );
        b.push(
            s,
            Some(turn),
            ms + 50,
            Event::TurnFinished {
                request_id: request.into(),
                status: TurnStatus::Completed,
                error: None,
                steps: 1,
                usage: usage(120, 8, None),
                response_owed: false,
            },
        );
    };
    b.push(
        s,
        None,
        0,
        Event::SessionOpened {
            agent: "demo".into(),
            metadata: json!({}),
        },
    );
    b.push(
        s,
        None,
        10,
        Event::UserMessagesSaved {
            request_id: Some("req_1".into()),
            messages: vec![UIMessage::user("msg_u1", "Name a river in Portugal.")],
        },
    );
    b.push(s, Some("turn_1"), 20, turn_started("req_1", "msg_a1"));
    answer(&mut b, "turn_1", "req_1", 30, "msg_a1", "The Thames.");
    b.push(
        s,
        Some("turn_1"),
        4_000,
        Event::MessagesRetracted {
            request_id: Some("req_2".into()),
            message_ids: vec!["msg_a1".into()],
        },
    );
    b.push(
        s,
        Some("turn_2"),
        4_010,
        Event::TurnStarted {
            request_id: "req_2".into(),
            message_id: "msg_a2".into(),
            entry: mull_core::EntryPath::Regenerate,
            continuation: false,
            attempt: 0,
            body: json!({}),
        },
    );
    answer(&mut b, "turn_2", "req_2", 4_020, "msg_a2", "The Tagus.");
    b.events
}

/// One session of two turns with every kind of tool outcome: the sample's first turn (an
/// allowed and a blocked call), then a turn with a substituted call, a failing one and two
/// more allowed ones.
pub fn tools_log() -> Vec<Envelope> {
    let mut b = LogBuilder::new();
    push_completed_turn(&mut b);
    let (s, t) = ("sess_1", "turn_2");
    b.push(s, Some(t), 10_000, turn_started("req_2", "msg_a2"));
    b.push(s, Some(t), 10_010, Event::StepStarted { step: 0 });
    tool_call(
        &mut b,
        (s, t),
        10_100,
        ("call_1", "search", json!({"q": "rust 1.96"})),
        DecisionAction::Allow,
        Ok(json!(["Rust 1.96 beta"])),
        180,
    );
    tool_call(
        &mut b,
        (s, t),
        10_300,
        ("call_2", "weather", json!({"city": "Oslo"})),
        DecisionAction::Substitute,
        Ok(json!({"city": "Oslo", "cached": true})),
        0,
    );
    tool_call(
        &mut b,
        (s, t),
        10_400,
        ("call_3", "status_page", json!({})),
        DecisionAction::Allow,
        Err("status page timed out after 3000 ms"),
        3000,
    );
    tool_call(
        &mut b,
        (s, t),
        13_500,
        ("call_4", "search", json!({"q": "rust 1.96 date"})),
        DecisionAction::Allow,
        Ok(json!(["in six weeks"])),
        95,
    );
    b.push(
        s,
        Some(t),
        13_700,
        step_finished(0, FinishReason::Stop, usage(1_500, 30, None)),
    );
    b.push(
        s,
        Some(t),
        13_710,
        Event::TurnFinished {
            request_id: "req_2".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: usage(1_500, 30, None),
            response_owed: false,
        },
    );
    b.events
}

/// Turn `turn_1` of `session` parking two bookings in its step 0: `approval_1` for call_1
/// (+100 ms) and `approval_2` for call_2 (+200 ms), each expiring at `expires_at`; the turn
/// ends at +300 ms.
pub fn parked_bookings(
    b: &mut LogBuilder,
    session: &str,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
) {
    let (s, t) = (session, Some("turn_1"));
    b.push(s, t, 10, Event::StepStarted { step: 0 });
    for (ms, call, hotel) in [(100, "call_1", "Ritz"), (200, "call_2", "Savoy")] {
        b.push(
            s,
            t,
            ms,
            Event::ToolCallStarted {
                step: 0,
                call_id: call.into(),
                tool: "book_hotel".into(),
                input: json!({ "hotel": hotel }),
                client: false,
                dynamic: false,
            },
        );
        b.push(
            s,
            t,
            ms + 1,
            Event::ToolApprovalRequested {
                step: 0,
                call_id: call.into(),
                tool: "book_hotel".into(),
                approval_id: format!("approval_{}", &call[5..]),
                input: json!({ "hotel": hotel }),
                reason: None,
                expires_at,
            },
        );
    }
    b.push(
        s,
        t,
        300,
        Event::TurnFinished {
            request_id: "req_1".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage::default(),
            response_owed: false,
        },
    );
}

/// A travel desk's session `session` whose first turn parks two bookings for approval:
/// `approval_1` (call_1) and `approval_2` (call_2). With `answered`, a person approves
/// approval_2 from `mull dash` at +5 s and denies approval_1 through `mull approve` at +6 s,
/// and a continuation turn runs the one and declines the other.
pub fn approval_log(session: &str, answered: bool) -> Vec<Envelope> {
    let mut b = LogBuilder::new();
    let s = session;
    b.push(
        s,
        None,
        0,
        Event::SessionOpened {
            agent: "travel-desk".into(),
            metadata: json!({}),
        },
    );
    let t = Some("turn_1");
    b.push(s, t, 1, build::turn_started("req_1", "msg_1"));
    parked_bookings(&mut b, s, None);
    if !answered {
        return b.events;
    }
    for (ms, n, approved, by, reason) in [
        (5_000, "2", true, "mull dash", None),
        (6_000, "1", false, "mull approve", Some("Not the Ritz.")),
    ] {
        b.push(
            s,
            t,
            ms,
            Event::ToolApprovalAnswered {
                approval_id: format!("approval_{n}"),
                call_id: format!("call_{n}"),
                tool: "book_hotel".into(),
                approved,
                reason: reason.map(str::to_owned),
                expired: false,
                by: Some(by.into()),
            },
        );
    }
    let t = Some("turn_2");
    b.push(
        s,
        t,
        6_001,
        Event::TurnStarted {
            request_id: "req_2".into(),
            message_id: "msg_2".into(),
            entry: mull_core::EntryPath::AutoContinue,
            continuation: true,
            attempt: 0,
            body: json!(null),
        },
    );
    for (ms, call, action, reason) in [
        (6_002, "call_2", DecisionAction::Allow, None),
        (
            6_003,
            "call_1",
            DecisionAction::Denied,
            Some("Not the Ritz."),
        ),
    ] {
        b.push(
            s,
            t,
            ms,
            Event::ToolDecided {
                step: 0,
                call_id: call.into(),
                tool: "book_hotel".into(),
                action,
                model_input: json!({}),
                effective_input: json!({}),
                reason: reason.map(str::to_owned),
                output: None,
            },
        );
    }
    b.push(
        s,
        t,
        6_010,
        Event::ToolCallFinished {
            step: 0,
            call_id: "call_2".into(),
            tool: "book_hotel".into(),
            success: true,
            output: Some(json!({"booked": "Savoy"})),
            error: None,
            duration_ms: 7,
        },
    );
    b.push(
        s,
        t,
        6_100,
        Event::TurnFinished {
            request_id: "req_2".into(),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage::default(),
            response_owed: false,
        },
    );
    b.events
}
