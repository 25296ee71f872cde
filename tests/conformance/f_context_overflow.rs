//! F. Context overflow (F.28, F.30): reactive recovery that compacts and re-runs, its terminal
//! cases, and the default classifier.

use std::sync::Arc;

use mull::core::{ChatErrorClassification, Role, UIMessage};
use mull::engine::{Compaction, OutcomeStatus, Session, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::harness::{new_env, render, user};
use crate::recording_agent::Rec;

fn overflow_agent(model: &ScriptedModel, reactive: bool, max_retries: u32, shorten: bool) -> Rec {
    Rec::new(model)
        .configure(move |c| {
            c.context_overflow(reactive, max_retries)
                .on_compaction(move |req| async move {
                    let replaced: Vec<String> = if shorten {
                        req.messages
                            .iter()
                            .take(req.messages.len().saturating_sub(1))
                            .map(|m| m.id.clone())
                            .collect()
                    } else {
                        Vec::new()
                    };
                    Ok(Compaction {
                        summary: (!replaced.is_empty()).then(|| {
                            UIMessage::text("summary_1", Role::System, "Earlier: greetings.")
                        }),
                        replaced_ids: replaced,
                        tokens_before: 210_000,
                        tokens_after: 1_000,
                    })
                })
        })
        .classify(|e, _| mull::core::default_context_overflow_classifier(e.as_error_input()))
}

async fn seed_history(session: &Session) {
    // Three earlier exchanges, saved without running the model (a pre-aborted signal).
    for i in 0..3 {
        let signal = CancellationToken::new();
        signal.cancel();
        session
            .save_messages(
                user(&format!("old{i}"), "hello again"),
                TurnOptions {
                    signal: Some(signal),
                    ..TurnOptions::default()
                },
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn f28_reactive_overflow_compacts_and_reruns_with_the_same_request_id() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.text("partial")
                .error("prompt is too long: 212345 tokens > 200000 maximum")
        })
        .step(|s| s.text("Answered after compaction."))
        .build();
    let agent = Arc::new(overflow_agent(&model, true, 1, true));
    let env = new_env();
    let session = env.open(&agent).await;
    seed_history(&session).await;
    let out = session
        .save_messages(user("u1", "and now?"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let texts: Vec<String> = session
        .state()
        .messages
        .iter()
        .map(UIMessage::plain_text)
        .collect();
    assert_eq!(
        texts,
        [
            "Earlier: greetings.",
            "and now?",
            "Answered after compaction."
        ]
    );
    let hooks = agent.calls();
    let before_turns: Vec<_> = hooks
        .iter()
        .filter(|c| c.starts_with("before_turn"))
        .collect();
    assert_eq!(before_turns.len(), 2, "before_turn fires again");
    insta::assert_snapshot!("f28_recovered", env.step_trace(render).await);
    insta::assert_snapshot!("f28_recovered_hooks", agent.calls_folded());
}

#[tokio::test]
async fn f28_overflow_that_compaction_cannot_shorten_is_terminal() {
    let model = ScriptedModel::builder("scripted-1")
        .refuse_context_overflow()
        .build();
    let agent = Arc::new(overflow_agent(&model, true, 1, false));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    let error = out.error.unwrap();
    assert_eq!(
        error.classification,
        Some(ChatErrorClassification::ContextOverflow)
    );
    let hooks = agent.calls();
    assert!(!hooks.iter().any(|c| c.starts_with("on_chat_response")));
    assert!(hooks
        .iter()
        .any(|c| c.contains("classification=Some(ContextOverflow)")));
    insta::assert_snapshot!("f28_not_shortened", env.step_trace(render).await);
}

#[tokio::test]
async fn f28_overflow_after_max_retries_is_terminal_and_reactive_off_skips_classify() {
    let model = ScriptedModel::builder("scripted-1")
        .refuse_context_overflow()
        .refuse_context_overflow()
        .build();
    let agent = Arc::new(overflow_agent(&model, true, 1, true));
    let env = new_env();
    let session = env.open(&agent).await;
    seed_history(&session).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(
        out.error.unwrap().classification,
        Some(ChatErrorClassification::ContextOverflow)
    );
    assert_eq!(model.requests().len(), 2, "one compact-and-retry round");
    insta::assert_snapshot!("f28_max_retries", env.step_trace(render).await);

    let model2 = ScriptedModel::builder("scripted-1")
        .refuse_context_overflow()
        .build();
    let agent2 = Arc::new(overflow_agent(&model2, false, 1, true));
    let env2 = new_env();
    let s2 = env2.open(&agent2).await;
    let out2 = s2
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out2.error.unwrap().classification, None);
    assert!(!agent2.calls().iter().any(|c| c.starts_with("classify")));
}

#[test]
fn f30_default_classifier_matches_overflow_and_nothing_else() {
    use mull::core::default_context_overflow_classifier as classify;
    assert!(classify("Prompt is too long").is_some());
    assert!(classify("This model's maximum context length is 8192 tokens").is_some());
    assert!(classify(&json!({"error": {"code": "context_length_exceeded"}})).is_some());
    assert!(classify("429 rate limit exceeded").is_none());
    assert!(classify("connection reset by peer").is_none());
}
