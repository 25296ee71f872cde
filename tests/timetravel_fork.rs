//! Forks: a new session whose history is a prefix of another's, resolved by readers, going
//! on live with another agent; the origin never changes.

mod support;

use std::sync::Arc;

use mull::core::{FixedClock, RandomIds, Role, TurnStatus, UIPart};
use mull::engine::{EngineError, Session, SessionOptions, TurnOptions};
use mull::policy::ToolPolicy;
use mull::store::diff::{diff_runs, read_run, DiffOptions};
use mull::store::{ForkError, ForkPoint, Log, LogReader, TurnRef};
use support::demo_runs::DemoRuns;

/// A fork's ids must not repeat the ones it inherits (counting ids would start again at
/// `msg_1`), so forks here draw random ones.
fn options(session: &str) -> SessionOptions {
    SessionOptions::new(session)
        .with_clock(Arc::new(FixedClock::at_fixture_epoch()))
        .with_ids(Arc::new(RandomIds))
}

fn exported(reader: &LogReader, session: &str) -> Vec<u8> {
    let mut out = Vec::new();
    mull::store::export_jsonl(reader, Some(session), &mut out).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_inside_a_step_keeps_the_text_streamed_so_far_as_the_partial_answer() {
    let runs = DemoRuns::new(&[("base", None)]).await;
    let before = exported(&runs.reader(), "base");
    let log = Log::open(&runs.path).unwrap();
    // Turn 1 streams its reasoning, then its answer a word a delta: fork after "Tagus: ".
    let turn1 = runs.reader().turn_events("base", "turn_1").unwrap();
    let chunks: Vec<_> = turn1.iter().filter(|e| e.kind() == "chunk").collect();
    let second_delta = chunks
        .iter()
        .position(|e| serde_json::to_string(&e.event).unwrap().contains("Tagus: "))
        .unwrap();
    let point = ForkPoint::AtChunk {
        turn: TurnRef::Ordinal(1),
        chunk: second_delta + 1,
    };
    let (session, fork) = Session::fork(&log, mull::demo::agent(), "base", &point, options("mid"))
        .await
        .unwrap();
    assert_eq!(fork.origin_turn.as_deref(), Some("turn_1"));
    assert_eq!(fork.origin_seq, chunks[second_delta].seq);

    let state = session.state();
    assert_eq!(
        state.messages.len(),
        2,
        "the question and the partial answer"
    );
    let partial = &state.messages[1];
    assert_eq!(partial.role, Role::Assistant);
    assert_eq!(
        partial.plain_text(),
        "Lisbon is a hilly, sunny city on the Tagus: "
    );
    assert!(partial.parts.iter().all(|p| !matches!(
        p,
        UIPart::Text {
            streaming: true,
            ..
        }
    )));
    assert_eq!(state.turns.len(), 1);
    assert_eq!(state.turns[0].status, TurnStatus::Aborted);
    assert!(state.draft.is_none());

    // It goes on live: a new question in the fork.
    let outcome = session
        .save_messages(
            vec![mull::core::UIMessage::user("u_9", "And the food?")],
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, mull::engine::OutcomeStatus::Completed);
    drop(session);
    log.close().unwrap();

    let reader = runs.reader();
    assert_eq!(exported(&reader, "base"), before, "the origin is unchanged");
    // Reopened from the log, the fork is the same conversation.
    let reloaded = reader.load_session("mid").unwrap();
    assert_eq!(reloaded.messages[1].plain_text(), partial.plain_text());
    assert_eq!(reloaded.messages.len(), 4);
    // The fork is one event plus its own, not a copy of the origin's.
    let own = reader.session_events("mid", 0).unwrap();
    assert_eq!(own[0].kind(), "session_forked");
    assert!(own.iter().all(|e| e.session_id == "mid"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_fork_resolves_through_both_and_diffs_against_the_root() {
    let runs = DemoRuns::new(&[("base", None)]).await;
    let log = Log::open(&runs.path).unwrap();
    // Fork 1: before turn 2, run again under a stricter policy.
    let strict = mull::demo::guarded_agent(ToolPolicy::builtin("guides-only").unwrap());
    let point = ForkPoint::BeforeTurn(TurnRef::Ordinal(2));
    let (one, fork) = Session::fork(&log, strict, "base", &point, options("one"))
        .await
        .unwrap();
    assert_eq!(fork.turn_messages.len(), 1);
    one.save_messages(fork.turn_messages.clone(), TurnOptions::default())
        .await
        .unwrap();
    drop(one);
    // Fork 2, of fork 1: before its turn 3 (two turns inherited: one from base, one its own),
    // going on with the demo agent and turn 3's question.
    let point = ForkPoint::BeforeTurn(TurnRef::Ordinal(3));
    let Err(err) = Session::fork(&log, mull::demo::agent(), "one", &point, options("two")).await
    else {
        panic!("turn 3 of fork one does not exist");
    };
    assert!(
        err.to_string().contains("has no turn 3 (it has 2 turns)"),
        "{err}"
    );
    let (two, _) = Session::fork(
        &log,
        mull::demo::agent(),
        "one",
        &ForkPoint::AtSeq(log.last_seq()),
        options("two"),
    )
    .await
    .unwrap();
    two.save_messages(
        vec![mull::core::UIMessage::user(
            "u_3",
            "Actually, cancel my booking LIS-2291.",
        )],
        TurnOptions::default(),
    )
    .await
    .unwrap();
    drop(two);
    log.close().unwrap();

    let reader = runs.reader();
    assert_eq!(reader.lineage("two").unwrap(), vec!["one", "base"]);
    let state = reader.load_session("two").unwrap();
    assert_eq!(state.turns.len(), 3);
    assert_eq!(state.messages.len(), 6);
    // Against the root, the first divergence is the call fork 1's policy blocked.
    let a = read_run(&reader, "base", "base").unwrap();
    let b = read_run(&reader, "two", "two").unwrap();
    let diff = diff_runs(&a, &b, &DiffOptions::default()).unwrap();
    let first = diff.first_divergence.unwrap();
    assert_eq!(
        (first.turn, first.tool.as_deref(), first.field.as_str()),
        (2, Some("weather"), "action")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_point_that_does_not_exist_is_named_and_nothing_is_written() {
    let runs = DemoRuns::new(&[("base", None)]).await;
    let log = Log::open(&runs.path).unwrap();
    let last = log.last_seq();
    let turns = runs.reader().turns("base").unwrap().len();
    let past_the_end = format!("has no turn {} (it has {turns} turns)", turns + 2);
    let cases = [
        ("nope", ForkPoint::AtSeq(3), "no session \"nope\""),
        ("base", ForkPoint::AtSeq(999_999), "no event at seq 999999"),
        (
            "base",
            ForkPoint::BeforeTurn(TurnRef::Ordinal(turns + 2)),
            past_the_end.as_str(),
        ),
        (
            "base",
            ForkPoint::InTurn {
                turn: TurnRef::Ordinal(2),
                seq: 3,
            },
            "seq 3 is not an event of turn 2",
        ),
        (
            "base",
            ForkPoint::AtChunk {
                turn: TurnRef::Id("turn_1".into()),
                chunk: 500,
            },
            "there is no chunk 500",
        ),
        ("base", ForkPoint::AtSeq(3), "already exists"),
    ];
    for (origin, point, expected) in cases {
        let target = if expected == "already exists" {
            "base"
        } else {
            "new"
        };
        let Err(err) =
            Session::fork(&log, mull::demo::agent(), origin, &point, options(target)).await
        else {
            panic!("{point:?} must not fork");
        };
        assert!(matches!(err, EngineError::Fork { .. }), "{point:?}: {err}");
        assert!(err.to_string().contains(expected), "{point:?}: {err}");
        if let EngineError::Fork { source, .. } = &err {
            assert!(!matches!(source, ForkError::Store(_)), "{err}");
        }
        log.flush().await.unwrap();
        assert_eq!(log.last_seq(), last, "{point:?} wrote nothing");
    }
    log.close().unwrap();
    assert!(!runs.reader().has_session("new").unwrap());
}
