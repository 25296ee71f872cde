//! The read contract on PostgreSQL: the same test body the SQLite log and the log in memory
//! run (`mull_store::read_conformance`), against a throwaway server, written by a node's
//! `PgLog` and read by a `PgReader` on its own connection.

use mull_store::read_conformance::check_read_contract;
use mull_store::ReadLog;
use mull_store_pg::testing::TestPg;
use mull_store_pg::{PgLog, PgOptions, PgReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_log_keeps_the_read_contract() {
    let Some(pg) = TestPg::start("pg_read_contract") else {
        return;
    };
    let url = pg.database();
    let node = PgLog::connect(&url, PgOptions::new("a")).await.unwrap();
    let reader = PgReader::open(&url).unwrap();
    check_read_contract(&node, &reader)
        .await
        .expect("the contract holds");
    // The session table names every session the events do, each with its last seq.
    let listed = reader.sessions().unwrap();
    for session in &listed {
        let events = reader.session_events(&session.session_id, 0).unwrap();
        assert_eq!(events.last().map(|e| e.seq), Some(session.last_seq));
        assert_eq!(
            events.len() as u64,
            session.last_seq,
            "seqs run from 1 without gaps"
        );
    }
}
