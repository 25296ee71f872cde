//! What the binary's tests share: running the real `mull` and reading what it left, and
//! `mull serve` processes on PostgreSQL for the multi-node tests.

#![allow(dead_code)]

pub mod model;
pub mod nodes;
pub mod parked;
pub mod tmux;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs `mull` with `args` in `cwd`, `input` on standard input and a clean environment for
/// the variables that change its output (a user's RUST_BACKTRACE among them, as set here).
pub fn run_mull(cwd: &Path, args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mull"));
    command
        .current_dir(cwd)
        .args(args)
        .env_remove("MULL_MODEL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("MULL_BACKTRACE")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("run mull");
    let written = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes());
    // A command that fails before reading its input closes the pipe.
    if let Err(err) = written {
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "{err}");
    }
    child.wait_with_output().expect("wait")
}

/// Standard output and standard error as text.
pub fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The names in `dir`, sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("reads the directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A copy of a database of the bad-input corpus in `dir`.
pub fn corpus_copy(dir: &Path, name: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/badinput/db")
        .join(name);
    let to = dir.join(name);
    std::fs::copy(&from, &to).expect("copies the corpus file");
    to
}

/// A log `name` in `dir` as a killed writer left it (many small commits, the WAL never
/// checkpointed), then with two bytes flipped in a page early in its WAL: SQLite stops at the
/// bad frame and reads fewer events than were committed. Returns the log's path.
pub fn log_with_a_damaged_wal(dir: &Path, name: &str) -> PathBuf {
    use mull_store::{Log, LogOptions};
    let live = tempfile::tempdir().expect("tempdir");
    let path = live.path().join("live.db");
    let log = Log::open_with(
        &path,
        LogOptions {
            checkpoint_pages: 1_000_000,
            batch_max_delay: std::time::Duration::from_secs(3600),
            ..LogOptions::default()
        },
    )
    .expect("opens");
    for step in 0..167u32 {
        log.append(
            "s",
            Some("t"),
            chrono::Utc::now(),
            mull_core::Event::StepStarted { step: step * 1000 },
        )
        .expect("appends");
        if step % 4 == 3 {
            log.flush_blocking().expect("commits");
        }
    }
    log.flush_blocking().expect("commits");
    // Copied while the writer lives: what a kill leaves.
    let db = dir.join(name);
    let wal = dir.join(format!("{name}-wal"));
    std::fs::copy(&path, &db).expect("copies the database");
    let mut bytes = std::fs::read(live.path().join("live.db-wal")).expect("a WAL");
    log.close().expect("closes");
    let page = 4096 + 24;
    let frames = (bytes.len() - 32) / page;
    assert!(frames > 20, "{frames} frames");
    let at = 32 + (frames / 4) * page + 24 + 100;
    bytes[at] ^= 0xff;
    bytes[at + 1] ^= 0xff;
    std::fs::write(&wal, &bytes).expect("writes the WAL");
    db
}
