//! The read contract, one test body run against the SQLite log and the log in memory (the
//! PostgreSQL log runs the same body in `mull-store-pg`).

use mull_store::read_conformance::check_read_contract;
use mull_store::{Log, MemoryLog};

#[test]
fn the_sqlite_log_keeps_the_read_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let reader = log.reader().expect("reader");
    futures_executor::block_on(check_read_contract(&log, &reader)).expect("the contract holds");
}

#[test]
fn the_log_in_memory_keeps_the_read_contract() {
    let log = MemoryLog::new();
    futures_executor::block_on(check_read_contract(&log, &log)).expect("the contract holds");
}
