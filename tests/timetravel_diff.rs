//! Diff of two runs: aligned by turn, step and tool call, the first divergence named exactly.

mod support;

use mull::store::diff::{diff_runs, read_run, Aspect, DiffError, DiffOptions, Run};
use support::demo_runs::DemoRuns;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stricter_policy_diverges_first_at_the_tool_decision_it_changes() {
    let runs = DemoRuns::new(&[("base", None), ("strict", Some("guides-only"))]).await;
    let reader = runs.reader();
    let a = read_run(&reader, "base", "base").unwrap();
    let b = read_run(&reader, "strict", "strict").unwrap();
    let diff = diff_runs(&a, &b, &DiffOptions::default()).unwrap();

    let first = diff.first_divergence.clone().expect("the runs diverge");
    assert_eq!(first.aspect, Aspect::Decision);
    assert_eq!(
        (first.turn, first.step, first.call, first.tool.as_deref()),
        (2, Some(0), Some(1), Some("weather"))
    );
    assert_eq!(
        (first.event.as_str(), first.field.as_str()),
        ("tool_decided", "action")
    );
    assert_eq!(
        (first.a.as_str(), first.b.as_str()),
        (Some("allow"), Some("block"))
    );
    // The seqs point at the two tool_decided events.
    let at = |session: &str, seq| {
        reader
            .session_events(session, seq - 1)
            .unwrap()
            .first()
            .map(|e| e.kind().to_owned())
    };
    assert_eq!(
        at("base", first.a_seq.unwrap()).as_deref(),
        Some("tool_decided")
    );
    assert_eq!(
        at("strict", first.b_seq.unwrap()).as_deref(),
        Some("tool_decided")
    );
    // Nothing before turn 2 differs (the policy also blocks turn 3's hotel search); the
    // deterministic clock makes timing comparable too.
    assert!(diff.differences.iter().all(|d| d.turn >= 2));
    assert!(diff.differences.iter().any(|d| d.turn == 3));
    insta::assert_snapshot!(diff.table());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_that_behave_alike_have_no_divergence() {
    let runs = DemoRuns::new(&[("one", None), ("two", Some("demo"))]).await;
    let reader = runs.reader();
    let a = read_run(&reader, "one", "one").unwrap();
    let b = read_run(&reader, "two", "two").unwrap();
    let diff = diff_runs(&a, &b, &DiffOptions::default()).unwrap();
    assert!(diff.is_same(), "{}", diff.table());
    assert!(diff.differences.is_empty(), "{}", diff.table());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_of_each_run_compares_on_its_own() {
    let runs = DemoRuns::new(&[("base", None), ("strict", Some("no-weather"))]).await;
    let reader = runs.reader();
    let a = read_run(&reader, "base", "base").unwrap();
    let b = read_run(&reader, "strict", "strict").unwrap();
    let (a1, b1) = (a.only_turn(1).unwrap(), b.only_turn(1).unwrap());
    assert!(diff_runs(&a1, &b1, &DiffOptions::default())
        .unwrap()
        .is_same());
    let (a2, b2) = (a.only_turn(2).unwrap(), b.only_turn(2).unwrap());
    let diff = diff_runs(&a2, &b2, &DiffOptions::default()).unwrap();
    let first = diff.first_divergence.unwrap();
    assert_eq!((first.turn, first.tool.as_deref()), (1, Some("weather")));
    let turns = reader.turns("base").unwrap().len();
    assert!(a.only_turn(turns).is_some());
    assert!(
        a.only_turn(turns + 1).is_none(),
        "the demo has {turns} turns"
    );
}

#[test]
fn runs_of_different_conversations_are_refused_naming_both() {
    let fixture = |name: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(name);
        let events: Vec<mull::core::Envelope> = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        Run::from_events(name, &events)
    };
    let (a, b) = (fixture("demo.jsonl"), fixture("tool-decisions.jsonl"));
    let err = diff_runs(&a, &b, &DiffOptions::default()).unwrap_err();
    assert!(matches!(err, DiffError::Unrelated { .. }));
    let message = err.to_string();
    assert!(
        message.contains("demo.jsonl") && message.contains("tool-decisions.jsonl"),
        "{message}"
    );
    assert!(message.contains("What's Lisbon like"), "{message}");
    let forced = DiffOptions {
        allow_unrelated: true,
        ..DiffOptions::default()
    };
    let diff = diff_runs(&a, &b, &forced).unwrap();
    assert_eq!(diff.first_divergence.unwrap().field, "user_text");
}
