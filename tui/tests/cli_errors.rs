//! The binary never surprises: every mistake a user makes is named with the way out, exits
//! non-zero and leaves nothing behind; damaged logs are refused, checked and recovered.

mod support;

use std::path::Path;

use support::{corpus_copy, log_with_a_damaged_wal, names_in, run_mull, texts};

#[test]
fn a_directory_given_as_a_log_is_named_as_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("logs")).expect("mkdir");
    for args in [
        &["dash", "logs"][..],
        &["stats", "logs"],
        &["export", "logs"],
    ] {
        let output = run_mull(dir.path(), args, &[], "");
        let (_, stderr) = texts(&output);
        assert!(!output.status.success(), "{args:?}");
        assert!(
            stderr.contains("logs: a directory, not a log file") && !stderr.contains("I/O"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(names_in(dir.path()), ["logs"], "nothing created beside it");
}

#[test]
fn an_unknown_session_is_an_error_listing_the_ones_there_are() {
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = run_mull(
        dir.path(),
        &["demo", "--headless", "--deterministic", "--db", "d.db"],
        &[],
        "",
    );
    assert!(demo.status.success(), "{}", texts(&demo).1);
    let output = run_mull(
        dir.path(),
        &["export", "d.db", "--session", "typo"],
        &[],
        "",
    );
    let (stdout, stderr) = texts(&output);
    assert!(!output.status.success());
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(r#"d.db: no session "typo" (it holds 2: demo, demo.agent_1)"#),
        "{stderr}"
    );
}

#[test]
fn the_demo_leaves_only_its_database_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = run_mull(dir.path(), &["demo", "--headless", "--fast"], &[], "");
    assert!(output.status.success(), "{}", texts(&output).1);
    assert_eq!(
        names_in(dir.path()),
        ["mull.db"],
        "no lock file and no WAL beside the log"
    );
    let ignore = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../.gitignore"))
        .expect("reads .gitignore");
    for pattern in ["*.db", "*.db-wal", "*.db-shm", "*.db.lock"] {
        assert!(
            ignore.lines().any(|l| l == pattern),
            "{pattern} not ignored"
        );
    }
}

#[test]
fn a_failed_import_leaves_no_database_and_no_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"seq\":1,\"session_id\":\"s\",\"turn_id\":null,\"at\":\"yesterday\",\"v\":1,\"event\":{}}\n",
    )
    .expect("writes");
    let output = run_mull(dir.path(), &["import", "bad.jsonl", "new.db"], &[], "");
    let (_, stderr) = texts(&output);
    assert!(!output.status.success());
    assert!(stderr.contains("bad.jsonl:1:"), "{stderr}");
    assert_eq!(names_in(dir.path()), ["bad.jsonl"]);
}

#[test]
fn a_database_where_jsonl_belongs_and_jsonl_where_a_database_belongs_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = run_mull(
        dir.path(),
        &["demo", "--headless", "--deterministic", "--db", "d.db"],
        &[],
        "",
    );
    assert!(demo.status.success());
    for args in [&["replay", "d.db"][..], &["import", "d.db", "other.db"]] {
        let output = run_mull(dir.path(), args, &[], "");
        let (_, stderr) = texts(&output);
        assert!(!output.status.success(), "{args:?}");
        assert!(
            stderr.contains("d.db: a database, not a JSONL file; `mull export d.db > d.jsonl`"),
            "{args:?}: {stderr}"
        );
    }
    let export = run_mull(dir.path(), &["export", "d.db"], &[], "");
    std::fs::write(dir.path().join("d.jsonl"), &export.stdout).expect("writes");
    for args in [&["stats", "d.jsonl"][..], &["export", "d.jsonl"]] {
        let output = run_mull(dir.path(), args, &[], "");
        let (_, stderr) = texts(&output);
        assert!(!output.status.success(), "{args:?}");
        assert!(
            stderr.contains("d.jsonl: a JSONL export, not a database; `mull import d.jsonl"),
            "{args:?}: {stderr}"
        );
    }
    // Readers leave SQLite's (ignored) -wal/-shm beside a log; nothing else was created.
    let made: Vec<String> = names_in(dir.path())
        .into_iter()
        .filter(|n| !n.ends_with("-wal") && !n.ends_with("-shm"))
        .collect();
    assert_eq!(made, ["d.db", "d.jsonl"]);
}

