use super::*;
use mull_core::StreamPart;
use rusqlite::Connection;

fn at(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_735_689_600_000_000 + micros).expect("valid time")
}

fn delta(text: &str) -> Event {
    Event::Chunk {
        step: 0,
        part: StreamPart::TextDelta {
            id: "t0".into(),
            text: text.into(),
        },
        original: None,
    }
}

#[test]
fn append_assigns_contiguous_seqs_and_flush_makes_them_readable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let mut appended = Vec::new();
    for i in 0..1000 {
        let env = log
            .append("sess_1", Some("turn_1"), at(i), delta(&format!("d{i}")))
            .expect("appends");
        assert_eq!(env.seq, i as u64 + 1);
        appended.push(env);
    }
    assert_eq!(log.last_seq(), 1000);
    log.flush_blocking().expect("flushes");
    let reader = log.reader().expect("reader");
    assert_eq!(reader.max_seq().expect("max"), 1000);
    assert_eq!(reader.range(1, 1000).expect("range"), appended);
}

#[test]
fn rows_of_one_turn_and_rows_of_many_sessions_read_back_with_their_own_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let mut appended = Vec::new();
    let mut append = |session: &str, turn: Option<&str>, i: i64| {
        let env = log
            .append(session, turn, at(i), delta(&format!("d{i}")))
            .expect("appends");
        appended.push(env);
    };
    // A batch that one turn writes alone (its ids bound once per statement)...
    for i in 0..40 {
        append("sess_a", Some("turn_a"), i);
    }
    log.flush_blocking().expect("flushes");
    // ...then batches where sessions, turns and turnless rows take turns.
    for i in 40..80 {
        match i % 3 {
            0 => append("sess_a", Some("turn_a"), i),
            1 => append("sess_b", Some("turn_b"), i),
            _ => append("sess_b", None, i),
        }
    }
    // A run of turnless rows of one session, then one of another session.
    for i in 80..100 {
        append("sess_c", None, i);
    }
    append("sess_a", Some("turn_a"), 100);
    log.flush_blocking().expect("flushes");
    let reader = log.reader().expect("reader");
    assert_eq!(reader.range(1, 101).expect("range"), appended);
}

#[test]
fn timestamps_are_kept_to_the_microsecond_on_both_sides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let precise = DateTime::from_timestamp(1_735_689_600, 123_456_789).expect("valid");
    let env = log.append("s", None, precise, delta("x")).expect("appends");
    assert_eq!(env.at.timestamp_subsec_nanos(), 123_456_000);
    log.flush_blocking().expect("flushes");
    assert_eq!(
        log.reader().expect("reader").range(1, 1).expect("range"),
        vec![env]
    );
}

#[test]
fn a_second_writer_is_refused_naming_the_lock_and_the_first_keeps_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("opens");
    let err = Log::open(&path).expect_err("second writer");
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("log.db.lock"), "{err}");
    log.append("s", None, at(0), delta("a")).expect("appends");
    drop(log);
    let again = Log::open(&path).expect("lock released on drop");
    assert_eq!(again.last_seq(), 1, "dropping committed the queued event");
    let env = again.append("s", None, at(1), delta("b")).expect("appends");
    assert_eq!(env.seq, 2, "seqs continue after reopening");
}

/// Rows that fill the batch the writer already holds open are committed at once, even when
/// there are fewer of them than the writer wakes for on their own.
#[test]
fn rows_that_fill_an_open_batch_commit_without_waiting_for_its_delay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = LogOptions {
        batch_max_events: 3,
        batch_max_delay: Duration::from_secs(60),
        ..LogOptions::default()
    };
    let log = Log::open_with(dir.path().join("log.db"), options).expect("opens");
    // Four rows reach the writer at once (it waits for the write connection while they
    // queue): it commits a batch of three and holds the fourth in an open transaction.
    {
        let _connection = lock(&log.inner.shared.store);
        for i in 1..=4 {
            log.append("s", None, at(i), delta("x")).expect("appends");
        }
    }
    let reader = log.reader().expect("reader");
    let deadline = Instant::now() + Duration::from_secs(10);
    while reader.max_seq().expect("max") < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(reader.max_seq().expect("max"), 3);
    // Two more fill the open batch: fewer than the writer wakes for on their own.
    for i in 5..=6 {
        log.append("s", None, at(i), delta("x")).expect("appends");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while reader.max_seq().expect("max") < 6 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(reader.max_seq().expect("max"), 6, "the full batch waited");
}

