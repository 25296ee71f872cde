use super::folds::tool_calls_sql;
use super::walk::{between_turns_sql, within_a_turn_sql};
use super::*;
use crate::writer::Log;
use chrono::{DateTime, Utc};
use mull_core::{DecisionAction, EntryPath, Event, StreamPart, TurnStatus, Usage};
use serde_json::json;

fn at(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_735_689_600_000_000 + micros).expect("valid time")
}

fn started(n: u32) -> Event {
    Event::TurnStarted {
        request_id: format!("req_{n}"),
        message_id: format!("msg_{n}"),
        entry: EntryPath::Chat,
        continuation: false,
        attempt: 0,
        body: json!({}),
    }
}

fn finished(n: u32) -> Event {
    Event::TurnFinished {
        request_id: format!("req_{n}"),
        status: TurnStatus::Completed,
        error: None,
        steps: 1,
        usage: Usage::default(),
        response_owed: false,
    }
}

fn delta() -> Event {
    Event::Chunk {
        step: 0,
        part: StreamPart::TextDelta {
            id: "t0".into(),
            text: "x".into(),
        },
        original: None,
    }
}

/// Two sessions, interleaved: sess_a has two turns, sess_b one.
fn sample(dir: &Path) -> Log {
    let log = Log::open(dir.join("log.db")).expect("opens");
    let mut t = 0;
    let mut push = |s: &str, turn: Option<&str>, e: Event| {
        t += 1000;
        log.append(s, turn, at(t), e).expect("appends");
    };
    push("sess_a", Some("turn_1"), started(1));
    push("sess_b", Some("turn_2"), started(2));
    for _ in 0..5 {
        push("sess_a", Some("turn_1"), delta());
        push("sess_b", Some("turn_2"), delta());
    }
    push("sess_a", Some("turn_1"), finished(1));
    push("sess_a", Some("turn_3"), started(3));
    push("sess_a", Some("turn_3"), delta());
    log.flush_blocking().expect("flushes");
    log
}

#[test]
fn ranges_and_pages_walk_the_log_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = sample(dir.path());
    let reader = log.reader().expect("reader");
    assert_eq!(reader.max_seq().expect("max"), 15);
    let range = reader.range(3, 5).expect("range");
    assert_eq!(range.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = reader.page(after, 4).expect("page");
        let Some(last) = page.last() else { break };
        after = last.seq;
        seen.extend(page.iter().map(|e| e.seq));
    }
    assert_eq!(seen, (1..=15).collect::<Vec<_>>());
    let b = reader.session_page("sess_b", 2, 3).expect("session page");
    assert!(b.iter().all(|e| e.session_id == "sess_b" && e.seq > 2));
    assert_eq!(b.len(), 3);
    let turn = reader.turn_events("sess_a", "turn_3").expect("turn");
    assert_eq!(turn.iter().map(|e| e.seq).collect::<Vec<_>>(), [14, 15]);
    // A turn interleaved with another session's, and followed by its session's next turn.
    let turn = reader.turn_events("sess_a", "turn_1").expect("turn");
    assert_eq!(
        turn.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 3, 5, 7, 9, 11, 13]
    );
    assert!(reader
        .turn_events("sess_b", "turn_1")
        .expect("turn")
        .is_empty());
    assert!(reader.has_session("sess_b").expect("looks up"));
    assert!(!reader.has_session("sess_c").expect("looks up"));
}

/// What a session walk must return: the session's rows of the whole log, in order.
fn brute_force(reader: &LogReader, session_id: &str) -> Vec<u64> {
    reader
        .page(0, usize::MAX >> 1)
        .expect("reads the log")
        .into_iter()
        .filter(|e| e.session_id == session_id)
        .map(|e| e.seq)
        .collect()
}

