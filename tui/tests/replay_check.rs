//! `mull replay --check`, run as the real binary over every shipped fixture, over a copy of
//! the demo's whose recorded policy decision was changed, and over one recorded by an agent the
//! binary does not have.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn demo_fixture() -> PathBuf {
    fixtures().join("demo.jsonl")
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
    // Both sessions: the desk's and its research sub-agent's, every event of the file.
    let events = std::fs::read_to_string(demo_fixture())
        .expect("the demo fixture")
        .lines()
        .count();
    assert_eq!(stdout.trim(), format!("identical: {events} events"));
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

#[test]
fn every_shipped_fixture_replays_identically_with_the_agent_that_recorded_it() {
    let mut checked = 0;
    for entry in std::fs::read_dir(fixtures()).expect("fixtures/") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let output = check(&path);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.starts_with("identical: "),
            "{}: {stdout}\n{}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} fixtures found");
}

#[test]
fn a_session_recorded_by_an_agent_the_binary_lacks_is_refused_naming_it() {
    let recorded = std::fs::read_to_string(fixtures().join("two-tools.jsonl")).expect("read");
    let renamed = recorded.replacen(r#""agent":"tool-desk""#, r#""agent":"my-agent""#, 1);
    assert_ne!(renamed, recorded, "the fixture names its agent");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mine.jsonl");
    std::fs::write(&file, renamed).expect("write");
    let output = check(&file);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(r#"recorded by agent "my-agent", which this binary does not have"#),
        "{stderr}"
    );
    assert!(
        stderr.contains("travel-desk, travel-research, tool-desk"),
        "{stderr}"
    );
}

#[test]
fn a_log_from_before_input_events_is_refused_naming_its_format() {
    let old = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/legacy/two-tools-before-input-events.jsonl");
    let output = check(&old);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("event format v1 before inputs were recorded as events")
            && stderr.contains("seq 3"),
        "{stderr}"
    );
}

#[test]
fn a_log_from_before_delivery_marks_replays_identically() {
    // The demo as it was recorded before deliveries of `on_chat_response` were marked: no
    // `chat_response_delivered`, no `response_owed` on any turn's end, seqs without gaps.
    let recorded = std::fs::read_to_string(demo_fixture()).expect("read fixture");
    let mut kept = 0u64;
    let mut older = String::new();
    for line in recorded.lines() {
        if line.contains(r#""type":"chat_response_delivered""#) {
            continue;
        }
        let mut env: serde_json::Value = serde_json::from_str(line).expect("json");
        kept += 1;
        env["seq"] = kept.into();
        if let Some(event) = env["event"].as_object_mut() {
            event.remove("response_owed");
        }
        older.push_str(&env.to_string());
        older.push('\n');
    }
    assert!(
        kept < recorded.lines().count() as u64,
        "the demo fixture marks its deliveries"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("before-delivery-marks.jsonl");
    std::fs::write(&file, older).expect("write");

    let output = check(&file);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.trim(), format!("identical: {kept} events"));
}
