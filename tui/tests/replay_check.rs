//! `mull replay --check`, run as the real binary over the demo fixture and over a copy whose
//! recorded policy decision was changed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn demo_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo.jsonl")
}

fn check(file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mull"))
        .args(["replay", "--check"])
        .arg(file)
        .output()
        .expect("run mull")
}

#[test]
fn the_demo_fixture_replays_identically() {
    let output = check(&demo_fixture());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.trim(), "identical: 348 events");
}

#[test]
fn a_recording_whose_policy_differs_exits_1_naming_the_decision() {
    let recorded = std::fs::read_to_string(demo_fixture()).expect("read fixture");
    // As if the recording had been made when the policy let cancellations through.
    let line = recorded
        .lines()
        .find(|l| l.contains(r#""type":"tool_decided""#) && l.contains(r#""action":"block""#))
        .expect("the demo blocks a call");
    let seq: u64 = serde_json::from_str::<serde_json::Value>(line).expect("json")["seq"]
        .as_u64()
        .expect("seq");
    let changed = recorded.replacen(
        line,
        &line.replace(r#""action":"block""#, r#""action":"allow""#),
        1,
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("changed.jsonl");
    std::fs::write(&file, changed).expect("write");

    let output = check(&file);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "first divergence at seq {seq} (event {seq} of the session): expected tool_decided, got tool_decided"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#"event.action: "allow" ≠ "block""#),
        "{stdout}"
    );
}
