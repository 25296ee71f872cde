//! G. Entry paths and the turn lock (G.31–G.33): every entry path fires the same hooks, turns
//! queue in order, the next turn works after an error, and submissions are idempotent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mull::core::{DecisionAction, UIMessage};
use mull::engine::{EngineError, OutcomeStatus, Session, SubmitOptions, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;

use crate::harness::{new_env, render, user};
use crate::recording_agent::Rec;

#[tokio::test]
async fn g31_every_entry_path_records_itself_and_fires_the_same_hooks() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("via chat"))
        .step(|s| s.text("via save"))
        .step(|s| s.text("via submit"))
        .step(|s| s.text("via continue"))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    // continue_last_turn with no assistant message is skipped.
    let skipped = session
        .continue_last_turn(TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(skipped.status, OutcomeStatus::Skipped);
    assert_eq!(skipped.request_id, "");
    let chat = session
        .chat(user("u1", "a"), TurnOptions::default())
        .unwrap();
    chat.finish().await.unwrap();
    session
        .save_messages(user("u2", "b"), TurnOptions::default())
        .await
        .unwrap();
    let receipt = session
        .submit_messages(
            user("u3", "c"),
            SubmitOptions {
                idempotency_key: Some("k1".into()),
                body: json!({"via": "submit"}),
                ..SubmitOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(!receipt.duplicate);
    let dup = session
        .submit_messages(
            user("u3", "c"),
            SubmitOptions {
                idempotency_key: Some("k1".into()),
                ..SubmitOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.submission_id, receipt.submission_id);
    let result = session
        .wait_submission(&receipt.submission_id)
        .await
        .unwrap();
    assert_eq!(result.status, mull::core::SubmissionStatus::Completed);
    let cont = session
        .continue_last_turn(TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(cont.status, OutcomeStatus::Completed);
    insta::assert_snapshot!("g31_trace", env.step_trace(render).await);
    insta::assert_snapshot!("g31_hooks", agent.calls_folded());
}

#[tokio::test]
async fn g32_turns_queue_in_order_and_a_blocking_turn_from_a_hook_is_refused() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("one"))
        .step(|s| s.text("submitted from a hook"))
        .step(|s| s.text("two"))
        .step(|s| s.text("three"))
        .build();
    let holder: Arc<Mutex<Option<Session>>> = Arc::new(Mutex::new(None));
    let refusal = Arc::new(Mutex::new(None));
    let (h2, r2) = (holder.clone(), refusal.clone());
    let agent = Arc::new(Rec::new(&model).on_step_finish(move |ctx| {
        if ctx.record.text == "one" {
            let session = h2.lock().unwrap().clone().unwrap();
            // A blocking turn from inside the running turn is refused at once.
            let refused = futures::executor::block_on(
                session.save_messages(user("x", "nested"), TurnOptions::default()),
            );
            *r2.lock().unwrap() = Some(refused.map(|_| ()).unwrap_err().to_string());
            // A durable submission is accepted and queued.
            let receipt = futures::executor::block_on(
                session.submit_messages(user("s", "from hook"), SubmitOptions::default()),
            )?;
            assert!(!receipt.duplicate);
        }
        Ok(())
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    *holder.lock().unwrap() = Some(session.clone());
    let (a, b, c) = (session.clone(), session.clone(), session.clone());
    let t1 = tokio::spawn(async move {
        a.save_messages(user("u1", "1"), TurnOptions::default())
            .await
    });
    while !agent.calls().iter().any(|c| c.starts_with("before_turn")) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let t2 = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        b.save_messages(user("u2", "2"), TurnOptions::default())
            .await
    });
    let t3 = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(40)).await;
        c.save_messages(user("u3", "3"), TurnOptions::default())
            .await
    });
    for t in [t1, t2, t3] {
        assert_eq!(t.await.unwrap().unwrap().status, OutcomeStatus::Completed);
    }
    let refusal = refusal.lock().unwrap().clone().unwrap();
    assert!(
        refusal.contains("from inside a hook of running turn"),
        "{refusal}"
    );
    let texts: Vec<String> = session
        .state()
        .messages
        .iter()
        .map(UIMessage::plain_text)
        .collect();
    assert_eq!(
        texts,
        [
            "1",
            "one",
            "from hook",
            "submitted from a hook",
            "2",
            "two",
            "3",
            "three"
        ]
    );
}

#[tokio::test]
async fn g33_after_an_error_the_next_turn_works() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.error("boom"))
        .step(|s| s.text("recovered"))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let a = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(a.status, OutcomeStatus::Error);
    let b = session
        .save_messages(user("u2", "again"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(b.status, OutcomeStatus::Completed);
    assert_eq!(b.message.unwrap().plain_text(), "recovered");
}

#[tokio::test]
async fn submit_messages_is_idempotent_by_submission_id() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("once"))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let opts = SubmitOptions {
        submission_id: Some("client-42".into()),
        ..SubmitOptions::default()
    };
    let a = session
        .submit_messages(user("u1", "hi"), opts.clone())
        .await
        .unwrap();
    let b = session
        .submit_messages(user("u1", "hi"), opts)
        .await
        .unwrap();
    assert!(!a.duplicate && b.duplicate);
    session.wait_submission("client-42").await.unwrap();
    assert_eq!(model.requests().len(), 1);
    assert!(matches!(
        session.wait_submission("nope").await,
        Err(EngineError::UnknownSubmission { .. })
    ));
    let _ = DecisionAction::Allow;
}
