//! Backtest: recorded sessions re-run against new hook code with the model's output and the
//! tools' results served from the log; every decision that would change reported, and where a
//! recording stops being usable, nothing after it.

mod support;

use std::collections::BTreeSet;

use mull::core::{DecisionAction, Event};
use mull::policy::ToolPolicy;
use mull::replay::{BacktestError, StopKind};
use mull::store::{ForkPoint, Log, LogReader, TurnRef};
use support::demo_runs::DemoRuns;

/// The demo agent's own block reason (its policy on cancel_booking).
const DEMO_CANCEL_REASON: &str =
    "Cancelling bookings needs a human: ask the user to confirm in the app.";

/// What the demo agent under `no-weather` decides about a call to `tool`, written out here
/// rather than asked of the code under test: (action, reason).
fn no_weather(tool: &str) -> (DecisionAction, Option<String>) {
    match tool {
        "cancel_booking" => (DecisionAction::Block, Some(DEMO_CANCEL_REASON.to_owned())),
        "weather" => (
            DecisionAction::Block,
            Some("policy no-weather: weather may not run".to_owned()),
        ),
        _ => (DecisionAction::Allow, None),
    }
}

/// A recorded call whose decision the new rule changes: (session, turn from 1, call id,
/// recorded action).
type Expected = (String, usize, String, DecisionAction);

