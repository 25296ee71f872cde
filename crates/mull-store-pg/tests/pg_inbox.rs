//! The PostgreSQL inbox against a real server (started by the test harness): posting, the
//! waiting list, one claim winning among several takers, giving back, finishing, and rows of
//! kinds this build does not know.

use chrono::{TimeZone, Utc};
use mull_store::{InboxMessage, InboxStore};
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgInbox, PgLog, PgOptions};

fn answer(id: &str) -> InboxMessage {
    InboxMessage::ApprovalAnswer {
        approval_id: id.to_owned(),
        approved: false,
        reason: Some("not now".into()),
        by: Some("mull dash".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_several_takers_claims_a_message_and_unknown_kinds_are_left_alone() {
    let Some(pg) = TestPg::start("pg_inbox") else {
        return;
    };
    let url = pg.database();
    // A node's open migrates the database; the inbox then opens as a reader does.
    let _node = PgLog::connect(&url, PgOptions::new("a")).await.unwrap();
    let poster = PgInbox::open(&url).await.unwrap();
    let at = Utc.timestamp_micros(1_700_000_000_123_456).unwrap();
    let id = poster.post("s1", &answer("apr_1"), at).await.unwrap();
    poster.post("s2", &answer("apr_2"), at).await.unwrap();

    let waiting = poster.waiting(Some("s1")).await.unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].id, id);
    assert_eq!(waiting[0].session_id, "s1");
    assert_eq!(waiting[0].message, Ok(answer("apr_1")));
    assert_eq!(waiting[0].at, at, "the poster's clock, to the microsecond");
    assert_eq!(poster.waiting(None).await.unwrap().len(), 2);

    // Several takers race for the message, each on its own connection: exactly one wins.
    let mut racers = Vec::new();
    for _ in 0..4 {
        let url = url.clone();
        racers.push(tokio::spawn(async move {
            let taker = PgInbox::open(&url).await.unwrap();
            taker.claim(id, at).await.unwrap()
        }));
    }
    let mut wins = 0;
    for racer in racers {
        wins += usize::from(racer.await.unwrap());
    }
    assert_eq!(wins, 1, "one claim wins");
    assert!(poster.waiting(Some("s1")).await.unwrap().is_empty());

    // Given back, it waits again; finished, it holds its outcome.
    poster.release(id).await.unwrap();
    assert_eq!(poster.waiting(Some("s1")).await.unwrap().len(), 1);
    assert!(poster.claim(id, at).await.unwrap());
    poster.finish(id, "answered").await.unwrap();
    let done = poster.get(id).await.unwrap().unwrap();
    assert_eq!(done.outcome.as_deref(), Some("answered"));
    assert_eq!(done.taken, Some(at));
    assert!(poster.get(id + 1000).await.unwrap().is_none());

    // A row of a kind a newer build writes is left alone.
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(
            "INSERT INTO mull_inbox (session_id, kind, body, at) VALUES ('s2', 'later_kind', '{}', 0)",
        )
        .await
        .unwrap();
    let waiting = poster.waiting(None).await.unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].session_id, "s2");
    assert_eq!(waiting[0].message, Ok(answer("apr_2")));
}
