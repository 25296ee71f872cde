//! Spend caps: a turn held to tokens, a session to dollars, calls counted with their retries, a
//! sub-agent held to its parent's remainder, and a budget-stopped log replayed decision for
//! decision.

use std::sync::Arc;

use mull::core::{
    BudgetLimits, Envelope, ErrorStage, Event, ModelError, ModelErrorKind, UIMessage,
};
use mull::engine::{AgentTool, Budget, OutcomeStatus, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use mull::store::LogReader;
use support::budgets::{dear_prices, exceeded, looking_up, Capped, Exceeded};
use support::replay::{recording_of, reexecute_ok};
use support::test_log::TestLog;

mod support;

fn ask(id: &str, text: &str) -> Vec<UIMessage> {
    vec![UIMessage::user(id, text)]
}

/// The kinds of `events` from the first `step_configured` of step 2 on.
fn kinds_from(events: &[Envelope], kind: &str) -> Vec<String> {
    let start = events
        .iter()
        .position(|e| e.kind() == kind)
        .unwrap_or(events.len());
    events[start..]
        .iter()
        .map(|e| e.kind().to_owned())
        .collect()
}

/// Runs one turn of `agent` on a fresh log; the turn must end as an error at stage `budget`.
async fn stopped_run(log: &TestLog, agent: &Arc<Capped>) -> String {
    let session = log.open(agent).await;
    let outcome = session
        .save_messages(ask("u1", "Trams?"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(outcome.status, OutcomeStatus::Error, "{outcome:?}");
    let error = outcome.error.expect("a stopped turn reports its error");
    assert_eq!(error.stage, ErrorStage::Budget);
    error.message
}

fn token_capped() -> Arc<Capped> {
    // Each step spends 110 tokens; the turn may spend 150.
    let model = looking_up("scripted-lookups", 4, 100, 10);
    Arc::new(Capped::new(
        "capped",
        model,
        Some(Budget::new().turn_tokens(150)),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_stops_at_its_token_limit_before_the_next_model_call() {
    let log = TestLog::new();
    let agent = token_capped();
    let message = stopped_run(&log, &agent).await;
    assert_eq!(
        message,
        "budget exceeded: the turn's token budget is used up (220 tokens spent of 150 tokens); no further model call is made"
    );
    // Two calls were made (110 tokens, then 220 ≥ 150); the third was not.
    assert_eq!(agent.model.requests().len(), 2);
    let events = log.events().await;
    assert_eq!(
        exceeded(&events),
        [Exceeded {
            scope: "turn".into(),
            measure: "tokens".into(),
            limit: 150.0,
            spent: 220.0,
            remaining: BudgetLimits {
                tokens: Some(0),
                ..BudgetLimits::none()
            },
            call: "step".into(),
            step: Some(2),
        }]
    );
    // The check stands before step 2's `step_configured`: nothing is configured, nothing
    // called; the turn ends, then reports the failure at stage `budget`, and `on_chat_response`
    // ran.
    assert_eq!(
        kinds_from(&events, "budget_exceeded"),
        [
            "budget_exceeded",
            "assistant_message_saved",
            "turn_finished",
            "turn_failed",
            "chat_response_delivered"
        ]
    );
    let steps_configured = events
        .iter()
        .filter(|e| e.kind() == "step_configured")
        .count();
    assert_eq!(steps_configured, 2);
    let failed = events.iter().find_map(|e| match &e.event {
        Event::TurnFailed { stage, error, .. } => Some((*stage, error.clone())),
        _ => None,
    });
    assert_eq!(failed, Some((ErrorStage::Budget, message)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_dollar_limit_spans_turns_at_the_price_tables_prices() {
    let log = TestLog::new();
    // $1 per thousand tokens: each step costs $0.11; the session may spend $0.30.
    let model = looking_up("dear-model", 4, 100, 10);
    let budget = Budget::new()
        .session_dollars(0.30)
        .with_prices(dear_prices("dear-model"));
    let agent = Arc::new(Capped::new("capped", model, Some(budget)));
    let session = log.open(&agent).await;
    // Turn 1 makes three calls ($0.33) and is stopped before its fourth.
    let first = session
        .save_messages(ask("u1", "Trams?"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(first.status, OutcomeStatus::Error, "{first:?}");
    assert_eq!(
        agent.model.requests().len(),
        3,
        "$0.11, $0.22, $0.33 ≥ $0.30"
    );
    // The next turn is refused before its first call: the session's money is spent.
    let second = session
        .save_messages(ask("u2", "Buses?"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(second.status, OutcomeStatus::Error);
    assert_eq!(agent.model.requests().len(), 3);
    let events = log.events().await;
    let stops = exceeded(&events);
    assert_eq!(stops.len(), 2, "{stops:?}");
    for (stop, step) in stops.iter().zip([3, 0]) {
        assert_eq!(stop.scope, "session");
        assert_eq!(stop.measure, "dollars");
        assert!((stop.limit - 0.30).abs() < 1e-12);
        assert!((stop.spent - 0.33).abs() < 1e-9, "{stop:?}");
        assert_eq!(stop.remaining.dollars, Some(0.0));
        assert_eq!(stop.step, Some(step));
    }
    assert!(second
        .error
        .expect("the refused turn's error")
        .message
        .contains("the session's dollar budget is used up ($0.330000 spent of $0.300000)"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_limit_counts_retries_and_stops_before_the_retry_it_would_pass() {
    let log = TestLog::new().with_fast_retries();
    let overloaded = || ModelError::new(ModelErrorKind::Transient, "503 overloaded");
    let model = ScriptedModel::builder("scripted-flaky")
        .refuse(overloaded())
        .refuse(overloaded())
        .step(|s| s.text("Never sent.").usage(10, 10))
        .build();
    let agent = Arc::new(Capped::new(
        "capped",
        model,
        Some(Budget::new().turn_calls(2)),
    ));
    let message = stopped_run(&log, &agent).await;
    assert!(
        message.contains(
            "the turn's model-call budget is used up (2 model calls spent of 2 model calls)"
        ),
        "{message}"
    );
    // The first call and one retry were made; the second retry (a third call) was not.
    assert_eq!(agent.model.requests().len(), 2);
    let events = log.events().await;
    let retried = events
        .iter()
        .filter(|e| e.kind() == "model_retried")
        .count();
    assert_eq!(retried, 1);
    let stops = exceeded(&events);
    assert_eq!(stops.len(), 1);
    assert_eq!(
        (stops[0].measure.as_str(), stops[0].call.as_str()),
        ("calls", "retry")
    );
    assert_eq!((stops[0].limit, stops[0].spent), (2.0, 2.0));
    // The last failed call's error stays with the failure.
    let model_error = events.iter().find_map(|e| match &e.event {
        Event::TurnFailed { model_error, .. } => model_error.clone(),
        _ => None,
    });
    assert_eq!(
        model_error.map(|m| m.message),
        Some("503 overloaded".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_inherits_its_parents_remainder_and_its_spend_counts_in_the_parent() {
    let log = TestLog::new();
    // The child spends 200 tokens a step, and has no budget of its own.
    let child = Capped::new("researcher", looking_up("scripted-child", 3, 150, 50), None);
    let research = AgentTool::new("research", "Asks the researcher.", Arc::new(child)).shared();
    // The parent spends 110 tokens on a lookup, of a turn's 300, then asks: 190 are left for
    // the child. (The asking call's own usage is reported after its tool calls ran, so it is
    // not yet spent when the child starts.)
    let parent_model = ScriptedModel::builder("scripted-parent")
        .step(|s| {
            s.tool_call("call_lookup", "lookup", serde_json::json!({"word": "tram"}))
                .usage(100, 10)
        })
        .step(|s| {
            s.tool_call(
                "call_research",
                "research",
                serde_json::json!({"prompt": "Trams?"}),
            )
            .usage(100, 10)
        })
        .step(|s| s.text("Never sent.").usage(1, 1))
        .build();
    let parent = Arc::new(
        Capped::new("desk", parent_model, Some(Budget::new().turn_tokens(300))).with_tool(research),
    );
    let message = stopped_run(&log, &parent).await;
    // 110 + 110 of its own, and the child's 200.
    assert!(
        message.contains("(420 tokens spent of 300 tokens)"),
        "{message}"
    );
    assert_eq!(parent.model.requests().len(), 2);

    log.log.flush().await.unwrap();
    let reader = LogReader::open(&log.path).unwrap();
    let child_id = "s1.agent_1";
    let child_events = reader.session_events(child_id, 0).unwrap();
    let inherited = child_events.iter().find_map(|e| match &e.event {
        Event::SubagentLinked { budget, .. } => *budget,
        _ => None,
    });
    assert_eq!(
        inherited,
        Some(BudgetLimits {
            tokens: Some(190),
            ..BudgetLimits::none()
        })
    );
    // The child made one call (200 tokens ≥ 190) and was stopped before its second.
    let child_stops = exceeded(&child_events);
    assert_eq!(child_stops.len(), 1, "{child_stops:?}");
    assert_eq!(child_stops[0].scope, "inherited");
    assert_eq!((child_stops[0].limit, child_stops[0].spent), (190.0, 200.0));
    // Its spend came back to the parent once, and stopped the parent's next call.
    let parent_events = log.events().await;
    let spend = parent_events.iter().find_map(|e| match &e.event {
        Event::SubagentFinished { spend, .. } => *spend,
        _ => None,
    });
    let spend = spend.expect("the child's spend is reported");
    assert_eq!((spend.tokens, spend.calls), (200, 1));
    let parent_stops = exceeded(&parent_events);
    assert_eq!(parent_stops.len(), 1);
    assert_eq!(parent_stops[0].scope, "turn");
    assert_eq!(
        (parent_stops[0].limit, parent_stops[0].spent),
        (300.0, 420.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stopped_log_replays_to_the_same_decision_and_a_changed_budget_diverges_there() {
    let log = TestLog::new();
    stopped_run(&log, &token_capped()).await;
    log.log.flush().await.unwrap();
    let recording = recording_of(&log.path, &log.session_id);

    let report = reexecute_ok(&recording, token_capped()).await;
    if let Some(divergence) = &report.divergence {
        panic!("{divergence}");
    }
    assert_eq!(report.actual.len(), recording.envelopes().len());
    assert_eq!(exceeded(&report.actual), exceeded(recording.envelopes()));

    // The decision is taken again, not copied: a larger budget lets step 2 be configured
    // where the recording stopped.
    let looser = Arc::new(Capped::new(
        "capped",
        looking_up("scripted-lookups", 4, 100, 10),
        Some(Budget::new().turn_tokens(1_000)),
    ));
    let report = reexecute_ok(&recording, looser).await;
    let divergence = report.divergence.expect("a changed budget diverges");
    let stop = recording
        .envelopes()
        .iter()
        .position(|e| e.kind() == "budget_exceeded")
        .expect("the recording stopped");
    assert_eq!(divergence.index, stop, "{divergence}");
}