/// One append of a generated log: which session, and what it writes.
#[derive(Debug, Clone, Copy)]
enum Step {
    Start(usize),
    Chunk(usize),
    Lifecycle(usize),
    Finish(usize),
    /// The writer stops and a new one opens the log: turns it left open stay open.
    Reopen,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        1 => (0..3usize).prop_map(Step::Start),
        4 => (0..3usize).prop_map(Step::Chunk),
        1 => (0..3usize).prop_map(Step::Lifecycle),
        1 => (0..3usize).prop_map(Step::Finish),
        1 => Just(Step::Reopen),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Sessions interleaved at random, turns left open or started twice, writers stopped
    /// and reopened mid-turn, chunks inside and outside turns: every page of every
    /// session, from every seq, is exactly what a scan of the whole log filtered by
    /// session gives.
    #[test]
    fn session_pages_equal_the_whole_log_filtered_by_session(
        steps in proptest::collection::vec(step(), 1..80),
        limit in 1usize..7,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let mut log = Log::open(&path).expect("opens");
        let names = ["a", "b", "c"];
        let mut turn = [0u32; 3];
        let mut i = 0;
        for step in &steps {
            let (s, event) = match *step {
                Step::Reopen => {
                    log.close().expect("closes");
                    log = Log::open(&path).expect("reopens");
                    continue;
                }
                Step::Start(s) => {
                    turn[s] += 1;
                    (s, started(turn[s]))
                }
                Step::Chunk(s) => (s, delta()),
                Step::Lifecycle(s) => (s, Event::StepStarted { step: 0 }),
                Step::Finish(s) => (s, finished(turn[s])),
            };
            let turn_id = format!("{}_{}", names[s], turn[s]);
            i += 1;
            log.append(names[s], Some(&turn_id), at(i), event).expect("appends");
        }
        log.flush_blocking().expect("flushes");
        let reader = log.reader().expect("reader");
        for name in names {
            let all = brute_force(&reader, name);
            let seqs = |events: Vec<Envelope>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
            proptest::prop_assert_eq!(seqs(reader.session_events(name, 0).expect("reads")), all.clone());
            for after in 0..=steps.len() as u64 {
                let page = seqs(reader.session_page(name, after, limit).expect("reads"));
                let expected: Vec<u64> =
                    all.iter().copied().filter(|&q| q > after).take(limit).collect();
                proptest::prop_assert_eq!(page, expected, "session {} after {}", name, after);
            }
            proptest::prop_assert_eq!(reader.has_session(name).expect("looks up"), !all.is_empty());
        }
        let everything = reader.page(0, usize::MAX >> 1).expect("reads the log");
        let mut turns: Vec<(String, String)> = everything
            .iter()
            .filter_map(|e| Some((e.session_id.clone(), e.turn_id.clone()?)))
            .collect();
        turns.sort();
        turns.dedup();
        for (session, turn) in turns {
            let expected: Vec<u64> = everything
                .iter()
                .filter(|e| e.session_id == session && e.turn_id.as_deref() == Some(&turn))
                .map(|e| e.seq)
                .collect();
            let got: Vec<u64> =
                reader.turn_events(&session, &turn).expect("reads").iter().map(|e| e.seq).collect();
            proptest::prop_assert_eq!(got, expected, "turn {} of {}", turn, session);
        }
        let listed: Vec<(String, u64)> = reader
            .sessions()
            .expect("sessions")
            .into_iter()
            .map(|s| (s.session_id, s.last_seq))
            .collect();
        for (name, last) in listed {
            proptest::prop_assert_eq!(brute_force(&reader, &name).last().copied(), Some(last));
        }
    }
}

#[test]
fn a_turn_left_open_by_a_stopped_writer_ends_where_the_next_writer_started() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("opens");
    log.append("a", Some("turn_1"), at(1), started(1))
        .expect("appends");
    log.append("a", Some("turn_1"), at(2), delta())
        .expect("appends");
    log.close().expect("the process stops mid-turn");
    // The new writer's recovery finishes the turn (seqs 3 and 4) as it opens.
    let log = Log::open(&path).expect("a new writer");
    assert_eq!(log.recovered_at_open().len(), 1);
    for i in 0..50 {
        log.append("b", None, at(3 + i), Event::StepStarted { step: 0 })
            .expect("appends");
    }
    log.flush_blocking().expect("flushes");
    let reader = log.reader().expect("reader");
    // Its chunks can only be before seq 2, where the second writer began.
    assert_eq!(reader.chunks_end(1).expect("reads"), 2);
    let seqs = |events: Vec<Envelope>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(reader.session_events("a", 0).expect("reads")),
        [1, 2, 3, 4]
    );
    assert_eq!(
        seqs(reader.turn_events("a", "turn_1").expect("reads")),
        [1, 2, 3, 4]
    );
    assert!(reader
        .session_page("a", u64::MAX, 10)
        .expect("a seq past every row reads nothing")
        .is_empty());
}

#[test]
fn a_session_walk_reads_its_turns_by_seq_and_the_rest_through_the_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conn = schema::open_writer(&dir.path().join("log.db")).expect("creates");
    // The plan helper binds `?1` only; the bounds are spelled out.
    let plan = |sql: String| {
        let sql = sql.replace("?2", "1").replace("?3", "9").replace("?4", "5");
        schema::query_plan(&conn, &sql).join(" | ")
    };
    let inside = plan(within_a_turn_sql());
    assert!(inside.contains("INTEGER PRIMARY KEY"), "{inside}");
    let outside = plan(between_turns_sql());
    assert!(outside.contains("events_lifecycle"), "{outside}");
    let exists = plan(has_session_sql());
    assert!(exists.contains("events_lifecycle"), "{exists}");
}