#[test]
fn small_batches_and_long_delays_still_commit_everything_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = LogOptions {
        batch_max_events: 3,
        batch_max_delay: Duration::from_secs(60),
        ..LogOptions::default()
    };
    let log = Log::open_with(dir.path().join("log.db"), options).expect("opens");
    for i in 0..10 {
        log.append("s", None, at(i), delta("x")).expect("appends");
    }
    // Nine events fill three batches; the tenth waits for its delay or a barrier.
    let reader = log.reader().expect("reader");
    let deadline = Instant::now() + Duration::from_secs(10);
    while reader.max_seq().expect("max") < 9 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(reader.max_seq().expect("max"), 9);
    log.flush_blocking().expect("flushes");
    assert_eq!(reader.max_seq().expect("max"), 10);
}

#[test]
fn appends_from_many_threads_get_unique_seqs_in_commit_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                (0..500)
                    .map(|i| {
                        log.append(&format!("s{t}"), None, at(i), delta(&i.to_string()))
                            .expect("appends")
                            .seq
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all = Vec::new();
    for thread in threads {
        let seqs = thread.join().expect("thread");
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        all.extend(seqs);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=2000).collect::<Vec<u64>>());
    log.flush_blocking().expect("flushes");
    let reader = log.reader().expect("reader");
    for t in 0..4 {
        let events = reader
            .session_page(&format!("s{t}"), 0, 10_000)
            .expect("page");
        let texts: Vec<String> = events
            .iter()
            .map(|e| match &e.event {
                Event::Chunk {
                    part: StreamPart::TextDelta { text, .. },
                    ..
                } => text.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(texts, (0..500).map(|i| i.to_string()).collect::<Vec<_>>());
    }
}

#[test]
fn a_failed_commit_is_reported_and_earlier_commits_stay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("opens");
    for i in 0..4 {
        log.append("s", None, at(i), delta("ok")).expect("appends");
    }
    log.flush_blocking().expect("flushes");
    // Another connection makes the fifth insert fail, as a full disk would.
    let raw = Connection::open(&path).expect("raw");
    raw.busy_timeout(Duration::from_secs(5)).expect("timeout");
    raw.execute_batch(
        "CREATE TRIGGER refuse_lost BEFORE INSERT ON events WHEN NEW.payload LIKE '%lost%' \
             BEGIN SELECT RAISE(ABORT, 'disk is full'); END;",
    )
    .expect("trigger");
    drop(raw);
    log.append("s", None, at(4), delta("lost")).expect("queued");
    let err = log.flush_blocking().expect_err("commit fails");
    let text = err.to_string();
    assert!(matches!(err, StoreError::WriterFailed { .. }), "{text}");
    assert!(
        text.contains("disk is full") && text.contains("5..="),
        "{text}"
    );
    let err = log
        .append("s", None, at(6), delta("refused"))
        .expect_err("writer stopped");
    assert!(matches!(err, StoreError::WriterFailed { .. }), "{err}");
    drop(log);
    let reader = LogReader::open(&path).expect("reader");
    assert_eq!(reader.max_seq().expect("max"), 4);
}

#[test]
fn a_row_another_program_added_stops_the_writer_before_seqs_go_astray() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = Log::open(&path).expect("opens");
    for i in 0..3 {
        log.append("s", None, at(i), delta("ok")).expect("appends");
    }
    log.flush_blocking().expect("flushes");
    // Behind the writer's back (past its lock), a row lands far beyond the log's last seq.
    let raw = Connection::open(&path).expect("raw");
    raw.busy_timeout(Duration::from_secs(5)).expect("timeout");
    raw.execute(
        "INSERT INTO events (seq, session_id, at, v, kind, payload) \
             VALUES (10, 's', 1735689600000000, 1, 'chunk', '{}')",
        [],
    )
    .expect("foreign row");
    drop(raw);
    let envelope = log
        .append("s", None, at(3), delta("astray"))
        .expect("queued");
    assert_eq!(envelope.seq, 4);
    let err = log.flush_blocking().expect_err("the mismatch is refused");
    let text = err.to_string();
    assert!(
        text.contains("seq 4 was stored as 11") && text.contains("4..=4"),
        "{text}"
    );
    drop(log);
    let reader = LogReader::open(&path).expect("reader");
    assert_eq!(
        reader.max_seq().expect("max"),
        10,
        "the refused row was rolled back"
    );
}

