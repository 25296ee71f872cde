//! What a writer leaves beside its log: nothing once it has closed, and nothing when its open
//! was refused; the lock it removes on close cannot be taken twice. Readers leave nothing
//! either.

use std::path::Path;

use chrono::{TimeZone, Utc};
use mull_core::Event;
use mull_store::{Log, LogReader, StoreError};

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("lists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_reader_of_a_closed_log_leaves_only_the_log_and_one_beside_a_writer_leaves_its_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("opens");
    let at = Utc.timestamp_opt(1_735_689_600, 0).single().expect("time");
    log.append("s", None, at, Event::StepStarted { step: 0 })
        .expect("appends");
    log.close().expect("closes");
    let reader = LogReader::open(&path).expect("a reader");
    assert_eq!(reader.max_seq().expect("reads"), 1);
    drop(reader);
    assert_eq!(names(dir.path()), ["log.db"]);

    // Beside a live writer, a reader that closes takes nothing of the writer's away, and it
    // cannot write.
    let log = Log::open(&path).expect("reopens");
    let reader = LogReader::open(&path).expect("a reader");
    log.append("s", None, at, Event::StepStarted { step: 1 })
        .expect("appends");
    log.flush_blocking().expect("flushes");
    assert_eq!(reader.max_seq().expect("reads"), 2);
    drop(reader);
    assert!(names(dir.path()).contains(&"log.db-wal".to_owned()));
    log.append("s", None, at, Event::StepStarted { step: 2 })
        .expect("the writer goes on");
    log.close().expect("closes");
    assert_eq!(names(dir.path()), ["log.db"]);
    assert_eq!(
        LogReader::open(&path)
            .expect("reader")
            .max_seq()
            .expect("reads"),
        3
    );
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