#[test]
fn sessions_and_turns_are_listed_from_lifecycle_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = sample(dir.path());
    let reader = log.reader().expect("reader");
    let sessions = reader.sessions().expect("sessions");
    let brief: Vec<_> = sessions
        .iter()
        .map(|s| (s.session_id.as_str(), s.first_seq, s.last_seq))
        .collect();
    assert_eq!(brief, [("sess_a", 1, 15), ("sess_b", 2, 12)]);
    assert_eq!(sessions[0].first_at, at(1000));
    assert_eq!(sessions[0].last_at, at(15_000));
    assert_eq!(sessions[1].first_at, at(2000));
    let turns = reader.turns("sess_a").expect("turns");
    let brief: Vec<_> = turns
        .iter()
        .map(|t| (t.request_id.as_str(), t.status))
        .collect();
    assert_eq!(
        brief,
        [
            ("req_1", TurnStatus::Completed),
            ("req_3", TurnStatus::Running)
        ]
    );
}

fn tool_events(call: &str, tool: &str, action: DecisionAction, ok: bool, ms: u64) -> [Event; 3] {
    [
        Event::ToolCallStarted {
            step: 0,
            call_id: call.into(),
            tool: tool.into(),
            input: json!({}),
            client: false,
            dynamic: false,
        },
        Event::ToolDecided {
            step: 0,
            call_id: call.into(),
            tool: tool.into(),
            action,
            model_input: json!({}),
            effective_input: json!({}),
            reason: None,
            output: None,
        },
        Event::ToolCallFinished {
            step: 0,
            call_id: call.into(),
            tool: tool.into(),
            success: ok,
            output: None,
            error: (!ok).then(|| "failed".to_owned()),
            duration_ms: ms,
        },
    ]
}

#[test]
fn session_tool_calls_fold_only_the_sessions_tool_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let mut t = 0;
    let mut push = |s: &str, turn: &str, e: Event| {
        t += 1000;
        log.append(s, Some(turn), at(t), e).expect("appends");
    };
    push("a", "turn_1", started(1));
    push("a", "turn_1", delta());
    for e in tool_events("call_1", "search", DecisionAction::Allow, true, 40) {
        push("a", "turn_1", e);
        push("b", "turn_b", delta());
    }
    for e in tool_events("call_2", "rm", DecisionAction::Block, true, 0) {
        push("a", "turn_1", e);
    }
    push("a", "turn_1", finished(1));
    push("b", "turn_b", started(9));
    for e in tool_events("call_9", "other", DecisionAction::Allow, true, 5) {
        push("b", "turn_b", e);
    }
    push("a", "turn_2", started(2));
    // The model reuses an id in the next turn: a new call, not the old one again.
    for e in tool_events("call_1", "search", DecisionAction::Allow, false, 60) {
        push("a", "turn_2", e);
    }
    let [begun, decided, _] = tool_events("call_3", "fetch", DecisionAction::Substitute, true, 0);
    push("a", "turn_2", begun);
    push("a", "turn_2", decided);
    log.flush_blocking().expect("flushes");
    let reader = log.reader().expect("reader");

    let calls = reader.session_tool_calls("a").expect("reads");
    assert_eq!(calls.turns, 2);
    let brief: Vec<_> = calls
        .calls
        .iter()
        .map(|c| {
            (
                c.turn_id.as_deref().unwrap_or(""),
                c.call_id.as_str(),
                c.tool.as_str(),
                c.decision,
                c.success,
                c.duration_ms,
            )
        })
        .collect();
    assert_eq!(
        brief,
        [
            (
                "turn_1",
                "call_1",
                "search",
                Some(DecisionAction::Allow),
                Some(true),
                Some(40)
            ),
            (
                "turn_1",
                "call_2",
                "rm",
                Some(DecisionAction::Block),
                Some(true),
                Some(0)
            ),
            (
                "turn_2",
                "call_1",
                "search",
                Some(DecisionAction::Allow),
                Some(false),
                Some(60)
            ),
            (
                "turn_2",
                "call_3",
                "fetch",
                Some(DecisionAction::Substitute),
                None,
                None
            ),
        ]
    );
    // Events already folded (an overlapping tail) change nothing; new ones are folded in.
    let mut live = calls.clone();
    for env in reader.session_events("a", 0).expect("reads") {
        live.apply(&env);
    }
    assert_eq!(live, calls);
    let last = log
        .append(
            "a",
            Some("turn_2"),
            at(t + 1000),
            tool_events("call_3", "fetch", DecisionAction::Substitute, true, 0)[2].clone(),
        )
        .expect("appends");
    live.apply(&last);
    assert_eq!(live.calls[3].success, Some(true));
    assert_eq!(live.last_seq, last.seq);
    assert!(reader
        .session_tool_calls("c")
        .expect("reads")
        .calls
        .is_empty());

    // Only the lifecycle index is walked: the session's chunks are never read.
    let plan = schema::query_plan(&reader.conn, &tool_calls_sql());
    assert!(
        plan.iter().any(|p| p.contains("events_lifecycle")),
        "{plan:?}"
    );
}

