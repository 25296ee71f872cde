//! The PostgreSQL log against a real server (started by the test harness): appends and reads,
//! group commit, leases and the fencing epoch, conflicts, and bad input.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use mull_core::{Event, StreamPart};
use mull_store::{EventLog, StoreError};
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgLog, PgOptions, Reads};
use serde_json::json;

fn at(micros: i64) -> chrono::DateTime<Utc> {
    Utc.timestamp_micros(1_700_000_000_000_000 + micros)
        .unwrap()
}

fn opened() -> Event {
    Event::SessionOpened {
        agent: "test".into(),
        metadata: json!({}),
    }
}

fn delta(text: &str) -> Event {
    Event::Chunk {
        step: 0,
        part: StreamPart::TextDelta {
            id: "t".into(),
            text: text.into(),
        },
        original: None,
    }
}

/// Runs SQL on the database at `url`, for setting up a case the log itself never makes.
async fn sql(url: &str, statement: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client.batch_execute(statement).await.unwrap();
}

async fn node(url: &str, name: &str) -> PgLog {
    PgLog::connect(url, PgOptions::new(name)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appended_events_read_back_with_their_seqs_and_epoch() {
    let Some(pg) = TestPg::start("appended_events_read_back_with_their_seqs_and_epoch") else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    let state = a.open_session("s1").await.unwrap();
    assert!(state.messages.is_empty());
    let first = a.append_event("s1", None, at(0), opened()).unwrap();
    let second = a
        .append_event("s1", Some("turn_1"), at(1), delta("hi"))
        .unwrap();
    assert_eq!((first.seq, second.seq), (1, 2));
    EventLog::flush(&a, "s1").await.unwrap();

    let reads = Reads::open(&url).await.unwrap();
    let events = reads.session_page("s1", 0, 10).await.unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].event, opened());
    assert_eq!(events[1].turn_id.as_deref(), Some("turn_1"));
    assert_eq!(events[1].at, at(1));
    assert_eq!(reads.epochs("s1").await.unwrap(), [(1, 1), (2, 1)]);
    assert_eq!(reads.turn_events("s1", "turn_1").await.unwrap().len(), 1);
    let sessions = reads.sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!((sessions[0].first_seq, sessions[0].last_seq), (1, 2));

    let mut jsonl = Vec::new();
    assert_eq!(reads.export_jsonl(None, &mut jsonl).await.unwrap(), 2);
    let text = String::from_utf8(jsonl).unwrap();
    assert!(
        text.starts_with(r#"{"seq":1,"session_id":"s1","turn_id":null,"at":"2023-11-14T22:13:20.000000Z","v":1,"event":{"type":"session_opened""#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_appends_share_a_few_transactions() {
    let Some(pg) = TestPg::start("many_appends_share_a_few_transactions") else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    for s in ["s1", "s2"] {
        a.open_session(s).await.unwrap();
    }
    for i in 0..10_000 {
        let s = if i % 2 == 0 { "s1" } else { "s2" };
        a.append_event(s, Some("t"), at(i), delta("x")).unwrap();
    }
    a.flush_all().await.unwrap();
    // Each row's xmin is the transaction that inserted it.
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT xmin::text), max(n) FROM mull_events,
             LATERAL (SELECT count(*) AS n FROM mull_events e2 WHERE e2.xmin = mull_events.xmin) c",
            &[],
        )
        .await
        .unwrap();
    let (rows, transactions, largest): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(rows, 10_000);
    // Full batches, give or take those the delay cut short while appends were still coming.
    let batch = PgOptions::new("a").batch_max_events;
    let fewest = 10_000_usize.div_ceil(batch) as i64;
    assert!(
        (fewest..=3 * fewest).contains(&transactions),
        "10,000 rows in {transactions} transactions of at most {batch}"
    );
    assert!(largest <= batch as i64, "a batch of {largest} rows");
    let reads = Reads::open(&url).await.unwrap();
    let seqs: Vec<u64> = reads
        .epochs("s2")
        .await
        .unwrap()
        .iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        seqs,
        (1..=5000).collect::<Vec<_>>(),
        "contiguous per session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_is_refused_and_a_taken_over_session_fences_its_old_owner() {
    let Some(pg) = TestPg::start("a_held_lease_is_refused") else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    let b = node(&url, "b").await;
    a.open_session("s1").await.unwrap();
    a.append_event("s1", None, at(0), opened()).unwrap();
    EventLog::flush(&a, "s1").await.unwrap();

    let err = b.open_session("s1").await.unwrap_err();
    match &err {
        StoreError::LeaseHeld { owner, epoch, .. } => {
            assert_eq!((owner.as_str(), *epoch), ("a", 1))
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("held by node a"), "{err}");

    // Node a stalls (a pause, a partition) past its lease: as if it had stopped renewing.
    sql(
        &url,
        "UPDATE mull_leases SET expires_at = now() - interval '1 second'",
    )
    .await;
    let state = b.open_session("s1").await.unwrap();
    assert_eq!(b.epoch("s1"), Some(2));
    assert_eq!(state.session_id, "s1");
    b.append_event("s1", None, at(1), opened()).unwrap();
    EventLog::flush(&b, "s1").await.unwrap();

    // Node a wakes up and writes at the seq it thinks is next: refused by the epoch, in the
    // transaction that tried it.
    a.append_event("s1", Some("late"), at(2), delta("late"))
        .unwrap();
    let err = EventLog::flush(&a, "s1").await.unwrap_err();
    match &err {
        StoreError::Fenced {
            epoch,
            current,
            owner,
            ..
        } => assert_eq!((*epoch, *current, owner.as_str()), (1, 2, "b")),
        other => panic!("{other}"),
    }
    assert!(matches!(
        a.append_event("s1", None, at(3), opened()),
        Err(StoreError::Fenced { .. })
    ));
    let reads = Reads::open(&url).await.unwrap();
    assert_eq!(reads.epochs("s1").await.unwrap(), [(1, 1), (2, 2)]);

    // A session given back is free at once.
    b.release_session("s1").await.unwrap();
    let (owner, _, live) = reads.lease("s1").await.unwrap().unwrap();
    assert_eq!((owner.as_str(), live), ("b", false));
    a.open_session("s1").await.unwrap();
    assert_eq!(a.epoch("s1"), Some(3));
}

/// A take commits without waiting for the disk, so a database crash can lose it before any
/// row under it commits. Another node may then take the session at the very same epoch; the
/// owner tells the two apart, and the node whose take was lost is fenced, writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_the_database_lost_fences_its_node_though_another_took_the_same_epoch() {
    let Some(pg) = TestPg::start("a_take_the_database_lost") else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    let b = node(&url, "b").await;
    a.open_session("s2").await.unwrap();
    assert_eq!(a.epoch("s2"), Some(1));
    // What a crash before the take reached the disk leaves: no lease row at all.
    sql(&url, "DELETE FROM mull_leases WHERE session_id = 's2'").await;
    b.open_session("s2").await.unwrap();
    assert_eq!(b.epoch("s2"), Some(1));

    a.append_event("s2", Some("lost"), at(0), opened()).unwrap();
    let err = EventLog::flush(&a, "s2").await.unwrap_err();
    match &err {
        StoreError::Fenced {
            epoch,
            current,
            owner,
            ..
        } => assert_eq!((*epoch, *current, owner.as_str()), (1, 1, "b")),
        other => panic!("{other}"),
    }
    b.append_event("s2", Some("kept"), at(1), opened()).unwrap();
    EventLog::flush(&b, "s2").await.unwrap();
    // Node b's event is the session's first (node a's never went in, or b's seq 1 would have
    // been a conflict).
    let reads = Reads::open(&url).await.unwrap();
    assert_eq!(reads.epochs("s2").await.unwrap(), [(1, 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_renewed_while_held() {
    let Some(pg) = TestPg::start("a_lease_is_renewed_while_held") else {
        return;
    };
    let url = pg.database();
    let mut options = PgOptions::new("a");
    options.lease_ttl = Duration::from_millis(600);
    let a = PgLog::connect(&url, options).await.unwrap();
    let b = node(&url, "b").await;
    a.open_session("s1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(matches!(
        b.open_session("s1").await,
        Err(StoreError::LeaseHeld { .. })
    ));
    drop(a);
    // With no handle left nothing renews it: it expires after its time to live (a renewal
    // already under way may push that out once; a loaded machine may delay both).
    let dropped = std::time::Instant::now();
    loop {
        match b.open_session("s1").await {
            Ok(_) => break,
            Err(StoreError::LeaseHeld { .. }) => {
                assert!(
                    dropped.elapsed() < Duration::from_secs(30),
                    "the lease expired within 30 s of its last handle going"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(b.epoch("s1"), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_past_its_expiry_by_the_nodes_own_clock_is_not_held_until_renewed() {
    let Some(pg) = TestPg::start("a_lease_past_its_expiry_by_the_nodes_own_clock") else {
        return;
    };
    let url = pg.database();
    let mut options = PgOptions::new("a");
    options.lease_ttl = Duration::from_millis(900);
    let a = PgLog::connect(&url, options).await.unwrap();
    a.open_session("s1").await.unwrap();
    assert!(a.holds("s1"));
    // Renewals get stuck: the lease row is locked by a transaction left open, so each renewal
    // gives up. Nothing is committed or refused meanwhile, and nobody takes the session over.
    let (holder, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    holder
        .batch_execute("BEGIN; SELECT 1 FROM mull_leases WHERE session_id = 's1' FOR UPDATE")
        .await
        .unwrap();
    until(
        Duration::from_secs(30),
        "the lease lapses by a's clock",
        || !a.holds("s1"),
    )
    .await;
    // Not fenced: the epoch is still a's, and a renewal that gets through takes it back.
    assert_eq!(a.epoch("s1"), Some(1));
    holder.batch_execute("ROLLBACK").await.unwrap();
    until(
        Duration::from_secs(30),
        "a renewal takes the lease back",
        || a.holds("s1"),
    )
    .await;
    a.append_event("s1", None, at(0), opened()).unwrap();
    EventLog::flush(&a, "s1").await.unwrap();
    let reads = Reads::open(&url).await.unwrap();
    assert_eq!(reads.epochs("s1").await.unwrap(), [(1, 1)]);
}

/// A lease row held by a commit in flight (a batch locks its sessions' rows `FOR SHARE`) must not
/// hold up the renewal of the node's other leases: one renewal statement waiting for it would
/// time out and leave every lease of the node to run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_row_a_commit_holds_holds_up_no_other_renewal() {
    let Some(pg) = TestPg::start("a_lease_row_a_commit_holds") else {
        return;
    };
    let url = pg.database();
    let mut options = PgOptions::new("a");
    options.lease_ttl = Duration::from_secs(3);
    let a = PgLog::connect(&url, options).await.unwrap();
    // "s1" sorts first: a renewal locks its row before s2's.
    a.open_session("s1").await.unwrap();
    a.open_session("s2").await.unwrap();
    let (holder, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    holder
        .batch_execute("BEGIN; SELECT 1 FROM mull_leases WHERE session_id = 's1' FOR SHARE")
        .await
        .unwrap();
    let (reader, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let expiries = || async {
        let row = reader
            .query_one(
                "SELECT (SELECT expires_at FROM mull_leases WHERE session_id = 's1'),
                        (SELECT expires_at FROM mull_leases WHERE session_id = 's2')",
                &[],
            )
            .await
            .unwrap();
        (
            row.get::<_, std::time::SystemTime>(0),
            row.get::<_, std::time::SystemTime>(1),
        )
    };
    let (s1_locked, s2_locked) = expiries().await;
    let started = std::time::Instant::now();
    loop {
        let (s1, s2) = expiries().await;
        assert_eq!(s1, s1_locked, "s1's row stays locked, so it is not renewed");
        if s2 > s2_locked {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "s2's lease was renewed within 30 s while s1's row was locked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(a.holds("s2"));
    // s1 was skipped, not lost: once its row is free a renewal takes it on, and it still writes.
    holder.batch_execute("ROLLBACK").await.unwrap();
    let started = std::time::Instant::now();
    while expiries().await.0 == s1_locked {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "s1's lease was renewed within 30 s of its row going free"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.append_event("s1", None, at(0), opened()).unwrap();
    EventLog::flush(&a, "s1").await.unwrap();
    let reads = Reads::open(&url).await.unwrap();
    assert_eq!(reads.epochs("s1").await.unwrap(), [(1, 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_row_locked_elsewhere_holds_up_no_other_take_over() {
    let Some(pg) = TestPg::start("a_lease_row_locked_elsewhere") else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    let b = node(&url, "b").await;
    for s in ["s1", "s2", "s3"] {
        a.open_session(s).await.unwrap();
    }
    // Node a stalls past its leases, s1's lease row locked by a transaction it left open.
    sql(
        &url,
        "UPDATE mull_leases SET expires_at = now() - interval '1 second' * \
         (4 - substr(session_id, 2)::int)",
    )
    .await;
    let (holder, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    holder
        .batch_execute("BEGIN; SELECT 1 FROM mull_leases WHERE session_id = 's1' FOR SHARE")
        .await
        .unwrap();

    // The longest expired is s1, but the sweep neither waits on it nor stops at it.
    let limit = Duration::from_secs(5);
    let found = tokio::time::timeout(limit, b.abandoned(10)).await;
    assert_eq!(found.expect("answers at once").unwrap(), ["s2", "s3"]);
    b.open_session("s2").await.unwrap();
    assert_eq!(b.epoch("s2"), Some(2));
    // s1 waits for its lock: taking it fails within the lease connection's bound, naming it.
    let err = tokio::time::timeout(limit, b.open_session("s1"))
        .await
        .expect("gives up within the bound")
        .unwrap_err();
    assert!(err.to_string().contains("s1"), "{err}");

    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(b.abandoned(10).await.unwrap(), ["s1", "s3"]);
    b.open_session("s1").await.unwrap();
    assert_eq!(b.epoch("s1"), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seq_written_by_another_writer_is_a_conflict() {
    let Some(pg) = TestPg::start("a_seq_written_by_another_writer_is_a_conflict") else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    a.open_session("s1").await.unwrap();
    // Someone wrote seq 1 under the same epoch behind the log's back.
    sql(
        &url,
        "INSERT INTO mull_events VALUES ('s1', 1, NULL, 0, 1, 'session_opened', '{}', 1)",
    )
    .await;
    a.append_event("s1", None, at(0), opened()).unwrap();
    let err = EventLog::flush(&a, "s1").await.unwrap_err();
    match &err {
        StoreError::Conflict { session_id, seq } => {
            assert_eq!((session_id.as_str(), *seq), ("s1", 1))
        }
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_databases_are_refused_naming_them() {
    let Some(pg) = TestPg::start("bad_databases_are_refused_naming_them") else {
        return;
    };
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("postgres://postgres:secret@127.0.0.1:{port}/mull");
    let err = PgLog::connect(&nowhere, PgOptions::new("a"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("postgres://127.0.0.1:{port}/mull: cannot connect")),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");

    let other = pg.database();
    sql(&other, "CREATE TABLE invoices (id int)").await;
    let err = PgLog::connect(&other, PgOptions::new("a"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::ForeignDatabase { tables: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("another program"), "{err}");

    let newer = pg.database();
    node(&newer, "a").await;
    sql(
        &newer,
        "UPDATE mull_meta SET value = '99' WHERE key = 'schema_version'",
    )
    .await;
    let err = PgLog::connect(&newer, PgOptions::new("a"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                supported: mull_store_pg::schema::SCHEMA_VERSION,
                ..
            }
        ),
        "{err}"
    );
    let err = Reads::open(&newer).await.unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");

    let empty = pg.database();
    assert!(matches!(
        Reads::open(&empty).await,
        Err(StoreError::Missing { .. })
    ));
}

/// Polls `done` every 20 ms until it holds, failing after `limit` with `what`.
async fn until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_is_made_again_and_nothing_is_lost_or_doubled() {
    let Some(pg) = TestPg::start("a_lost_connection_is_made_again") else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    a.open_session("s1").await.unwrap();
    a.append_event("s1", None, at(0), opened()).unwrap();
    EventLog::flush(&a, "s1").await.unwrap();
    sql(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name LIKE 'mull % a'",
    )
    .await;
    a.append_event("s1", Some("t"), at(1), delta("kept"))
        .unwrap();
    EventLog::flush(&a, "s1").await.unwrap();
    a.append_event("s1", Some("t"), at(2), delta("too"))
        .unwrap();
    EventLog::durable(&a, "s1", 3).await.unwrap();
    assert!(a.unavailable().is_none());
    assert!(a.holds("s1"));
    let reads = Reads::open(&url).await.unwrap();
    assert_eq!(reads.epochs("s1").await.unwrap(), [(1, 1), (2, 1), (3, 1)]);
    // The reads' own connection was cut too: the next read connects again.
    assert_eq!(a.reads().last_seq("s1").await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_database_makes_the_log_unavailable_then_serving_again() {
    let Some(pg) = TestPg::start("a_restarted_database_makes_the_log_unavailable") else {
        return;
    };
    let url = pg.database();
    let mut options = PgOptions::new("a");
    options.lease_ttl = Duration::from_secs(30);
    let a = PgLog::connect(&url, options).await.unwrap();
    a.open_session("s1").await.unwrap();
    a.append_event("s1", None, at(0), opened()).unwrap();
    EventLog::flush(&a, "s1").await.unwrap();
    assert!(a.unavailable().is_none());

    pg.stop_now();
    until(Duration::from_secs(20), "the log reports the loss", || {
        a.unavailable().is_some()
    })
    .await;
    let why = a.unavailable().unwrap_or_default();
    assert!(why.contains("/mull_test_"), "names the database: {why}");
    assert!(a.health().is_err(), "not ready while the database is away");
    // Appends queue meanwhile; their barrier waits for the database.
    a.append_event("s1", Some("t"), at(1), delta("during"))
        .unwrap();
    let flushed = tokio::spawn({
        let a = a.clone();
        async move { EventLog::flush(&a, "s1").await }
    });
    pg.start_again();
    let flushed = tokio::time::timeout(Duration::from_secs(60), flushed)
        .await
        .expect("the barrier passes once the database is back")
        .unwrap();
    flushed.unwrap();
    until(Duration::from_secs(20), "the log serves again", || {
        a.unavailable().is_none()
    })
    .await;
    assert!(a.health().is_ok());
    // Its lease outlived the restart: the session is still its own.
    assert!(a.holds("s1"));
    a.append_event("s1", Some("t"), at(2), delta("after"))
        .unwrap();
    EventLog::flush(&a, "s1").await.unwrap();
    let reads = Reads::open(&url).await.unwrap();
    assert_eq!(reads.epochs("s1").await.unwrap(), [(1, 1), (2, 1), (3, 1)]);
}

fn turn_started(request: &str) -> Event {
    Event::TurnStarted {
        request_id: request.into(),
        message_id: format!("msg_{request}"),
        entry: mull_core::EntryPath::Chat,
        continuation: false,
        attempt: 0,
        body: json!({}),
    }
}

/// Opening a session folds what it holds, whether it spans several pages of reads or is a fork
/// (its origin's turns up to the fork point first): the first page read tells which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_session_folds_a_long_history_and_a_forks_origin() {
    let Some(pg) = TestPg::start("opening_a_session_folds_a_long_history_and_a_forks_origin")
    else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    a.open_session("o").await.unwrap();
    a.append_event("o", None, at(0), opened()).unwrap();
    a.append_event("o", Some("t1"), at(1), turn_started("r1"))
        .unwrap();
    a.append_event("o", Some("t2"), at(2), turn_started("r2"))
        .unwrap();
    a.open_session("f").await.unwrap();
    let fork = Event::SessionForked {
        origin: "o".into(),
        origin_seq: 2,
        origin_turn: None,
    };
    a.append_event("f", None, at(3), fork).unwrap();
    a.append_event("f", Some("tf"), at(4), turn_started("rf"))
        .unwrap();
    a.open_session("long").await.unwrap();
    a.append_event("long", Some("t"), at(5), turn_started("rl"))
        .unwrap();
    for i in 0..4100 {
        a.append_event("long", Some("t"), at(6 + i), delta("w"))
            .unwrap();
    }
    a.flush_all().await.unwrap();
    for session in ["o", "f", "long"] {
        a.release_session(session).await.unwrap();
    }

    let b = node(&url, "b").await;
    let origin = b.open_session("o").await.unwrap();
    let ids = |s: &mull_store::SessionState| -> Vec<String> {
        s.turns.iter().map(|t| t.request_id.clone()).collect()
    };
    assert_eq!(ids(&origin), ["r1", "r2"]);
    let forked = b.open_session("f").await.unwrap();
    assert_eq!(
        ids(&forked),
        ["r1", "rf"],
        "the origin up to seq 2, then its own"
    );
    let next = b.append_event("f", None, at(10_000), opened()).unwrap();
    assert_eq!(next.seq, 3, "the fork's own seqs go on");
    let long = b.open_session("long").await.unwrap();
    assert_eq!(ids(&long), ["rl"]);
    let next = b.append_event("long", None, at(10_001), opened()).unwrap();
    assert_eq!(next.seq, 4102, "past every page of 4,101 events");
    b.flush_all().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_session_opens_with_its_history_though_it_never_had_a_lease() {
    let Some(pg) =
        TestPg::start("an_imported_session_opens_with_its_history_though_it_never_had_a_lease")
    else {
        return;
    };
    let url = pg.database();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    let log = mull_store::Log::open(&path).unwrap();
    log.append("s1", None, at(0), opened()).unwrap();
    log.append("s1", Some("turn_1"), at(1), delta("hi"))
        .unwrap();
    log.close().unwrap();
    let from = mull_store::LogReader::open(&path).unwrap();
    assert_eq!(mull_store_pg::import(&url, &from).await.unwrap(), 2);

    // Its first lease is taken now, but the log holds its events: they are its history, and
    // the next append goes after them.
    let a = node(&url, "a").await;
    let state = a.open_session("s1").await.unwrap();
    assert_eq!(state.last_seq, 2);
    assert_eq!(
        a.append_event("s1", None, at(2), delta("more"))
            .unwrap()
            .seq,
        3
    );
    // A session that is new in every way starts at seq 1.
    let fresh = a.open_session("s2").await.unwrap();
    assert_eq!(fresh.last_seq, 0);
    assert_eq!(a.append_event("s2", None, at(3), opened()).unwrap().seq, 1);
    EventLog::flush(&a, "s1").await.unwrap();
    EventLog::flush(&a, "s2").await.unwrap();
    let reads = Reads::open(&url).await.unwrap();
    assert_eq!(reads.session_page("s1", 0, 10).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_session_takes_its_lease_and_history_in_one_round_trip() {
    let Some(pg) = TestPg::start("opening_a_session_takes_its_lease_and_history_in_one_round_trip")
    else {
        return;
    };
    let url = pg.database();
    let a = node(&url, "a").await;
    // The first open prepares the statements of the lease connection; later ones reuse them.
    a.open_session("warm").await.unwrap();
    a.append_event("warm", Some("t1"), at(0), turn_started("r0"))
        .unwrap();
    EventLog::flush(&a, "warm").await.unwrap();
    a.release_session("warm").await.unwrap();

    let before = a.traffic();
    let state = a.open_session("new").await.unwrap();
    assert!(state.turns.is_empty());
    let opened_new = a.traffic();
    assert_eq!(
        opened_new.opening - before.opening,
        1,
        "a new session: one round trip"
    );
    assert_eq!(opened_new.opening_prepared, before.opening_prepared);

    // A session with history, taken back: its lease and its history, still one round trip.
    let state = a.open_session("warm").await.unwrap();
    let ids: Vec<&str> = state.turns.iter().map(|t| t.request_id.as_str()).collect();
    assert_eq!(ids, ["r0"]);
    let next = a.append_event("warm", None, at(1), opened()).unwrap();
    assert_eq!(next.seq, 2);
    let opened_old = a.traffic();
    assert_eq!(
        opened_old.opening - opened_new.opening,
        1,
        "an existing session: one round trip"
    );
    a.flush_all().await.unwrap();
    let reads = Reads::open(&url).await.unwrap();
    assert_eq!(reads.epochs("warm").await.unwrap(), [(1, 1), (2, 2)]);
}
