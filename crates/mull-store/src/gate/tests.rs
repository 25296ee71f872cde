//! Damage beside a log, case by case: each is refused by a writer, reported by a reader, kept
//! (never deleted), counted by `check`, and got around by `recover`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use mull_core::Event;

use super::frames::encode_row;
use super::*;
use crate::row::{kind_of, Row};
use crate::{check, recover, Log, LogOptions, LogReader, ReadLog};

/// Rows of real events (step_started, their step the seq), as the gate encodes them.
fn rows(from: u64, to: u64) -> Vec<Row> {
    (from..=to)
        .map(|seq| {
            let event = Event::StepStarted { step: seq as u32 };
            Row {
                seq,
                session_id: Arc::from("s"),
                turn_id: Some(Arc::from("t")),
                at: Utc
                    .timestamp_micros(1_700_000_000_000_000 + seq as i64)
                    .single()
                    .expect("time"),
                v: 1,
                kind: Cow::Owned(kind_of(&event).into_owned()),
                payload: event.encode(),
            }
        })
        .collect()
}

/// The record file's bytes for `rows`, and where each frame begins.
fn frames(rows: &[Row]) -> (Vec<u8>, Vec<usize>) {
    let mut buf = Vec::new();
    let mut starts = Vec::new();
    for row in rows {
        starts.push(buf.len());
        encode_row(&mut buf, row);
    }
    (buf, starts)
}

/// A closed log of 5 committed events, as a writer left it.
fn log_of_five(dir: &Path) -> PathBuf {
    let path = dir.join("log.db");
    let log = Log::open(&path).expect("opens");
    for step in 1..=5 {
        log.append("s", Some("t"), Utc::now(), Event::StepStarted { step })
            .expect("appends");
    }
    log.close().expect("closes");
    path
}

/// A log of 5 committed events whose dead writer left a record file of 40 more (seqs 6..=45),
/// the frame `flip` (1-based) with one bit flipped in its payload.
fn forty_frames(dir: &Path, flip: Option<usize>) -> (PathBuf, Vec<u8>) {
    let path = log_of_five(dir);
    let (mut bytes, starts) = frames(&rows(6, 45));
    if let Some(frame) = flip {
        bytes[starts[frame - 1] + 40] ^= 0x10;
    }
    std::fs::write(records_path(&path), &bytes).expect("writes");
    (path, bytes)
}

fn seqs(reader: &LogReader) -> Vec<u64> {
    reader
        .page(0, 1000)
        .expect("reads")
        .iter()
        .map(|e| e.seq)
        .collect()
}

/// The one file set aside beside `db` whose name carries `why`.
fn kept(db: &Path, why: &str) -> PathBuf {
    let found: Vec<PathBuf> = evidence(db)
        .into_iter()
        .filter(|f| f.to_string_lossy().contains(&format!(".{why}-")))
        .collect();
    assert_eq!(found.len(), 1, "one {why} file beside the log: {found:?}");
    found[0].clone()
}

/// What every damaged case shares: a reader reports the kept file and reads only the
/// database; a writer refuses naming the kept file and the way on; `check` is not sound.
fn refused_and_reported(db: &Path, why: &str) -> PathBuf {
    let reader = LogReader::open(db).expect("a reader opens");
    let damage = reader.side_damage().to_vec();
    assert_eq!(damage.len(), 1, "{damage:?}");
    let file = kept(db, why);
    assert_eq!(damage[0].file, file);
    // Every reader asks the read contract (stats, export, the dashboard): the same finding.
    let read: &dyn ReadLog = &reader;
    assert_eq!(read.side_damage(), &damage[..]);
    let whole = read.ensure_whole().expect_err("reported").to_string();
    assert!(
        whole.contains("mull recover") && whole.contains(&file.display().to_string()),
        "{whole}"
    );
    assert_eq!(seqs(&reader), [1, 2, 3, 4, 5], "the database alone");
    drop(reader);
    assert!(!records_path(db).exists(), "set aside, not left in place");
    let err = Log::open(db).expect_err("a writer refuses").to_string();
    assert!(
        err.contains(&file.display().to_string()) && err.contains("mull recover"),
        "{err}"
    );
    // Refusing again changes nothing: the same one file is kept.
    assert_eq!(kept(db, why), file);
    let report = check(db).expect("checks");
    assert!(!report.is_sound());
    assert_eq!(report.side.len(), 1);
    file
}

