//! Think 0.24's bounded recovery: `classify_chat_error` answering `transient` or `rate_limit`
//! runs the turn again under the same request id after a backoff of at most 1 s doubling to 30 s,
//! jittered by a draw seeded from the request (on the session's clock, so these tests wait no
//! real time), at most `max_attempts` times, each attempt a `recovery_scheduled` event; then
//! `on_recovery_exhausted` and a terminal error.

use std::sync::Arc;
use std::time::Instant;

use mull::core::{ChatErrorClassification, Event, TurnStatus};
use mull::engine::{ChatRecovery, OutcomeStatus, TurnOptions};
use mull::providers::scripted::ScriptedModel;

use crate::harness::{new_env, user};
use crate::recording_agent::Rec;

fn recovering_agent(model: &ScriptedModel, max_attempts: u32) -> Rec {
    Rec::new(model)
        .configure(move |c| c.chat_recovery(ChatRecovery::new(max_attempts)))
        .classify(|e, _| {
            if e.message.contains("rate limit") {
                Some(ChatErrorClassification::RateLimit)
            } else if e.message.contains("overloaded") {
                Some(ChatErrorClassification::Transient)
            } else {
                None
            }
        })
}

/// The recoveries `schedule` must find: attempts 1… waiting what [`ChatRecovery::delay`] draws
/// for the session and request, each wait passed on the clock before the next attempt.
fn expected(
    events: &[mull::core::Envelope],
    request_id: &str,
    attempts: u32,
) -> Vec<(u32, u64, i64)> {
    let key = format!("{}/{request_id}", events[0].session_id);
    (1..=attempts)
        .map(|attempt| {
            let ms = ChatRecovery::new(attempts)
                .delay(attempt - 1, &key)
                .as_millis();
            let ms = u64::try_from(ms).expect("a wait in milliseconds");
            (
                attempt,
                ms,
                i64::try_from(ms).expect("a wait in milliseconds"),
            )
        })
        .collect()
}

/// (attempt, delay_ms, at) of every `recovery_scheduled` event, and the stamp of the
/// `turn_started` after each.
fn schedule(events: &[mull::core::Envelope]) -> Vec<(u32, u64, i64)> {
    events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.event {
            Event::RecoveryScheduled {
                attempt, delay_ms, ..
            } => {
                let next = events[i..]
                    .iter()
                    .find(|n| matches!(n.event, Event::TurnStarted { .. }))?;
                Some((*attempt, *delay_ms, (next.at - e.at).num_milliseconds()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn transient_errors_are_recovered_with_backoff_under_the_same_request_id() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("part").error("the server is overloaded"))
        .step(|s| s.error("the server is overloaded"))
        .step(|s| s.text("Answered on the third attempt."))
        .build();
    let agent = Arc::new(recovering_agent(&model, 3));
    let env = new_env();
    let session = env.open(&agent).await;
    let wall = Instant::now();
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert!(
        wall.elapsed().as_secs() < 3,
        "the backoff passed on the session's clock, not in real time"
    );
    assert_eq!(out.status, OutcomeStatus::Completed, "{:?}", out.error);
    let events = env.events().await;
    // Each recovery is an event, waits its backoff (at most 1 s, then at most 2 s, each at
    // least half of that) on the clock, and the next attempt runs under the same request id.
    let waits = schedule(&events);
    assert_eq!(waits, expected(&events, &out.request_id, 2));
    assert!((500..=1000).contains(&waits[0].1) && (1000..=2000).contains(&waits[1].1));
    let attempts: Vec<(String, u32)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnStarted {
                request_id,
                attempt,
                ..
            } => Some((request_id.clone(), *attempt)),
            _ => None,
        })
        .collect();
    assert_eq!(
        attempts,
        [
            (out.request_id.clone(), 0),
            (out.request_id.clone(), 1),
            (out.request_id.clone(), 2)
        ]
    );
    // The failed attempts' partials were discarded: one assistant message, the last answer.
    let saved: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::AssistantMessageSaved { message, .. } => Some(message.plain_text()),
            _ => None,
        })
        .collect();
    assert_eq!(saved, ["Answered on the third attempt."]);
    assert!(!events
        .iter()
        .any(|e| matches!(e.event, Event::TurnFailed { .. })));
    let calls = agent.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("classify_chat_error"))
            .count(),
        2
    );
    assert!(!calls.iter().any(|c| c.starts_with("on_recovery_exhausted")));
    assert!(!calls.iter().any(|c| c.starts_with("on_chat_error")));
}

#[tokio::test]
async fn rate_limits_past_the_bound_end_in_a_terminal_error_and_on_recovery_exhausted() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.error("rate limit exceeded"))
        .step(|s| s.error("rate limit exceeded"))
        .step(|s| s.error("rate limit exceeded"))
        .step(|s| s.text("never reached"))
        .build();
    let agent = Arc::new(recovering_agent(&model, 2));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    let error = out.error.expect("a terminal error");
    assert_eq!(
        error.classification,
        Some(ChatErrorClassification::RateLimit)
    );
    assert!(
        error
            .message
            .contains("gave up after 2 recovery attempts: rate limit exceeded"),
        "{}",
        error.message
    );
    let events = env.events().await;
    assert_eq!(schedule(&events), expected(&events, &out.request_id, 2));
    let failed: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnFailed { classification, .. } => Some(*classification),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [Some(ChatErrorClassification::RateLimit)]);
    let ends: Vec<TurnStatus> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnFinished { status, .. } => Some(*status),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [TurnStatus::Error; 3], "three attempts, each ended");
    let calls = agent.calls();
    let exhausted = calls
        .iter()
        .position(|c| {
            c == "on_recovery_exhausted(attempts=2, classification=RateLimit, error=\"rate limit exceeded\")"
        })
        .unwrap_or_else(|| panic!("{calls:#?}"));
    let chat_error = calls
        .iter()
        .position(|c| {
            c.starts_with("on_chat_error(Stream") && c.contains("classification=Some(RateLimit)")
        })
        .unwrap_or_else(|| panic!("{calls:#?}"));
    let response = calls
        .iter()
        .position(|c| c.starts_with("on_chat_response(error"))
        .unwrap_or_else(|| panic!("{calls:#?}"));
    assert!(
        exhausted < chat_error && chat_error < response,
        "{calls:#?}"
    );
}

#[tokio::test]
async fn recovery_is_off_by_default_and_other_classifications_end_the_turn() {
    // Off: a transient error ends the turn at once.
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.error("the server is overloaded"))
        .build();
    let agent =
        Arc::new(Rec::new(&model).classify(|_, _| Some(ChatErrorClassification::Transient)));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    assert!(!env
        .events()
        .await
        .iter()
        .any(|e| matches!(e.event, Event::RecoveryScheduled { .. })));
    assert!(
        !agent
            .calls()
            .iter()
            .any(|c| c.starts_with("classify_chat_error")),
        "with no recovery on, the classifier is not asked (the seed's rule)"
    );

    // On, but a fatal error is not recovered.
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.error("invalid api key"))
        .build();
    let agent = Arc::new(
        Rec::new(&model)
            .configure(|c| c.chat_recovery(ChatRecovery::new(3)))
            .classify(|_, _| Some(ChatErrorClassification::Fatal)),
    );
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    assert!(!env
        .events()
        .await
        .iter()
        .any(|e| matches!(e.event, Event::RecoveryScheduled { .. })));
}