#[test]
fn flush_works_under_an_async_runtime_without_one_of_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    log.append("s", None, at(0), delta("a")).expect("appends");
    futures_executor::block_on(async {
        log.flush().await.expect("flushes");
    });
    assert_eq!(log.reader().expect("reader").max_seq().expect("max"), 1);
}

#[test]
fn barriers_commit_in_order_whoever_commits_and_the_wal_is_checkpointed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let options = LogOptions {
        checkpoint_pages: 500,
        ..LogOptions::default()
    };
    let log = Log::open_with(&path, options).expect("opens");
    // Many small barriers, from two threads at once: some commit inline, some wait for
    // the writer thread; every seq lands once and in order.
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..1500 {
                    log.append(&format!("s{t}"), None, at(i), delta("x"))
                        .expect("appends");
                    log.flush_blocking().expect("flushes");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread");
    }
    let reader = log.reader().expect("reader");
    assert_eq!(reader.max_seq().expect("max"), 3000);
    assert_eq!(reader.range(1, 3000).expect("range").len(), 3000);
    // 3,000 commits of two or three pages each would leave a WAL of ~30 MB without
    // checkpoints; the writer thread keeps it near the 500-page mark (2 MiB), a few times
    // that when other tests starve its checkpoints of CPU.
    let wal = std::fs::metadata(dir.path().join("log.db-wal"))
        .expect("wal")
        .len();
    assert!(wal < 12 * 1024 * 1024, "WAL grew to {wal} bytes");
}

#[test]
fn every_writer_records_where_it_started_and_knows_no_earlier_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let started = Event::TurnStarted {
        request_id: "req_1".into(),
        message_id: "msg_1".into(),
        entry: mull_core::EntryPath::Chat,
        continuation: false,
        attempt: 0,
        body: serde_json::json!({}),
    };
    let log = Log::open(&path).expect("opens");
    log.append("s", Some("t"), at(0), started).expect("appends");
    log.append("s", Some("t"), at(1), delta("a"))
        .expect("appends");
    log.close().expect("closes");
    // The process stopped mid-turn; the next writer did not start that turn.
    let log = Log::open(&path).expect("reopens");
    log.append("s", Some("t"), at(2), delta("b"))
        .expect("appends");
    log.close().expect("closes");
    let conn = Connection::open(&path).expect("raw");
    let starts: Vec<i64> = conn
        .prepare("SELECT seq FROM writer_starts ORDER BY seq")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("reads");
    assert_eq!(starts, [0, 2]);
    let kinds: Vec<String> = conn
        .prepare("SELECT kind FROM events ORDER BY seq")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("reads");
    // The new writer resolved the turn at open (see `recovery`); a chunk written after
    // that is outside any turn it started.
    assert_eq!(
        kinds,
        [
            "turn_started",
            "chunk",
            "turn_finished",
            "turn_failed",
            crate::schema::LOOSE_CHUNK
        ]
    );
    let reader = LogReader::open(&path).expect("reader");
    let seqs: Vec<u64> = reader
        .session_page("s", 0, 10)
        .expect("reads")
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
}

#[test]
fn the_shared_reader_sees_later_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    assert_eq!(log.with_reader(|r| r.max_seq()).expect("reads"), 0);
    log.append("s", None, at(0), delta("a")).expect("appends");
    log.flush_blocking().expect("flushes");
    assert_eq!(log.with_reader(|r| r.max_seq()).expect("reads"), 1);
}