#[test]
fn a_flipped_bit_in_frame_11_of_40_is_damage_refused_kept_and_recovered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, bytes) = forty_frames(dir.path(), Some(11));
    let file = refused_and_reported(&db, "damaged");
    assert_eq!(std::fs::read(&file).expect("kept"), bytes, "kept as it was");
    let out = dir.path().join("new.db");
    let report = recover(&db, &out).expect("recovers");
    assert_eq!(report.copied, 44, "all but the damaged frame's row");
    assert_eq!(report.from_side_files, 39);
    assert_eq!(
        report
            .lost
            .iter()
            .map(|r| (r.first, r.last))
            .collect::<Vec<_>>(),
        [(16, Some(16))]
    );
    let back: Vec<u64> = seqs(&LogReader::open(&out).expect("opens"));
    assert_eq!(back.len(), 44);
    assert!(!back.contains(&16));
}

#[test]
fn a_flipped_bit_in_the_first_frame_loses_only_that_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, _) = forty_frames(dir.path(), Some(1));
    refused_and_reported(&db, "damaged");
    let report = recover(&db, dir.path().join("new.db")).expect("recovers");
    assert_eq!(report.copied, 44);
    assert_eq!(report.lost.len(), 1);
    assert_eq!(report.lost[0].first, 6);
}

#[test]
fn rows_that_skip_seqs_are_a_gap_refused_kept_and_recovered_around() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = log_of_five(dir.path());
    // Seqs 8.. while the log ends at 5: 6 and 7 are in no file.
    std::fs::write(records_path(&db), frames(&rows(8, 12)).0).expect("writes");
    let err = Log::open(&db).expect_err("refused").to_string();
    assert!(
        err.contains("from seq 8") && err.contains("ends at seq 5") && err.contains(".gapped-"),
        "{err}"
    );
    refused_and_reported(&db, "gapped");
    let report = recover(&db, dir.path().join("new.db")).expect("recovers");
    assert_eq!(report.copied, 10);
    assert_eq!(report.lost[0].first, 6);
    assert_eq!(report.lost[0].last, Some(7));
}

#[test]
fn a_directory_where_the_record_file_goes_is_refused_and_moved_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = log_of_five(dir.path());
    std::fs::create_dir(records_path(&db)).expect("mkdir");
    std::fs::write(records_path(&db).join("inside"), "kept").expect("writes");
    let file = refused_and_reported(&db, "misplaced");
    assert_eq!(
        std::fs::read_to_string(file.join("inside")).expect("kept whole"),
        "kept"
    );
}

#[test]
fn a_record_file_that_cannot_be_read_is_refused_and_moved_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = log_of_five(dir.path());
    // A link to nothing: there is a record file, and no way to read it.
    #[cfg(unix)]
    std::os::unix::fs::symlink(dir.path().join("gone"), records_path(&db)).expect("links");
    let file = refused_and_reported(&db, "unreadable");
    assert!(std::fs::symlink_metadata(&file).is_ok(), "kept");
}

#[test]
fn a_file_cut_mid_frame_is_a_torn_tail_its_whole_rows_kept_and_its_bytes_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, bytes) = forty_frames(dir.path(), None);
    let (_, starts) = frames(&rows(6, 45));
    let cut = starts[19] + 30;
    std::fs::write(records_path(&db), &bytes[..cut]).expect("cuts");
    let reader = LogReader::open(&db).expect("opens");
    assert!(reader.side_damage().is_empty(), "a torn tail is not damage");
    assert_eq!(seqs(&reader), (1..=24).collect::<Vec<_>>());
    drop(reader);
    let torn = kept(&db, "torn");
    assert_eq!(std::fs::read(&torn).expect("kept"), &bytes[..cut]);
    let log = Log::open(&db).expect("a writer opens");
    let next = log
        .append("s", None, Utc::now(), Event::StepStarted { step: 0 })
        .expect("appends")
        .seq;
    assert_eq!(next, 25);
    log.close().expect("closes");
}

