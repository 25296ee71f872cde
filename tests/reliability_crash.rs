//! A seeded subset of the crash trials (the full run is
//! `cargo run --release -p mull-reliability -- crash --trials 200`): a child process running
//! a scripted agent whose tool writes side effects is killed with SIGKILL at a seeded moment,
//! then the log is reopened and every promise is checked (see `crash.rs`).
//!
//! The test binary re-invokes itself as the child: `crash_child` does nothing unless
//! `MULL_RELIABILITY_CRASH_DB` is set.

#[path = "../crates/mull-reliability/src/crash.rs"]
#[allow(dead_code)] // the report fields are for the command-line run
mod crash;

use std::path::Path;
use std::process::Command;

const DB: &str = "MULL_RELIABILITY_CRASH_DB";
const EFFECTS: &str = "MULL_RELIABILITY_CRASH_EFFECTS";
const TRIALS: u64 = 20;

#[test]
fn crash_child() {
    let (Ok(db), Ok(effects)) = (std::env::var(DB), std::env::var(EFFECTS)) else {
        return;
    };
    if let Err(err) = crash::child_main(Path::new(&db), Path::new(&effects)) {
        eprintln!("crash child failed: {err:#}");
        std::process::exit(2);
    }
}

#[test]
fn sigkill_at_seeded_moments_loses_nothing_flushed_and_runs_no_tool_twice() {
    let exe = std::env::current_exe().expect("test binary");
    let spawn = |db: &Path, effects: &Path| {
        let mut command = Command::new(&exe);
        command
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(DB, db)
            .env(EFFECTS, effects);
        command
    };
    let summary = crash::run_trials(&spawn, TRIALS, 1000, 150, |_| {}).expect("trials run");
    assert!(
        summary.failures.is_empty(),
        "{} of {} trials failed:\n{}",
        summary.failures.len(),
        summary.trials,
        summary.failures.join("\n")
    );
    assert_eq!(summary.passed, TRIALS);
    assert!(summary.effects > 0, "no trial got as far as a side effect");
    assert!(
        summary.reports > 0,
        "no turn end was reported before a kill"
    );
}
