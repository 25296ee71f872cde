//! What a writer leaves beside its log: nothing once it has closed, and nothing when its open
//! was refused; the lock it removes on close cannot be taken twice.

use std::path::Path;

use chrono::{TimeZone, Utc};
use mull_core::Event;
use mull_store::{Log, StoreError};

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("lists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_closed_writer_leaves_only_its_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("opens");
    let at = Utc.timestamp_opt(1_735_689_600, 0).single().expect("time");
    log.append("s", None, at, Event::StepStarted { step: 0 })
        .expect("appends");
    // The writer's own cached reader must not keep the WAL alive past the close.
    assert!(log.has_session("s").is_ok());
    log.with_reader(|r| r.max_seq()).expect("reads");
    log.close().expect("closes");
    assert_eq!(names(dir.path()), ["log.db"]);
    let again = Log::open(&path).expect("reopens");
    assert_eq!(again.last_seq(), 1);
    let err = Log::open(&path).expect_err("still one writer at a time");
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    drop(again);
    assert_eq!(names(dir.path()), ["log.db"]);
}

#[test]
fn a_refused_open_leaves_no_lock_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("notes.db");
    std::fs::write(&text, "plain text, not a database\n".repeat(20)).expect("writes");
    let err = Log::open(&text).expect_err("not a database");
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    std::fs::create_dir(dir.path().join("logs")).expect("mkdir");
    let err = Log::open(dir.path().join("logs")).expect_err("a directory");
    assert!(matches!(err, StoreError::IsADirectory { .. }), "{err}");
    assert_eq!(names(dir.path()), ["logs", "notes.db"]);
}
