//! E. Ending a turn, success (E.22–E.23): what is persisted and reported, and
//! `on_chat_response` running after the lock so whatever it starts queues like any caller.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mull::core::{Event, UIMessage};
use mull::engine::{OutcomeStatus, Session, SubmitOptions, ToolSet, TurnOptions};
use mull::providers::scripted::ScriptedModel;

use crate::harness::{lookup_then_answer, lookup_tool, new_env, ran, render, user};
use crate::recording_agent::Rec;

#[tokio::test]
async fn e22_success_persists_the_message_then_on_chat_response() {
    let model = lookup_then_answer();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(lookup_tool(ran()))));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "define mull"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(session.state().messages.len(), 2);
    assert!(agent
        .calls()
        .last()
        .unwrap()
        .starts_with("on_chat_response(completed, parts=5"));
    insta::assert_snapshot!("e22_trace", env.step_trace(render).await);
}

#[tokio::test]
async fn e22_an_empty_stream_persists_nothing_and_reports_no_parts() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.no_finish())
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert!(out.message.is_none());
    assert_eq!(session.state().messages.len(), 1);
    let calls = agent.calls();
    assert!(
        calls
            .last()
            .unwrap()
            .starts_with("on_chat_response(completed, parts=0"),
        "{calls:?}"
    );
}

