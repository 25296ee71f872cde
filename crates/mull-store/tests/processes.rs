//! Behaviour across processes: a writer killed mid-stream, and a tail in another process.
//!
//! The test binary re-invokes itself as the child process: `child_process` does nothing unless
//! `MULL_STORE_CHILD` names a role.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mull_core::{Envelope, Event, StreamPart};
use mull_store::{Log, LogReader};

const ROLE: &str = "MULL_STORE_CHILD";
const DB: &str = "MULL_STORE_DB";
const TAIL_EVENTS: u64 = 300;

fn at(i: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_735_689_600_000_000 + i as i64).expect("valid time")
}

/// The i-th event a child writes: a chunk-sized text delta.
fn event(i: u64) -> Event {
    Event::Chunk {
        step: 0,
        part: StreamPart::TextDelta {
            id: "t0".into(),
            text: format!("delta {i}: the quick brown fox jumps over the lazy dog"),
        },
        original: None,
    }
}

fn spawn_child(role: &str, db: &Path) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(DB, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawns the child")
}

/// Reads the child's stdout until a line starting with `marker`; returns the rest of it.
fn wait_for(child: &mut Child, marker: &str) -> String {
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.expect("reads the child");
        // libtest may print "test child_process ... " on the same line first.
        if let Some(at) = line.find(marker) {
            return line[at + marker.len()..].trim().to_owned();
        }
    }
    panic!("the child ended without printing {marker}");
}

#[test]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let db = std::env::var(DB).expect("db path");
    let log = Log::open(&db).expect("child opens the log");
    match role.as_str() {
        "crash" => {
            let mut i = 0;
            while i < 2000 {
                i += 1;
                log.append("sess_1", Some("turn_1"), at(i), event(i))
                    .expect("appends");
            }
            log.flush_blocking().expect("flushes");
            println!("BARRIER {}", log.last_seq());
            // Keep appending without a barrier until killed.
            loop {
                i += 1;
                log.append("sess_1", Some("turn_1"), at(i), event(i))
                    .expect("appends");
                if i % 64 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        "write" => {
            for i in 1..=TAIL_EVENTS {
                log.append("sess_1", None, at(i), event(i))
                    .expect("appends");
                if i % 25 == 0 {
                    log.flush_blocking().expect("flushes");
                    std::thread::sleep(Duration::from_millis(3));
                }
            }
            log.close().expect("closes");
            println!("DONE");
        }
        other => panic!("unknown child role {other}"),
    }
}

#[test]
fn a_killed_writer_keeps_everything_before_its_last_barrier_with_contiguous_seqs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    let mut child = spawn_child("crash", &db);
    let barrier: u64 = wait_for(&mut child, "BARRIER").parse().expect("a seq");
    assert_eq!(barrier, 2000);
    std::thread::sleep(Duration::from_millis(50));
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    // The lock died with the process: a new writer may open the log.
    let log = Log::open(&db).expect("reopens after the crash");
    let reader = log.reader().expect("reader");
    let max = reader.max_seq().expect("max");
    assert!(
        max >= barrier,
        "lost events before the barrier: max {max} < {barrier}"
    );
    let events = reader.load_session("sess_1").expect("every event decodes");
    assert_eq!(events.last_seq, max);
    let mut expected = 1;
    let mut after = 0;
    loop {
        let page = reader.page(after, 10_000).expect("page");
        let Some(last) = page.last() else { break };
        after = last.seq;
        for env in &page {
            assert_eq!(env.seq, expected, "seqs must be contiguous");
            assert_eq!(env.event, event(expected));
            expected += 1;
        }
    }
    assert_eq!(expected - 1, max);
    // And the log goes on where the crash left it.
    let next = log
        .append("sess_1", None, at(0), Event::StepStarted { step: 1 })
        .expect("appends");
    assert_eq!(next.seq, max + 1);
}

#[test]
fn a_tail_in_one_process_sees_exactly_what_another_process_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("log.db");
    drop(Log::open(&db).expect("creates the log"));
    let mut tail = LogReader::open(&db).expect("reader").tail(0);
    let mut child = spawn_child("write", &db);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen: Vec<Envelope> = Vec::new();
    while (seen.len() as u64) < TAIL_EVENTS && Instant::now() < deadline {
        seen.extend(tail.next_batch(Duration::from_millis(200)).expect("tails"));
    }
    wait_for(&mut child, "DONE");
    assert!(child.wait().expect("child exits").success());
    let written = LogReader::open(&db)
        .expect("reader")
        .range(1, TAIL_EVENTS)
        .expect("range");
    assert_eq!(seen, written);
    let expected: Vec<Event> = (1..=TAIL_EVENTS).map(event).collect();
    assert_eq!(
        seen.into_iter().map(|e| e.event).collect::<Vec<_>>(),
        expected
    );
}