/// A log killed after many small commits: its files copied while the writer ran, the WAL never
/// checkpointed. Returns the copy and how many events were committed.
fn killed_with_a_long_wal(dir: &Path) -> (PathBuf, u64) {
    let path = dir.join("live.db");
    let log = Log::open_with(
        &path,
        LogOptions {
            checkpoint_pages: 1_000_000,
            batch_max_delay: Duration::from_secs(3600),
            ..LogOptions::default()
        },
    )
    .expect("opens");
    let mut last = 0;
    for step in 0..167u32 {
        last = log
            .append(
                "s",
                Some("t"),
                Utc::now(),
                Event::StepStarted { step: step * 1000 },
            )
            .expect("appends")
            .seq;
        if step % 4 == 3 {
            log.flush_blocking().expect("commits");
        }
    }
    log.flush_blocking().expect("commits");
    let killed = dir.join("killed");
    std::fs::create_dir(&killed).expect("mkdir");
    for suffix in ["", "-wal"] {
        let mut from = path.as_os_str().to_owned();
        from.push(suffix);
        let mut to = killed.join("log.db").into_os_string();
        to.push(suffix);
        std::fs::copy(&from, &to).expect("copies");
    }
    log.close().expect("closes");
    (killed.join("log.db"), last)
}

#[test]
fn flipped_bytes_in_the_wal_are_found_refused_kept_and_recovered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, committed) = killed_with_a_long_wal(dir.path());
    let wal = wal_path(&db);
    let mut bytes = std::fs::read(&wal).expect("a WAL");
    let page = 4096 + 24;
    let frames = (bytes.len() - 32) / page;
    assert!(frames > 20, "{frames} frames");
    // Two bytes of a page early in the WAL, past the frame header.
    let at = 32 + (frames / 4) * page + 24 + 100;
    bytes[at] ^= 0xff;
    bytes[at + 1] ^= 0xff;
    std::fs::write(&wal, &bytes).expect("writes");
    assert!(matches!(
        wal::inspect(&bytes),
        wal::WalState::Damaged { .. }
    ));

    let reader = LogReader::open(&db).expect("a reader opens");
    let damage = reader.side_damage().to_vec();
    assert_eq!(damage.len(), 1, "{damage:?}");
    let read: &dyn ReadLog = &reader;
    assert!(
        read.ensure_whole().is_err(),
        "reported through the read contract"
    );
    let copy = kept(&db, "damaged");
    assert!(copy.to_string_lossy().contains("-wal.damaged-"));
    assert_eq!(std::fs::read(&copy).expect("kept"), bytes);
    let seen = reader.max_seq().expect("reads");
    assert!(seen < committed, "SQLite stops at the bad frame: {seen}");
    drop(reader);
    let err = Log::open(&db).expect_err("a writer refuses").to_string();
    assert!(err.contains("-wal.damaged-"), "{err}");
    assert!(!check(&db).expect("checks").is_sound());
    let report = recover(&db, dir.path().join("new.db")).expect("recovers");
    assert!(
        report.copied > seen && report.from_side_files > 0,
        "{report:?} (the log alone reads {seen})"
    );
    assert_eq!(
        kept(&db, "damaged"),
        copy,
        "one copy however often it is read"
    );
}

#[test]
fn a_wal_cut_short_or_never_committed_is_not_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, _) = killed_with_a_long_wal(dir.path());
    let bytes = std::fs::read(wal_path(&db)).expect("a WAL");
    for cut in [bytes.len() - 1, bytes.len() / 2, 100] {
        assert_eq!(
            wal::inspect(&bytes[..cut]),
            wal::WalState::Whole,
            "cut at {cut}"
        );
    }
    // A frame cut in the last page: the same.
    let mut last = bytes.clone();
    let end = last.len() - 10;
    last[end] ^= 1;
    assert_eq!(wal::inspect(&last), wal::WalState::Whole);
    assert_eq!(wal::inspect(&bytes), wal::WalState::Whole);
    let reader = LogReader::open(&db).expect("opens");
    assert!(reader.side_damage().is_empty());
}

#[test]
fn a_power_durable_log_writes_gated_rows_and_commits_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open_with(
        &path,
        LogOptions {
            durability: Durability::Power,
            ..LogOptions::default()
        },
    )
    .expect("opens");
    let sync: String = log
        .inner_connection_pragma("synchronous")
        .expect("reads the pragma");
    assert_eq!(sync, "2", "synchronous=FULL");
    let seq = log
        .append("s", None, Utc::now(), Event::StepStarted { step: 1 })
        .expect("appends")
        .seq;
    futures_executor::block_on(log.durable(seq)).expect("durable");
    assert!(log.is_durable(seq));
    log.close().expect("closes");
    assert_eq!(seqs(&LogReader::open(&path).expect("opens")), [1]);
    assert_eq!(
        "power".parse::<Durability>().expect("parses"),
        Durability::Power
    );
    assert!("disk".parse::<Durability>().is_err());
}
