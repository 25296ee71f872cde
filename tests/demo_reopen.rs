//! The demo agent's script follows the conversation: a session reopened with a fresh agent —
//! another process, or `mull serve` after it evicted an idle chat — carries on with the turn
//! its conversation has reached instead of starting the script over.

mod support;

use std::sync::Arc;

use mull::core::{Event, SequentialIds, UIMessage};
use mull::engine::{OutcomeStatus, Session, TurnOptions};
use support::test_log::TestLog;

async fn ask(log: &TestLog, ids: &Arc<SequentialIds>, id: &str, text: &str) -> OutcomeStatus {
    // A fresh agent and session for every turn, as after an eviction (the ids go on counting,
    // as random ids would never repeat).
    let options = log.options().with_ids(ids.clone());
    let session = Session::open(&log.log, mull::demo::agent(), options)
        .await
        .unwrap();
    let outcome = session
        .save_messages(vec![UIMessage::user(id, text)], TurnOptions::default())
        .await
        .unwrap();
    outcome.status
}

fn tools_called(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallStarted { tool, .. } => Some(tool.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_reopened_demo_session_continues_its_script() {
    let log = TestLog::new();
    let ids = Arc::new(SequentialIds::new());
    assert_eq!(
        ask(&log, &ids, "u_1", "What's Lisbon like, in one breath?").await,
        OutcomeStatus::Completed
    );
    let first = log.bare_events().await;
    assert!(tools_called(&first).is_empty());

    assert_eq!(
        ask(&log, &ids, "u_2", "Weather, and a walk from the guides?").await,
        OutcomeStatus::Completed
    );
    let second = log.bare_events().await;
    assert_eq!(
        tools_called(&second[first.len()..]),
        ["weather", "search_guides"],
        "the second turn plays the script's second turn, not its first"
    );

    assert_eq!(
        ask(&log, &ids, "u_3", "Somewhere to stay near Alfama?").await,
        OutcomeStatus::Completed
    );
    let third = log.bare_events().await;
    assert_eq!(tools_called(&third[second.len()..]), ["find_hotels"]);

    assert_eq!(
        ask(&log, &ids, "u_4", "Actually, cancel my booking LIS-2291.").await,
        OutcomeStatus::Completed
    );
    let fourth = log.bare_events().await;
    assert_eq!(tools_called(&fourth[third.len()..]), ["cancel_booking"]);
    let answers: Vec<String> = log
        .replayed()
        .await
        .messages
        .iter()
        .filter(|m| m.role == mull::core::Role::Assistant)
        .map(|m| m.plain_text())
        .collect();
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert!(
        answers[3].starts_with("I can't cancel bookings myself."),
        "{answers:?}"
    );
}
