//! A turn shares its runtime: a model stream whose parts are always ready (a fast provider, a
//! scripted or replayed one) does not keep the turn's thread to itself until the turn ends —
//! the turn yields to the runtime now and then, so other tasks on the same thread (the
//! server's other connections, a log writer's task) run while it streams.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use mull::core::UIMessage;
use mull::engine::{OutcomeStatus, TurnOptions};
use support::scripted::chatty;
use support::test_log::TestLog;

const DELTAS: usize = 5_000;

/// One thread for the turn and everything else, so the other task runs only when the turn
/// yields.
#[tokio::test(flavor = "current_thread")]
async fn a_turn_whose_stream_is_always_ready_lets_other_tasks_run_while_it_streams() {
    let env = TestLog::new();
    let session = env.open(&chatty(DELTAS, 1)).await;
    let streaming = Arc::new(AtomicBool::new(true));
    let ticks = Arc::new(AtomicUsize::new(0));
    let other = tokio::spawn({
        let (streaming, ticks) = (Arc::clone(&streaming), Arc::clone(&ticks));
        async move {
            while streaming.load(Ordering::Relaxed) {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }
    });
    let out = session
        .save_messages(vec![UIMessage::user("u1", "talk")], TurnOptions::default())
        .await
        .expect("the turn runs");
    streaming.store(false, Ordering::Relaxed);
    other.await.expect("the other task ends");
    assert_eq!(out.status, OutcomeStatus::Completed);
    let ticks = ticks.load(Ordering::Relaxed);
    // A turn that never yields lets the other task run only once it has ended (0 times here);
    // one that yields as it streams lets it run every few hundred parts at most.
    assert!(
        ticks >= DELTAS / 256,
        "the other task ran {ticks} times during a turn of {DELTAS} parts"
    );
}
