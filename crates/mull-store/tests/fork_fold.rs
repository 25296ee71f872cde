//! Opening a session folds only what its projection can see (the chunks of ended turns are
//! never read): the state must be exactly what folding every event of its history gives, for
//! a session, for forks at every kind of point (between turns, inside a step, at a turn's
//! end) and for a fork of a fork, with other sessions' rows interleaved and a writer that
//! stopped mid-turn.

use chrono::{DateTime, Utc};
use mull_core::{EntryPath, Event, StreamPart, TurnStatus, UIMessage, Usage};
use mull_store::{ForkPoint, Log, LogReader, SessionState};
use serde_json::json;

fn at(n: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_735_689_600_000_000 + n as i64 * 1000).expect("valid")
}

/// Appends one turn of `session`: user message, start, a step of text chunks (and one of a
/// second session in between), the saved answer and, if `finish`, the turn's end.
fn turn(log: &Log, session: &str, n: u64, chunks: usize, finish: bool) {
    let turn_id = format!("turn_{session}_{n}");
    let tid = Some(turn_id.as_str());
    let msg = format!("msg_{session}_{n}");
    let append = |turn: Option<&str>, s: &str, event: Event| {
        log.append(s, turn, at(n), event).expect("append");
    };
    append(
        None,
        session,
        Event::UserMessagesSaved {
            request_id: Some(format!("req_{n}")),
            messages: vec![UIMessage::user(format!("u_{session}_{n}"), "go on")],
        },
    );
    append(
        tid,
        session,
        Event::TurnStarted {
            request_id: format!("req_{n}"),
            message_id: msg.clone(),
            entry: EntryPath::SaveMessages,
            continuation: false,
            attempt: 0,
            body: json!({}),
        },
    );
    append(tid, session, Event::StepStarted { step: 0 });
    let chunk = |part| Event::Chunk {
        step: 0,
        part,
        original: None,
    };
    append(
        tid,
        session,
        chunk(StreamPart::TextStart { id: "t".into() }),
    );
    let mut text = String::new();
    for i in 0..chunks {
        let delta = format!("w{i} ");
        text.push_str(&delta);
        append(
            tid,
            session,
            chunk(StreamPart::TextDelta {
                id: "t".into(),
                text: delta,
            }),
        );
        if i == chunks / 2 {
            // Another session's row inside this turn's stretch of the table.
            append(
                None,
                "sess_other",
                Event::UserMessagesSaved {
                    request_id: None,
                    messages: vec![UIMessage::user(format!("o_{n}_{i}"), "elsewhere")],
                },
            );
        }
    }
    if !finish {
        return;
    }
    append(tid, session, chunk(StreamPart::TextEnd { id: "t".into() }));
    let mut answer = UIMessage::user(msg, text);
    answer.role = mull_core::Role::Assistant;
    append(
        tid,
        session,
        Event::AssistantMessageSaved {
            request_id: format!("req_{n}"),
            message: answer,
        },
    );
    append(
        tid,
        session,
        Event::TurnFinished {
            request_id: format!("req_{n}"),
            status: TurnStatus::Completed,
            error: None,
            steps: 1,
            usage: Usage::default(),
            response_owed: false,
        },
    );
}

/// The state folded from every event of the session's history, chunks included.
fn refold(reader: &LogReader, session: &str) -> SessionState {
    let mut state = SessionState::new(session);
    for env in reader.session_history(session).expect("history") {
        state.apply_own(mull_core::EventRef::of(&env));
    }
    state
}

fn fork(log: &Log, origin: &str, into: &str, point: ForkPoint) -> u64 {
    let resolved = log
        .with_reader(|r| Ok(r.fork_point(origin, &point)))
        .expect("reader")
        .expect("the fork point exists");
    log.append(into, None, at(900), resolved.event())
        .expect("fork");
    log.flush_blocking().expect("flush");
    resolved.origin_seq
}

#[test]
fn a_session_and_its_forks_fold_to_what_every_event_gives() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("open");
    turn(&log, "sess_a", 1, 40, true);
    turn(&log, "sess_a", 2, 30, true);
    turn(&log, "sess_a", 3, 20, false);
    log.close().expect("close");
    // A new writer: the third turn's writer is gone, and its chunks stop here.
    let log = Log::open(&path).expect("reopen");
    turn(&log, "sess_a", 4, 25, true);
    turn(&log, "sess_a", 5, 50, false);
    log.flush_blocking().expect("flush");

    let reader = log.reader().expect("reader");
    let turns = reader.turns("sess_a").expect("turns");
    let second = turns[1].first_seq;
    // A point inside the second turn's step: after its tenth chunk.
    let inside = second + 12;
    let points = [
        ("fork_mid_step", ForkPoint::AtSeq(inside)),
        ("fork_between", ForkPoint::AtSeq(second - 1)),
        (
            "fork_at_end",
            ForkPoint::AtSeq(reader.max_seq().expect("max")),
        ),
    ];
    for (into, point) in points {
        fork(&log, "sess_a", into, point);
        turn(&log, into, 6, 15, true);
    }
    // A fork of a fork, inside the fork's own turn.
    let own = reader.turns("fork_mid_step").expect("turns");
    let of_fork = own.last().expect("the fork's own turn").first_seq + 5;
    fork(
        &log,
        "fork_mid_step",
        "fork_of_fork",
        ForkPoint::AtSeq(of_fork),
    );
    log.flush_blocking().expect("flush");

    let reader = log.reader().expect("reader");
    for session in [
        "sess_a",
        "fork_mid_step",
        "fork_between",
        "fork_at_end",
        "fork_of_fork",
    ] {
        let loaded = reader.load_session(session).expect("load");
        assert_eq!(loaded, refold(&reader, session), "{session}");
        assert!(!loaded.messages.is_empty(), "{session} has a conversation");
    }
    // The mid-step fork keeps the ten chunks streamed so far as the partial answer.
    let mid = reader.load_session("fork_mid_step").expect("load");
    let partial = mid
        .messages
        .iter()
        .find(|m| m.id == "msg_sess_a_2")
        .expect("the partial answer");
    assert!(format!("{:?}", partial.parts).contains("w9 "));
    assert!(!format!("{:?}", partial.parts).contains("w10 "));
    // The running turn's chunks are read: its draft is the text streamed so far.
    let a = reader.load_session("sess_a").expect("load");
    let draft = format!("{:?}", a.draft.expect("the fifth turn runs").parts);
    assert!(draft.contains("w49 "), "{draft}");
}