#[test]
fn replay_takes_several_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (db, session) in [("a.db", "first"), ("b.db", "second")] {
        let demo = run_mull(
            dir.path(),
            &[
                "demo",
                "--headless",
                "--deterministic",
                "--db",
                db,
                "--session",
                session,
            ],
            &[],
            "",
        );
        assert!(demo.status.success());
        let export = run_mull(dir.path(), &["export", db], &[], "");
        std::fs::write(dir.path().join(db).with_extension("jsonl"), &export.stdout)
            .expect("writes");
    }
    let output = run_mull(dir.path(), &["replay", "a.jsonl", "b.jsonl"], &[], "");
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let a = stdout
        .find("== a.jsonl\nsession first")
        .expect("a's heading");
    let b = stdout
        .find("== b.jsonl\nsession second")
        .expect("b's heading");
    assert!(a < b, "{stdout}");
    let check = run_mull(
        dir.path(),
        &["replay", "--check", "a.jsonl", "b.jsonl"],
        &[],
        "",
    );
    let (stdout, stderr) = texts(&check);
    assert!(check.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.matches("identical:").count(), 2, "{stdout}");
}

#[test]
fn a_user_error_prints_no_backtrace_unless_mull_backtrace_asks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = run_mull(
        dir.path(),
        &["stats", "nope.db"],
        &[("RUST_BACKTRACE", "1")],
        "",
    );
    let (_, stderr) = texts(&output);
    assert!(!output.status.success());
    assert_eq!(
        stderr,
        "Error: opening nope.db\n\nCaused by:\n    nope.db: no such log\n"
    );
    let output = run_mull(
        dir.path(),
        &["stats", "nope.db"],
        &[("MULL_BACKTRACE", "1")],
        "",
    );
    let (_, stderr) = texts(&output);
    assert!(!output.status.success());
    assert!(stderr.contains("Stack backtrace"), "{stderr}");
}

#[test]
fn a_damaged_log_is_refused_checked_and_recovered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = corpus_copy(dir.path(), "corrupt.db");
    let before = std::fs::read(&db).expect("reads");

    let demo = run_mull(
        dir.path(),
        &["demo", "--headless", "--fast", "--db", "corrupt.db"],
        &[],
        "",
    );
    let (_, stderr) = texts(&demo);
    assert!(!demo.status.success());
    assert!(
        stderr.contains("corrupt.db: the log is damaged") && stderr.contains("mull recover"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&db).expect("reads"),
        before,
        "nothing appended"
    );

    let check = run_mull(dir.path(), &["check", "corrupt.db"], &[], "");
    let (report, _) = texts(&check);
    assert_eq!(check.status.code(), Some(1), "{report}");
    assert!(report.starts_with("corrupt.db: damaged\n"), "{report}");
    let stretch = report
        .lines()
        .find(|l| l.trim_start().starts_with("seqs "))
        .expect("a damaged stretch");
    assert!(stretch.contains("of session(s) sess_corpus"), "{stretch}");

    let export = run_mull(dir.path(), &["export", "corrupt.db"], &[], "");
    let (stdout, stderr) = texts(&export);
    assert!(!export.status.success());
    assert!(stdout.ends_with('\n'), "no partial line");
    let lines = stdout.lines().count();
    for line in stdout.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("every line is whole JSON");
    }
    assert!(
        stderr.contains(&format!("{lines} complete lines written before this error"))
            && stderr.contains(&format!("(read up to seq {lines})"))
            && stderr.contains(stretch.trim().split(',').next().expect("range")),
        "{stderr}"
    );

    let recover = run_mull(dir.path(), &["recover", "corrupt.db", "new.db"], &[], "");
    let (stdout, stderr) = texts(&recover);
    assert!(recover.status.success(), "{stderr}");
    assert!(stdout.contains("lost (could not be read):"), "{stdout}");
    let again = run_mull(dir.path(), &["check", "new.db"], &[], "");
    let (stdout, _) = texts(&again);
    assert!(again.status.success(), "{stdout}");
    assert!(stdout.starts_with("new.db: sound:"), "{stdout}");
    let demo = run_mull(
        dir.path(),
        &["demo", "--headless", "--fast", "--db", "new.db"],
        &[],
        "",
    );
    assert!(demo.status.success(), "{}", texts(&demo).1);
}

