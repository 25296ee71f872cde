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