#[tokio::test]
async fn e23_on_chat_response_runs_after_the_lock_so_a_queued_turn_goes_first() {
    let model = ScriptedModel::builder("scripted-1")
        // The first turn takes a moment, so the test can queue another behind it.
        .step(|s| s.pause(Duration::from_millis(300)).text("first"))
        .step(|s| s.text("second"))
        .step(|s| s.text("third"))
        .build();
    let holder: Arc<Mutex<Option<Session>>> = Arc::new(Mutex::new(None));
    let holder2 = holder.clone();
    let agent = Arc::new(Rec::new(&model).on_chat_response(move |result| {
        let holder = holder2.clone();
        Box::pin(async move {
            if result.message.plain_text() == "first" {
                let session = holder.lock().unwrap().clone().unwrap();
                let chained = session
                    .save_messages(user("u-chain", "Now summarize."), TurnOptions::default())
                    .await?;
                assert_eq!(chained.status, OutcomeStatus::Completed);
            }
            Ok(())
        })
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    *holder.lock().unwrap() = Some(session.clone());
    let s2 = session.clone();
    let first = tokio::spawn(async move {
        s2.save_messages(user("u1", "one"), TurnOptions::default())
            .await
    });
    // Wait until the first turn holds the lock, then queue another.
    while !agent.calls().iter().any(|c| c.starts_with("before_turn")) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let queued = session
        .save_messages(user("u2", "two"), TurnOptions::default())
        .await
        .unwrap();
    first.await.unwrap().unwrap();
    assert_eq!(queued.status, OutcomeStatus::Completed);
    // The lock was released before the hook ran: the turn queued while the first one ran
    // took it first, and the turn the hook started queued behind it.
    let texts: Vec<String> = session
        .state()
        .messages
        .iter()
        .map(UIMessage::plain_text)
        .collect();
    assert_eq!(
        texts,
        ["one", "first", "two", "second", "Now summarize.", "third"]
    );
    assert_turns_never_overlap(&env.bare_events().await);
    insta::assert_snapshot!("e23_hooks", agent.calls_folded());
}

/// Fails when two turns of the session are open at once in the log (a `turn_started` before
/// the previous one's `turn_finished`).
fn assert_turns_never_overlap(events: &[Event]) {
    let mut open: Option<&str> = None;
    for event in events {
        match event {
            Event::TurnStarted { request_id, .. } => {
                assert!(
                    open.is_none(),
                    "turn {request_id} started while {open:?} was still open"
                );
                open = Some(request_id);
            }
            Event::TurnFinished { .. } => open = None,
            _ => {}
        }
    }
    assert!(open.is_none(), "a turn was left open: {open:?}");
}

/// What an `on_chat_response` hook starts on its own session.
#[derive(Clone, Copy, Debug)]
enum FollowUp {
    /// `save_messages`, awaited inside the hook.
    Awaited,
    /// `save_messages` in a spawned task the hook awaits.
    SpawnedAwaited,
    /// `submit_messages`, then waiting for that submission.
    SubmitAndWait,
    /// `chat`, its stream read to the end inside the hook.
    ChatToEnd,
    /// `chat`, left running: the hook returns at once.
    ChatDetached,
}

/// Runs a first turn whose `on_chat_response` starts a follow-up turn as `follow_up` says,
/// while another turn is queued behind the first. Returns the session's messages as text, the
/// log's events, and the follow-up's outcome status.
async fn follow_up_from_on_chat_response(
    follow_up: FollowUp,
) -> (Vec<String>, Vec<Event>, OutcomeStatus) {
    let model = ScriptedModel::builder("scripted-1")
        // The first turn takes a moment, so the test can queue another behind it.
        .step(|s| {
            s.text_deltas(["first"])
                .pause(Duration::from_millis(300))
                .text_deltas([" answer"])
        })
        .step(|s| s.text_deltas(["second", " answer"]))
        .step(|s| s.text_deltas(["third", " answer"]))
        .build();
    let holder: Arc<Mutex<Option<Session>>> = Arc::new(Mutex::new(None));
    let follow_status: Arc<Mutex<Option<OutcomeStatus>>> = Arc::new(Mutex::new(None));
    let (holder2, status2) = (holder.clone(), follow_status.clone());
    let agent = Arc::new(Rec::new(&model).on_chat_response(move |result| {
        let (holder, status) = (holder2.clone(), status2.clone());
        Box::pin(async move {
            if result.message.plain_text() != "first answer" {
                return Ok(());
            }
            let session = holder.lock().unwrap().clone().unwrap();
            let message = user("u-follow", "follow up");
            let outcome = match follow_up {
                FollowUp::Awaited => Some(
                    session
                        .save_messages(message, TurnOptions::default())
                        .await?,
                ),
                FollowUp::SpawnedAwaited => Some(
                    tokio::spawn(async move {
                        session.save_messages(message, TurnOptions::default()).await
                    })
                    .await
                    .map_err(|e| e.to_string())??,
                ),
                FollowUp::SubmitAndWait => {
                    let receipt = session
                        .submit_messages(message, SubmitOptions::default())
                        .await?;
                    let done = session.wait_submission(&receipt.submission_id).await?;
                    assert_eq!(done.status, mull::core::SubmissionStatus::Completed);
                    None
                }
                FollowUp::ChatToEnd => Some(
                    session
                        .chat(message, TurnOptions::default())?
                        .finish()
                        .await?,
                ),
                FollowUp::ChatDetached => {
                    let stream = session.chat(message, TurnOptions::default())?;
                    let status = status.clone();
                    tokio::spawn(async move {
                        if let Ok(outcome) = stream.finish().await {
                            *status.lock().unwrap() = Some(outcome.status);
                        }
                    });
                    None
                }
            };
            if let Some(outcome) = outcome {
                *status.lock().unwrap() = Some(outcome.status);
            }
            Ok(())
        })
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    *holder.lock().unwrap() = Some(session.clone());
    let run = async {
        let s2 = session.clone();
        let first = tokio::spawn(async move {
            s2.save_messages(user("u1", "one"), TurnOptions::default())
                .await
        });
        while !agent.calls().iter().any(|c| c.starts_with("before_turn")) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let queued = session
            .save_messages(user("u2", "two"), TurnOptions::default())
            .await
            .unwrap();
        assert_eq!(queued.status, OutcomeStatus::Completed);
        first.await.unwrap().unwrap();
        // Every pattern's follow-up ends; wait for a detached one, too.
        while session.is_busy() || follow_status.lock().unwrap().is_none() {
            if matches!(follow_up, FollowUp::SubmitAndWait) && !session.is_busy() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .unwrap_or_else(|_| panic!("{follow_up:?}: the session deadlocked"));
    let texts = session
        .state()
        .messages
        .iter()
        .map(UIMessage::plain_text)
        .collect();
    let status = follow_status
        .lock()
        .unwrap()
        .unwrap_or(OutcomeStatus::Completed);
    (texts, env.bare_events().await, status)
}

#[tokio::test]
async fn e23_whatever_on_chat_response_starts_queues_like_any_caller() {
    for follow_up in [
        FollowUp::Awaited,
        FollowUp::SpawnedAwaited,
        FollowUp::SubmitAndWait,
        FollowUp::ChatToEnd,
        FollowUp::ChatDetached,
    ] {
        let (texts, events, status) = follow_up_from_on_chat_response(follow_up).await;
        assert_eq!(status, OutcomeStatus::Completed, "{follow_up:?}");
        assert_turns_never_overlap(&events);
        // Every answer is whole and follows its own user message; the turn queued while the
        // first one ran goes before the follow-up the hook started after the lock was free.
        assert_eq!(
            texts,
            [
                "one",
                "first answer",
                "two",
                "second answer",
                "follow up",
                "third answer"
            ],
            "{follow_up:?}"
        );
    }
}

/// One rule for on_chat_response on failures: a failed before_turn and a failed before_step
/// both end a started turn, and both report it once, with status error and the error text.
#[tokio::test]
async fn e22_on_chat_response_reports_a_failed_before_turn_like_a_failed_before_step() {
    let mut seen = Vec::new();
    for failing in ["before_turn", "before_step"] {
        let model = ScriptedModel::builder("scripted-1")
            .step(|s| s.text("never"))
            .build();
        let agent = Rec::new(&model);
        let agent = if failing == "before_turn" {
            agent.before_turn(|_| Err("quota service down".into()))
        } else {
            agent.before_step(|_| Err("quota service down".into()))
        };
        let agent = Arc::new(agent);
        let env = new_env();
        let session = env.open(&agent).await;
        let out = session
            .save_messages(user("u1", "hi"), TurnOptions::default())
            .await
            .unwrap();
        assert_eq!(out.status, OutcomeStatus::Error);
        let responses: Vec<String> = agent
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("on_chat_response"))
            .collect();
        assert_eq!(responses.len(), 1, "{failing}: {responses:?}");
        assert!(responses[0].contains("quota service down"), "{responses:?}");
        seen.push(
            responses[0]
                .split(", error")
                .next()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert_eq!(seen[0], seen[1]);
}
