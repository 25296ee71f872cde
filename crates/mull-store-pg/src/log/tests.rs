//! The node's writer as seen from inside: what it keeps between batches.

use std::time::Duration;

use chrono::Utc;
use mull_core::Event;
use mull_store::EventLog;

use super::state::{lock, SPENT_ROWS, SPENT_ROW_BYTES};
use super::{PgLog, PgOptions};
use crate::testing::TestPg;

/// Committed rows are freed by the threads that append, one per append; what waits for them is
/// bounded in count and leaves large payloads out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_rows_wait_for_appends_to_free_them_within_bounds() {
    let Some(pg) = TestPg::start("committed_rows_wait_for_appends") else {
        return;
    };
    // Only the test's own flushes commit.
    let options = PgOptions {
        batch_max_events: 100_000,
        batch_max_delay: Duration::from_secs(60),
        ..PgOptions::new("a")
    };
    let log = PgLog::connect(&pg.database(), options).await.unwrap();
    log.open_session("s").await.unwrap();
    let spent = || lock(&log.inner.state).spent.len();
    // The writer does not look inside events: one whose size the test chooses will do.
    let append = |text: &str| {
        let event = Event::SessionOpened {
            agent: text.into(),
            metadata: serde_json::Value::Null,
        };
        log.append_event("s", None, Utc::now(), event).unwrap();
    };
    for _ in 0..2000 {
        append("small");
    }
    EventLog::flush(&log, "s").await.unwrap();
    assert_eq!(spent(), SPENT_ROWS);
    for _ in 0..10 {
        append("small");
    }
    assert_eq!(spent(), SPENT_ROWS - 10);
    // A large payload is freed by the writer, not kept waiting.
    lock(&log.inner.state).spent.clear();
    append(&"x".repeat(2 * SPENT_ROW_BYTES));
    EventLog::flush(&log, "s").await.unwrap();
    let kept = lock(&log.inner.state)
        .spent
        .iter()
        .map(|row| row.payload.len())
        .collect::<Vec<_>>();
    assert_eq!(kept.len(), 10, "the ten small rows, not the large one");
    assert!(kept.iter().all(|&len| len < SPENT_ROW_BYTES));
}