#[test]
fn load_session_folds_every_page_of_a_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    log.append("s", Some("turn_1"), at(0), started(1))
        .expect("appends");
    log.append(
        "s",
        Some("turn_1"),
        at(1),
        Event::Chunk {
            step: 0,
            part: StreamPart::TextStart { id: "t0".into() },
            original: None,
        },
    )
    .expect("appends");
    let deltas = PAGE_ROWS * 2 + 17;
    for i in 0..deltas {
        log.append("s", Some("turn_1"), at(2 + i as i64), delta())
            .expect("appends");
    }
    log.flush_blocking().expect("flushes");
    let state = log
        .reader()
        .expect("reader")
        .load_session("s")
        .expect("loads");
    assert_eq!(state.last_seq, deltas as u64 + 2);
    let draft = state.draft.expect("draft");
    assert_eq!(draft.plain_text().len(), deltas);
}

#[test]
fn session_events_cross_pages_and_skip_other_sessions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let n = PAGE_ROWS + 5;
    for i in 0..n {
        let session = if i % 2 == 0 { "even" } else { "odd" };
        log.append(session, None, at(i as i64), delta())
            .expect("appends");
    }
    log.flush_blocking().expect("flushes");
    let reader = log.reader().expect("reader");
    let even = reader.session_events("even", 0).expect("reads");
    assert_eq!(even.len(), n.div_ceil(2));
    assert!(even.iter().all(|e| e.session_id == "even"));
    assert!(even.windows(2).all(|w| w[0].seq < w[1].seq));
    let later = reader.session_events("even", even[10].seq).expect("reads");
    assert_eq!(later.len(), even.len() - 11);
}

/// A log of session `s` holding `turn_started` at seq 1, then each `(sql, payload)` row
/// inserted behind the writer's back, as a damaged or hand-made log would hold it.
fn log_with_raw_rows(rows: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("opens");
    log.append("s", None, at(0), started(1)).expect("appends");
    log.flush_blocking().expect("flushes");
    let raw = Connection::open(&path).expect("raw");
    for (sql, payload) in rows {
        raw.execute(sql, [payload]).expect("inserts");
    }
    (dir, path)
}

#[test]
fn a_known_kind_with_a_bad_shape_is_an_error_naming_its_seq() {
    let (_dir, path) = log_with_raw_rows(&[
        (
            "INSERT INTO events VALUES (2, 's', NULL, 1735689601000000, 1, 'turn_started', ?1)",
            r#"{"type":"turn_started","request_id":42}"#,
        ),
        (
            "INSERT INTO events VALUES (3, 's', NULL, 1735689602000000, 1, 'from_the_future', ?1)",
            r#"{"type":"from_the_future","z":[1,2]}"#,
        ),
    ]);
    let reader = LogReader::open(&path).expect("reader");
    let err = reader.load_session("s").expect_err("bad shape");
    assert!(matches!(err, StoreError::Decode { seq: 2, .. }), "{err}");
    assert!(err.to_string().contains("seq 2") && err.to_string().contains("turn_started"));
    let unknown = reader.range(3, 3).expect("unknown kinds read");
    assert_eq!(unknown[0].kind(), "from_the_future");
    assert_eq!(
        unknown[0].event.encode(),
        r#"{"type":"from_the_future","z":[1,2]}"#
    );
}

#[test]
fn a_row_whose_time_is_not_microseconds_is_an_error_naming_its_seq_and_value() {
    let (_dir, path) = log_with_raw_rows(&[(
        "INSERT INTO events VALUES (2, 's', NULL, 'yesterday', 1, 'step_started', ?1)",
        r#"{"type":"step_started","step":0}"#,
    )]);
    let reader = LogReader::open(&path).expect("reader");
    assert_eq!(reader.range(1, 1).expect("the good row reads")[0].at, at(0));
    let err = reader.range(1, 2).expect_err("bad time");
    assert!(
        matches!(&err, StoreError::BadTimestamp { seq: 2, text } if text == "yesterday"),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_not_created_by_a_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nope.db");
    let err = LogReader::open(&path).expect_err("missing");
    assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    assert!(!path.exists());
}