/// From the raw log: per session, the first recorded tool decision the rule changes (after it
/// the recording is unusable, so it is the only one a backtest may report).
fn first_changes(reader: &LogReader) -> Vec<Expected> {
    let mut out = Vec::new();
    for session in reader.sessions().unwrap() {
        let mut turn = 0;
        for envelope in reader.session_events(&session.session_id, 0).unwrap() {
            match &envelope.event {
                Event::TurnStarted { .. } => turn += 1,
                Event::ToolDecided {
                    call_id,
                    tool,
                    action,
                    reason,
                    ..
                } if no_weather(tool) != (*action, reason.clone()) => {
                    out.push((session.session_id.clone(), turn, call_id.clone(), *action));
                    break;
                }
                _ => {}
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backtest_finds_exactly_the_blocks_a_new_guard_adds_on_a_generated_log() {
    let runs = DemoRuns::generated(16).await;
    let reader = runs.reader();
    let expected = first_changes(&reader);
    let added: BTreeSet<(String, usize, String)> = expected
        .iter()
        .filter(|(_, _, _, action)| action.executes())
        .map(|(s, t, c, _)| (s.clone(), *t, c.clone()))
        .collect();
    // The generated mix: plain sessions get a new block; sessions recorded under another
    // policy that blocked weather for another reason get a changed reason.
    assert_eq!(added.len(), 8, "{expected:?}");
    assert_eq!(expected.len(), 12, "{expected:?}");

    let agent = mull::demo::guarded_agent(ToolPolicy::builtin("no-weather").unwrap());
    let report = mull::replay::backtest(&reader, &[], agent).await.unwrap();

    let found: BTreeSet<(String, usize, String)> = report
        .changes()
        .filter(|c| {
            c.old.as_ref().is_some_and(|d| d.executes())
                && c.new.as_ref().is_some_and(|d| d.action == "block")
        })
        .map(|c| (c.session_id.clone(), c.turn, c.call_id.clone().unwrap()))
        .collect();
    assert_eq!(found, added);
    let all: Vec<(String, usize, String)> = report
        .changes()
        .map(|c| (c.session_id.clone(), c.turn, c.call_id.clone().unwrap()))
        .collect();
    let expected_all: Vec<(String, usize, String)> = expected
        .iter()
        .map(|(s, t, c, _)| (s.clone(), *t, c.clone()))
        .collect();
    assert_eq!(all, expected_all);

    let summary = &report.summary;
    assert_eq!(summary.sessions, 16);
    assert_eq!(summary.skipped, 0);
    assert_eq!(summary.decisions_changed, 12);
    assert_eq!(summary.per_tool["weather"].newly_blocked, 8);
    assert_eq!(summary.per_tool["weather"].other, 4);
    // Sessions recorded under no-weather already: re-executed to the end, nothing changed.
    assert_eq!(summary.same, 4);
    for session in &report.sessions {
        match &session.stop {
            None => assert!(session.is_same(), "{session:?}"),
            Some(stop) => {
                assert_eq!(stop.kind, StopKind::Unusable);
                assert_eq!(
                    (stop.turn, stop.tool.as_deref()),
                    (2, Some("weather")),
                    "{session:?}"
                );
            }
        }
    }
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["summary"]["decisions_changed"], 12);
    let table = report.table();
    assert!(table.contains("16 sessions"), "{table}");
    assert!(
        table.contains("allow → block (policy no-weather: weather may not run)"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_decision_the_model_never_saw_ends_the_report_there() {
    let runs = DemoRuns::new(&[("base", None)]).await;
    let before = exported(&runs.reader(), "base");
    let reader = runs.reader();
    // guides-only blocks turn 2's forecast and turn 3's hotel search: only the first can be
    // reported, since the recorded answer after it read a forecast the model would not get.
    let agent = mull::demo::guarded_agent(ToolPolicy::builtin("guides-only").unwrap());
    let report = mull::replay::backtest(&reader, &["base".to_owned()], agent)
        .await
        .unwrap();
    let session = &report.sessions[0];
    assert_eq!(session.changes.len(), 1, "{session:?}");
    let change = &session.changes[0];
    assert_eq!(
        (
            change.turn,
            change.step,
            change.call,
            change.tool.as_deref()
        ),
        (2, Some(0), Some(1), Some("weather"))
    );
    let old = change.old.as_ref().unwrap();
    let new = change.new.as_ref().unwrap();
    assert_eq!(
        (old.action.as_str(), old.reason.as_deref()),
        ("allow", None)
    );
    assert_eq!(
        (new.action.as_str(), new.reason.as_deref()),
        ("block", Some("policy guides-only: weather may not run"))
    );
    let stop = session.stop.as_ref().unwrap();
    assert_eq!(stop.kind, StopKind::Unusable);
    assert_eq!(stop.location(), "turn 2, step 0, call 1 (weather)");
    assert_eq!(stop.turn_id.as_deref(), Some("turn_2"));
    assert!(stop.reason.contains("never saw"), "{}", stop.reason);
    // Nothing after the stop: no turn-3 change, no ending invented from a failed replay.
    assert!(session.endings.is_empty(), "{session:?}");
    assert_eq!(report.summary.sessions_unusable, 1);
    assert_eq!(report.summary.per_tool.len(), 1);
    assert_eq!(
        exported(&runs.reader(), "base"),
        before,
        "the log is only read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sessions_are_named_and_a_fork_is_skipped_with_why() {
    let runs = DemoRuns::new(&[("base", None)]).await;
    let reader = runs.reader();
    let err = mull::replay::backtest(&reader, &["nope".to_owned()], mull::demo::agent())
        .await
        .unwrap_err();
    assert!(matches!(err, BacktestError::NoSession(_)), "{err}");
    assert_eq!(err.to_string(), "no session \"nope\" in the log");

    let log = Log::open(&runs.path).unwrap();
    let options = mull::engine::SessionOptions::new("forked")
        .with_clock(std::sync::Arc::new(
            mull::core::FixedClock::at_fixture_epoch(),
        ))
        .with_ids(std::sync::Arc::new(mull::core::RandomIds));
    let point = ForkPoint::BeforeTurn(TurnRef::Ordinal(2));
    let (session, _) =
        mull::engine::Session::fork(&log, mull::demo::agent(), "base", &point, options)
            .await
            .unwrap();
    drop(session);
    log.close().unwrap();
    let reader = runs.reader();
    let report = mull::replay::backtest(&reader, &[], mull::demo::agent())
        .await
        .unwrap();
    assert_eq!(report.summary.sessions, 2);
    assert_eq!(report.summary.same, 1, "the demo agent changes nothing");
    let forked = report
        .sessions
        .iter()
        .find(|s| s.session_id == "forked")
        .unwrap();
    assert!(
        forked
            .skipped
            .as_deref()
            .is_some_and(|why| why.contains("session_forked")),
        "{forked:?}"
    );
}

fn exported(reader: &LogReader, session: &str) -> Vec<u8> {
    let mut out = Vec::new();
    mull::store::export_jsonl(reader, Some(session), &mut out).unwrap();
    out
}
