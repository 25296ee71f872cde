//! Budget flags through the real binary: `mull chat`, `mull demo` and `mull serve` hold the
//! session to the limits they are given, a turn that reaches one ends with its budget error
//! (told to the user, a `budget_exceeded` in the log), and `mull stats` counts the stop.

use std::time::Duration;

use mull_core::{BudgetMeasure, BudgetScope, Event, TurnStatus};
use mull_store::LogReader;

mod support;

use support::nodes::{post_message, runtime, Node};
use support::{run_mull, texts};

/// Every `budget_exceeded` of the log's sessions: (scope, measure, limit, spent).
fn stops(db: &std::path::Path) -> Vec<(BudgetScope, BudgetMeasure, f64, f64)> {
    let reader = LogReader::open(db).expect("open log");
    let mut out = Vec::new();
    for session in reader.sessions().expect("sessions") {
        for env in reader
            .session_events(&session.session_id, 0)
            .expect("events")
        {
            if let Event::BudgetExceeded {
                scope,
                measure,
                limit,
                spent,
                ..
            } = env.event
            {
                out.push((scope, measure, limit, spent));
            }
        }
    }
    out
}

#[test]
fn chat_stops_a_turn_at_its_call_budget_and_stats_counts_the_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let db_arg = db.to_str().expect("utf-8 path");
    // The scripted travel desk answers the first question in one model call and the second
    // with a tool step, then a second call: one call a turn lets only the first finish.
    let output = run_mull(
        dir.path(),
        &[
            "chat",
            "--db",
            db_arg,
            "--model",
            "scripted-demo",
            "--budget-turn-calls",
            "1",
        ],
        &[],
        "What's Lisbon like?\nWeather, and a walk?\n",
    );
    let (stdout, stderr) = texts(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("Lisbon is a hilly, sunny city"),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "input line 2 (\"Weather, and a walk?\"): the turn failed: budget exceeded: the \
             turn's model-call budget is used up (1 model calls spent of 1 model calls)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("raise the --budget-"), "{stderr}");
    assert!(!stderr.contains("went past its script"), "{stderr}");
    assert_eq!(
        stops(&db),
        [(BudgetScope::Turn, BudgetMeasure::Calls, 1.0, 1.0)]
    );
    let reader = LogReader::open(&db).expect("open log");
    let session = &reader.sessions().expect("sessions")[0].session_id;
    let statuses: Vec<TurnStatus> = reader
        .turns(session)
        .expect("turns")
        .iter()
        .map(|t| t.status)
        .collect();
    assert_eq!(statuses, [TurnStatus::Completed, TurnStatus::Error]);

    let stats = run_mull(dir.path(), &["stats", db_arg], &[], "");
    let (stats_out, stats_err) = texts(&stats);
    assert!(stats.status.success(), "{stats_err}");
    assert!(
        stats_out
            .contains("budgets   1 stop at a limit, no further model call made: turn calls 1\n"),
        "{stats_out}"
    );
}

#[test]
fn a_log_without_budget_stops_has_no_budget_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("chat.db");
    let db_arg = db.to_str().expect("utf-8 path");
    let output = run_mull(
        dir.path(),
        &["chat", "--db", db_arg, "--model", "scripted-demo"],
        &[],
        "What's Lisbon like?\n",
    );
    assert!(output.status.success(), "{}", texts(&output).1);
    let (stats_out, _) = texts(&run_mull(dir.path(), &["stats", db_arg], &[], ""));
    assert!(stats_out.starts_with("sessions  1\n"), "{stats_out}");
    assert!(!stats_out.contains("budgets"), "{stats_out}");
}

#[test]
fn demo_stops_at_its_session_token_budget_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    let db_arg = db.to_str().expect("utf-8 path");
    // The scripted desk's calls spend 1247 tokens (cache reads included) by the second turn's
    // next call, past the 900 allowed: that call is refused and the demo stops there.
    let output = run_mull(
        dir.path(),
        &[
            "demo",
            "--headless",
            "--deterministic",
            "--db",
            db_arg,
            "--budget-session-tokens",
            "900",
        ],
        &[],
        "",
    );
    let (stdout, stderr) = texts(&output);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "demo turn req_2 ended as Error: budget exceeded: the session's token budget is used \
             up (1247 tokens spent of 900 tokens)"
        ),
        "{stderr}"
    );
    assert_eq!(
        stops(&db),
        [(BudgetScope::Session, BudgetMeasure::Tokens, 900.0, 1247.0)]
    );
}

#[test]
fn serve_holds_each_chat_to_the_session_budget_of_its_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("serve.db");
    let db_arg = db.to_str().expect("utf-8 path");
    let node = Node::start(
        db_arg,
        "budgets",
        dir.path(),
        &["--model", "scripted-demo", "--budget-session-calls", "1"],
    );
    let limit = Duration::from_secs(60);
    let rt = runtime();
    let (first, second, other) = rt.block_on(async {
        let first = post_message(&node.addr, "a", "m1", limit).await;
        let second = post_message(&node.addr, "a", "m2", limit).await;
        // Another chat is another session: its own budget, untouched.
        let other = post_message(&node.addr, "b", "m1", limit).await;
        (first, second, other)
    });
    assert!(first.finished_stream(), "{}", first.body);
    assert_eq!(first.told().error, None, "{}", first.body);
    assert!(other.finished_stream(), "{}", other.body);
    assert_eq!(other.told().error, None, "{}", other.body);
    let told = second.told();
    assert!(
        told.error.as_deref().is_some_and(|e| e.contains(
            "the session's model-call budget is used up (1 model calls spent of 1 model calls)"
        )),
        "{}",
        second.body
    );
    drop(node);
    assert_eq!(
        stops(&db),
        [(BudgetScope::Session, BudgetMeasure::Calls, 1.0, 1.0)]
    );
}
