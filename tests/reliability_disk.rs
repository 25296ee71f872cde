//! A full disk: a child process writes to the log under a tiny file-size limit (`ulimit -f`,
//! with SIGXFSZ ignored so a write past the limit fails instead of killing the process) until a
//! commit fails. The failure must name the seqs it lost and the cause, the child must survive
//! it, every event before its last completed barrier must be in the log, and the log must open
//! and take writes again once there is room.
//!
//! The test binary re-invokes itself as the child: `disk_child` does nothing unless
//! `MULL_RELIABILITY_DISK_DB` is set.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use mull::core::{Clock, Event, FixedClock, StreamPart};
use mull::store::{Log, LogReader, StoreError};

const DB: &str = "MULL_RELIABILITY_DISK_DB";
/// The file-size limit of the child, in KiB (bash's `ulimit -f` unit).
const LIMIT_KIB: u32 = 192;

fn delta(i: u64) -> Event {
    Event::Chunk {
        step: 0,
        part: StreamPart::TextDelta {
            id: "t0".into(),
            text: format!("chunk {i}: {}", "lorem ipsum dolor sit amet ".repeat(6)),
        },
        original: None,
    }
}

#[test]
fn disk_child() {
    let Ok(db) = std::env::var(DB) else {
        return;
    };
    let log = Log::open(&db).expect("the child opens the log");
    let clock = FixedClock::at_fixture_epoch();
    let mut i = 0u64;
    loop {
        for _ in 0..40 {
            i += 1;
            clock.advance(Duration::from_micros(1));
            if let Err(err) = log.append("sess_disk", Some("turn_1"), clock.now(), delta(i)) {
                // The writer thread can meet the full disk with a batch of its own before the
                // next barrier (on a busy machine): the barrier then reports that failure.
                if let Err(failed) = log.flush_blocking() {
                    println!("FAILED {failed}");
                }
                println!("APPEND-REFUSED {err}");
                return;
            }
        }
        let before = log.last_seq();
        match log.flush_blocking() {
            Ok(()) => println!("BARRIER {before}"),
            Err(err) => {
                println!("FAILED {err}");
                // The writer stopped; later appends are refused with the same cause.
                match log.append("sess_disk", None, clock.now(), delta(i + 1)) {
                    Err(err) => println!("APPEND-REFUSED {err}"),
                    Ok(env) => println!("APPEND-ACCEPTED {}", env.seq),
                }
                return;
            }
        }
        if i > 1_000_000 {
            println!("NEVER-FULL");
            return;
        }
    }
}

#[test]
fn a_full_disk_fails_the_commit_naming_it_and_loses_nothing_flushed() {
    if Command::new("bash").arg("-c").arg("true").status().is_err() {
        eprintln!("skipped: no bash to set the file-size limit with");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    Log::open(&db).expect("creates").close().expect("closes");
    let exe = std::env::current_exe().expect("test binary");
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {LIMIT_KIB}; exec \"$0\" \"$@\""
        ))
        .arg(exe)
        .args(["--exact", "disk_child", "--nocapture", "--test-threads=1"])
        .env(DB, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawns the child")
        .wait_with_output()
        .expect("the child ends");
    assert!(
        output.status.success(),
        "the child died: {:?}",
        output.status
    );
    let mut barrier = 0u64;
    let mut failed = None;
    let mut refused = None;
    for line in BufReader::new(&output.stdout[..]).lines() {
        let line = line.expect("reads");
        if let Some(seq) = line.strip_prefix("BARRIER ") {
            barrier = seq.parse().expect("a seq");
        } else if let Some(text) = line.strip_prefix("FAILED ") {
            failed = Some(text.to_owned());
        } else if let Some(text) = line.strip_prefix("APPEND-REFUSED ") {
            refused = Some(text.to_owned());
        } else if line.starts_with("NEVER-FULL") || line.starts_with("APPEND-ACCEPTED") {
            panic!("the limit was not enforced: {line}");
        }
    }
    let failed = failed.expect("a commit failed");
    assert!(
        failed.contains("the log writer stopped: committing seqs"),
        "the failure must say which seqs were lost: {failed}"
    );
    assert!(
        failed.contains("disk") || failed.contains("full"),
        "the failure must name the cause: {failed}"
    );
    assert_eq!(
        refused.as_deref(),
        Some(failed.as_str()),
        "later appends give the same cause"
    );
    assert!(barrier > 0, "no barrier completed before the disk filled");

    // Nothing flushed is lost, seqs are contiguous, and the log takes writes again.
    let reader = LogReader::open(&db).expect("the log opens after the fault");
    let max = reader.max_seq().expect("max");
    assert!(
        max >= barrier,
        "max seq {max} is before the last barrier {barrier}"
    );
    let events = reader.range(1, max).expect("reads every event");
    assert_eq!(events.len() as u64, max, "seqs are contiguous");
    let log = match Log::open(&db) {
        Ok(log) => log,
        Err(StoreError::Locked { .. }) => panic!("the dead child still holds the lock"),
        Err(err) => panic!("reopening failed: {err}"),
    };
    let env = log
        .append(
            "sess_disk",
            None,
            FixedClock::at_fixture_epoch().now(),
            delta(0),
        )
        .expect("appends after the fault");
    assert_eq!(
        env.seq,
        max + 1,
        "seqs continue after the last committed one"
    );
    log.close().expect("commits");
}
