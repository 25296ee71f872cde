//! Following a session (`Session::follow`): every event after a seq, from the log and then
//! live, exactly once and in seq order, even when the reader falls so far behind that the
//! session's bus drops events for it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mull::core::{Envelope, UIMessage};
use mull::engine::{Follow, OutcomeStatus, Session, TurnOptions};
use mull::store::{RequestFold, RequestPhase, Verdict};

mod support;
use support::scripted::{chatty, Chatty};
use support::test_log::TestLog;

/// Opens the session with a bus that holds only `capacity` events per reader.
async fn open(env: &TestLog, agent: &Arc<Chatty>, capacity: usize) -> Session {
    let mut options = env.options();
    options.bus_capacity = capacity;
    env.open_with(agent, options).await
}

async fn ask(session: &Session, id: &str) {
    let out = session
        .save_messages(vec![UIMessage::user(id, "talk")], TurnOptions::default())
        .await
        .expect("the turn runs");
    assert_eq!(out.status, OutcomeStatus::Completed);
}

/// Takes events from `follow` until it has yielded the one at `last`.
async fn take_through(follow: &mut Follow, last: u64) -> Vec<Envelope> {
    let mut taken: Vec<Envelope> = Vec::new();
    while taken.last().map(|e| e.seq) != Some(last) {
        let next = tokio::time::timeout(Duration::from_secs(10), follow.next())
            .await
            .expect("the follower keeps up with the log")
            .expect("the stream goes on")
            .expect("the log reads");
        taken.push(next);
    }
    taken
}

/// `taken` is exactly the session's events after `after` as the log holds them.
async fn assert_once_in_order(env: &TestLog, after: u64, taken: &[Envelope]) {
    let logged: Vec<Envelope> = env
        .events()
        .await
        .into_iter()
        .filter(|e| e.seq > after)
        .collect();
    let seqs = |events: &[Envelope]| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(taken), seqs(&logged), "every event once, in seq order");
    for (got, want) in taken.iter().zip(&logged) {
        assert_eq!(got.event, want.event, "seq {}", got.seq);
        assert_eq!(got.turn_id, want.turn_id, "seq {}", got.seq);
    }
}

#[tokio::test]
async fn a_reader_that_falls_far_behind_a_small_bus_still_gets_every_event_once_in_order() {
    let env = TestLog::new();
    let session = open(&env, &chatty(300, 2), 4).await;
    let start = session.read_state(|s| s.last_seq);
    let mut follow = session.follow(start);
    // The whole turn (over 300 events) is appended while nobody reads: the bus, four events
    // deep, overflows again and again.
    ask(&session, "u1").await;
    let last = session.read_state(|s| s.last_seq);
    assert!(last - start > 300);
    let taken = take_through(&mut follow, last).await;
    assert_once_in_order(&env, start, &taken).await;

    // What comes next arrives live, after the catch-up, still once each.
    let before_second = last;
    let model_turn = session.clone();
    let second = tokio::spawn(async move { ask(&model_turn, "u2").await });
    let mut reader_lags = Vec::new();
    loop {
        let env = follow
            .next()
            .await
            .expect("the stream goes on")
            .expect("reads");
        // The turn's last event: its `on_chat_response` delivered, after `turn_finished`.
        let done = env.kind() == "chat_response_delivered";
        reader_lags.push(env);
        if done {
            break;
        }
        // A slow reader: the turn runs ahead of it.
        if reader_lags.len() % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    second.await.expect("the second turn ends");
    assert_once_in_order(&env, before_second, &reader_lags).await;
}

#[tokio::test]
async fn a_follow_after_a_seq_starts_there_and_ends_with_the_session() {
    let env = TestLog::new();
    let session = open(&env, &chatty(5, 2), 1024).await;
    ask(&session, "u1").await;
    let middle = session.read_state(|s| s.last_seq) / 2;
    let mut follow = session.follow(middle);
    ask(&session, "u2").await;
    let last = session.read_state(|s| s.last_seq);
    let taken = take_through(&mut follow, last).await;
    assert_once_in_order(&env, middle, &taken).await;
    // The session goes away: the stream ends after what the log holds.
    drop(session);
    let end = tokio::time::timeout(Duration::from_secs(10), follow.next())
        .await
        .expect("the stream ends");
    assert!(end.is_none(), "nothing after the session closed: {end:?}");
}

#[tokio::test]
async fn a_followed_request_folds_to_its_attempt_and_verdict() {
    let env = TestLog::new();
    let session = open(&env, &chatty(20, 1), 8).await;
    let start = session.read_state(|s| s.last_seq);
    let mut follow = session.follow(start);
    ask(&session, "u1").await;
    let request_id = session.read_state(|s| s.turns[0].request_id.clone());
    let mut request = RequestFold::new(request_id);
    let mut streamed = 0;
    while request.phase() != RequestPhase::Over {
        let env = follow.next().await.expect("goes on").expect("reads");
        streamed += usize::from(request.apply(&env));
    }
    assert!(streamed > 20);
    assert_eq!(request.attempts().len(), 1);
    assert!(matches!(
        request.verdict(),
        Some(Verdict::Finished { status, .. }) if *status == mull::core::TurnStatus::Completed
    ));
}