#[test]
fn an_import_holds_at_most_a_batch_of_rows_and_commits_them_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    let total = 2 * IMPORT_BATCH as u64 + 1;
    let n = log
        .import("rows", |import| {
            for seq in 1..=total {
                let event = delta(&seq.to_string());
                import.push(Row {
                    seq,
                    session_id: Arc::from("s"),
                    turn_id: None,
                    at: at(seq as i64),
                    v: EVENT_VERSION,
                    kind: kind_of(&event),
                    payload: event.encode(),
                })?;
                assert!(import.batch.len() < IMPORT_BATCH, "seq {seq}");
            }
            Ok(())
        })
        .expect("imports");
    assert_eq!(n, total);
    assert_eq!(log.last_seq(), total);
    let reader = log.reader().expect("reader");
    assert_eq!(reader.max_seq().expect("max"), total);
    assert_eq!(reader.range(1, total).expect("range").len() as u64, total);
}

#[test]
fn an_import_that_panics_leaves_the_log_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log.db")).expect("opens");
    log.append("s", None, at(0), delta("before"))
        .expect("appends");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        log.import("rows", |import| {
            let event = delta("imported");
            import.push(Row {
                seq: 2,
                session_id: Arc::from("s"),
                turn_id: None,
                at: at(1),
                v: EVENT_VERSION,
                kind: kind_of(&event),
                payload: event.encode(),
            })?;
            import.insert()?;
            panic!("the input broke");
        })
    }));
    assert!(panicked.is_err());
    let env = log
        .append("s", None, at(2), delta("after"))
        .expect("appends");
    assert_eq!(env.seq, 2, "the import's seq was never published");
    log.flush_blocking().expect("the writer goes on");
    let events = log.reader().expect("reader").range(1, 10).expect("range");
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].event, delta("after"));
}

#[test]
fn unknown_kinds_are_stored_under_their_own_kind() {
    assert_eq!(kind_of(&delta("x")), "chunk");
    assert_eq!(kind_of(&Event::StepStarted { step: 1 }), "step_started");
    let unknown = Event::decode(1, r#"{"type":"from_the_future","x":1}"#).expect("decodes");
    assert_eq!(kind_of(&unknown), "from_the_future");
}

/// Rows committed to the database at `path`, counted on a connection of its own (a reader
/// would have this process's writer commit first).
fn committed_rows(path: &Path) -> i64 {
    Connection::open(path)
        .expect("a raw connection")
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .expect("counts")
}

/// A log whose writer thread never commits on its own: only barriers do.
fn open_without_background_commits(path: &Path) -> Log {
    Log::open_with(
        path,
        LogOptions {
            batch_max_events: 1_000_000,
            batch_max_delay: Duration::from_secs(3600),
            ..LogOptions::default()
        },
    )
    .expect("opens")
}

/// What a kill leaves: the log's files as they are on disk now, copied to `into`.
fn files_as_killed(path: &Path, into: &Path) -> PathBuf {
    std::fs::create_dir_all(into).expect("mkdir");
    let name = path.file_name().expect("a file name");
    for suffix in ["", "-wal", "-records"] {
        let mut from = path.as_os_str().to_owned();
        from.push(suffix);
        let mut to = into.join(name).into_os_string();
        to.push(suffix);
        if std::path::Path::new(&from).exists() {
            std::fs::copy(&from, &to).expect("copies");
        }
    }
    into.join(name)
}

#[test]
fn rows_a_gate_let_out_survive_a_kill_before_their_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.db");
    let log = open_without_background_commits(&path);
    let mut last = 0;
    for step in 0..5 {
        last = log
            .append(
                "s",
                Some("t"),
                at(i64::from(step)),
                Event::StepStarted { step },
            )
            .expect("appends")
            .seq;
    }
    futures_executor::block_on(log.durable(last)).expect("durable");
    assert!(log.is_durable(last));
    // The gate wrote the rows to the record file; nothing is committed yet.
    assert_eq!(committed_rows(&path), 0);
    assert!(records_path(&path).metadata().expect("a record file").len() > 0);
    // The next appended row is not durable until a gate or a commit says so.
    let later = log
        .append("s", Some("t"), at(9), Event::StepStarted { step: 9 })
        .expect("appends")
        .seq;
    assert!(!log.is_durable(later));

    let copy = files_as_killed(&path, &dir.path().join("killed"));
    // A reader of the killed log sees them too: it inserts a dead writer's record file first.
    let reader_copy = files_as_killed(&path, &dir.path().join("read"));
    let seen: Vec<u64> = LogReader::open(&reader_copy)
        .expect("a reader opens")
        .session_events("s", 0)
        .expect("reads")
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seen, [1, 2, 3, 4, 5]);
    assert!(!records_path(&reader_copy).exists());
    // A reader in the writer's own process has the writer commit first: it sees what was let
    // out, and the record file empties.
    let in_process = LogReader::open(&path).expect("reader");
    assert_eq!(in_process.max_seq().expect("reads"), 6);
    assert_eq!(committed_rows(&path), 6);
    assert_eq!(records_path(&path).metadata().expect("kept").len(), 0);
    let reopened = Log::open(&copy).expect("reopens");
    let events = reopened
        .reader()
        .expect("reader")
        .session_events("s", 0)
        .expect("reads");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        [1, 2, 3, 4, 5],
        "every row the gate let out, and none after"
    );
    assert_eq!(events[4].event, Event::StepStarted { step: 4 });
    assert_eq!(events[4].at, at(4));
    assert_eq!(events[4].turn_id.as_deref(), Some("t"));
    // Inserted, the rows leave the file empty; the next append continues after them.
    assert_eq!(records_path(&copy).metadata().expect("kept").len(), 0);
    let next = reopened
        .append("s", None, at(10), Event::StepStarted { step: 10 })
        .expect("appends")
        .seq;
    assert_eq!(next, 6);
    reopened.close().expect("closes");
    assert!(
        !records_path(&copy).exists(),
        "a clean close leaves no record file"
    );
    log.close().expect("closes");
    assert!(!records_path(&path).exists());
}