/// `stats`, `export` and `check` on a log with damage beside it: each exits 1 naming the file
/// kept (stats after printing the counts of what the database holds), and the evidence stays.
fn every_reader_reports(dir: &Path, db: &str, kept: &str) {
    for args in [&["stats", db][..], &["export", db], &["check", db]] {
        let output = run_mull(dir, args, &[], "");
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
        assert!(
            format!("{stdout}{stderr}").contains(kept),
            "{args:?} names the file kept ({kept}): {stdout}{stderr}"
        );
    }
    let stats = run_mull(dir, &["stats", db], &[], "");
    let (stdout, stderr) = texts(&stats);
    assert!(stdout.starts_with("sessions  "), "the counts: {stdout}");
    assert!(
        stderr.contains("leave out rows") && stderr.contains("mull recover"),
        "{stderr}"
    );
    let names = names_in(dir);
    assert_eq!(
        names.iter().filter(|n| n.starts_with(kept)).count(),
        1,
        "kept once, however often read: {names:?}"
    );
}

#[test]
fn a_directory_where_the_record_file_goes_fails_every_reader_and_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = run_mull(
        dir.path(),
        &["demo", "--headless", "--fast", "--db", "d.db"],
        &[],
        "",
    );
    assert!(demo.status.success(), "{}", texts(&demo).1);
    let stats = run_mull(dir.path(), &["stats", "d.db"], &[], "");
    assert!(stats.status.success(), "{}", texts(&stats).1);
    let misplaced = dir.path().join("d.db-records");
    std::fs::create_dir(&misplaced).expect("mkdir");
    std::fs::write(misplaced.join("note"), "kept").expect("writes");

    every_reader_reports(dir.path(), "d.db", "d.db-records.misplaced-");
    let names = names_in(dir.path());
    assert!(!names.contains(&"d.db-records".to_owned()), "{names:?}");
    let kept = names
        .iter()
        .find(|n| n.starts_with("d.db-records.misplaced-"))
        .expect("kept");
    let note = dir.path().join(kept).join("note");
    assert_eq!(std::fs::read_to_string(note).expect("kept whole"), "kept");

    let recover = run_mull(dir.path(), &["recover", "d.db", "new.db"], &[], "");
    assert!(recover.status.success(), "{}", texts(&recover).1);
    let stats = run_mull(dir.path(), &["stats", "new.db"], &[], "");
    assert!(stats.status.success(), "{}", texts(&stats).1);
}

#[test]
fn flipped_bytes_in_the_wal_fail_every_reader_and_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    log_with_a_damaged_wal(dir.path(), "w.db");
    every_reader_reports(dir.path(), "w.db", "w.db-wal.damaged-");
}

#[test]
fn a_piped_chat_that_runs_past_its_script_says_so_and_exits_non_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = "What's Lisbon like?\nWeather, and a walk?\nSomewhere to stay?\n\
                 Please cancel LIS-2291.\nWhat should I pack?\nThe tram to Belém?\n\
                 Book Casa do Largo.\nIs it booked?\nAnd one more thing?\n";
    let output = run_mull(
        dir.path(),
        &["chat", "--db", "c.db", "--model", "scripted-demo"],
        &[("RUST_BACKTRACE", "1")],
        input,
    );
    let (stdout, stderr) = texts(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(r#"input line 9 ("And one more thing?"): the turn failed"#)
            && stderr.contains("went past its script"),
        "{stderr}"
    );
    assert!(!stderr.contains("Stack backtrace"), "{stderr}");
    assert!(
        !stdout.contains('\x1b') && !stderr.contains('\x1b'),
        "no escape codes when piped"
    );
    assert_eq!(
        names_in(dir.path()),
        ["c.db"],
        "the log is kept, nothing else"
    );
}