#[test]
fn a_new_session_is_found_before_its_rows_are_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_without_background_commits(&dir.path().join("log.db"));
    assert!(!log.has_session("s").expect("looks up"));
    log.append("s", None, at(0), Event::StepStarted { step: 0 })
        .expect("appends");
    assert!(log.has_session("s").expect("queued"));
    // Taken into the open transaction by the writer, still not committed.
    {
        let mut store = lock(&log.inner.shared.store);
        store.insert_queued(&log.inner.shared);
    }
    assert_eq!(committed_rows(&dir.path().join("log.db")), 0);
    assert!(log.has_session("s").expect("in the open transaction"));
    assert!(!log.has_session("t").expect("looks up"));
    log.flush_blocking().expect("flushes");
    assert!(log.has_session("s").expect("committed"));
}

/// Inserted rows are freed by the threads that append, one per append; what waits for them is
/// bounded in count and leaves large payloads out.
#[test]
fn inserted_rows_wait_for_appends_to_free_them_within_bounds() {
    use super::batcher::{SPENT_ROWS, SPENT_ROW_BYTES};
    let dir = tempfile::tempdir().expect("tempdir");
    // No commit by deadline while the test looks: only its own flushes take rows (and the
    // writer thread, eagerly, once 64 are queued).
    let options = LogOptions {
        batch_max_events: 100_000,
        batch_max_delay: Duration::from_secs(60),
        ..LogOptions::default()
    };
    let log = Log::open_with(dir.path().join("log.db"), options).expect("opens");
    let spent = || lock(&log.inner.shared.queue).spent.len();
    let mut at_micros = 0;
    let mut append = |text: &str| {
        at_micros += 1;
        log.append("sess_1", None, at(at_micros), delta(text))
            .expect("appends");
    };
    for _ in 0..3000 {
        append("small");
    }
    log.flush_blocking().expect("flushes");
    append("small");
    log.flush_blocking().expect("flushes");
    let waiting = spent();
    assert!(
        (10..=SPENT_ROWS).contains(&waiting),
        "{waiting} rows waiting"
    );
    // Each append frees one (ten appends take nothing: fewer than the writer inserts eagerly).
    for _ in 0..10 {
        append("small");
    }
    assert_eq!(spent(), waiting - 10);
    // A large payload is freed by the writer, not kept waiting.
    append(&"x".repeat(2 * SPENT_ROW_BYTES));
    log.flush_blocking().expect("flushes");
    append("small");
    log.flush_blocking().expect("flushes");
    assert!(lock(&log.inner.shared.queue)
        .spent
        .iter()
        .all(|row| row.payload.len() < SPENT_ROW_BYTES));
}
