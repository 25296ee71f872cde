//! E. Ending a turn, aborts and provider errors (E.24, E.25, E.27): every way to abort a turn,
//! in-band and failed-request errors, retries, and failures as events on the broadcast.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mull::core::{ErrorStage, Event, ModelError, ModelErrorKind, ToolPartState, UIPart};
use mull::engine::{ChatError, OutcomeStatus, Session, ToolSet, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use tokio_util::sync::CancellationToken;

use crate::harness::{calls_lookup_then_answers, new_env, render, slow_tool, slow_writer, user};
use crate::recording_agent::Rec;

async fn run_until_chunk_then(
    session: &Session,
    agent: &Arc<Rec>,
    act: impl FnOnce(&Session, &str),
) -> mull::engine::TurnOutcome {
    let mut stream = session
        .chat(user("u1", "write"), TurnOptions::default())
        .unwrap();
    let request_id = stream.request_id.clone();
    let _first = stream.next().await;
    while !agent.calls().iter().any(|c| c == "on_chunk(text-delta)") {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    act(session, &request_id);
    stream.finish().await.unwrap()
}

#[tokio::test]
async fn e24_cancel_chat_keeps_the_partial_and_skips_on_chat_error() {
    let model = slow_writer();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = run_until_chunk_then(&session, &agent, |s, id| {
        assert!(s.cancel_chat(id).unwrap());
    })
    .await;
    assert_eq!(out.status, OutcomeStatus::Aborted);
    assert_eq!(out.message.unwrap().plain_text(), "Once upon");
    assert!(!agent.calls().iter().any(|c| c.starts_with("on_chat_error")));
    assert!(agent
        .calls()
        .iter()
        .any(|c| c.starts_with("on_chat_response(aborted")));
    // Cancelling the finished turn is a no-op.
    assert!(!session.cancel_chat(&out.request_id).unwrap());
    // G.33: the next turn works normally.
    let next = session
        .save_messages(user("u2", "again"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(next.status, OutcomeStatus::Completed);
    insta::assert_snapshot!("e24_cancel_chat", env.step_trace(render).await);
}

#[tokio::test]
async fn e24_abort_all_aborts_the_running_turn() {
    let model = slow_writer();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = run_until_chunk_then(&session, &agent, |s, _| {
        assert_eq!(s.abort_all("shutting down").unwrap(), 1);
    })
    .await;
    assert_eq!(out.status, OutcomeStatus::Aborted);
    assert_eq!(session.abort_all("again").unwrap(), 0);
    let kinds = env.kinds().await;
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "cancellation_requested")
            .count(),
        1
    );
}

#[tokio::test]
async fn e24_a_pre_aborted_signal_still_persists_the_user_message() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("never"))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let signal = CancellationToken::new();
    signal.cancel();
    let out = session
        .save_messages(
            user("u1", "hi"),
            TurnOptions {
                signal: Some(signal),
                ..TurnOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Aborted);
    assert_eq!(session.state().messages.len(), 1);
    assert_eq!(model.requests().len(), 0);
    insta::assert_snapshot!("e24_pre_aborted", env.step_trace(render).await);
}

#[tokio::test]
async fn e25_in_band_provider_error_persists_the_partial_and_calls_on_chat_error() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.text("Partial answer")
                .error("overloaded_error: Overloaded")
                .text("ignored")
        })
        .build();
    let agent = Arc::new(Rec::new(&model).on_chat_error(|e, _| ChatError {
        message: format!("Something went wrong ({})", e.message),
        ..e
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    assert_eq!(
        out.error.unwrap().message,
        "Something went wrong (overloaded_error: Overloaded)"
    );
    assert_eq!(out.message.unwrap().plain_text(), "Partial answer");
    insta::assert_snapshot!("e25_in_band", env.step_trace(render).await);
    insta::assert_snapshot!("e25_hooks", agent.calls_folded());
}

#[tokio::test]
async fn e25_a_failed_request_is_a_stream_error_after_retries() {
    let mut busy = ModelError::new(ModelErrorKind::RateLimit, "429 Too Many Requests");
    busy.retry_after = Some(Duration::from_millis(5));
    let model = ScriptedModel::builder("scripted-1")
        .refuse(busy.clone())
        .refuse(busy.clone())
        .refuse(busy)
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    let error = out.error.unwrap();
    assert_eq!(error.stage, ErrorStage::Stream);
    assert_eq!(error.model_error.unwrap().kind, ModelErrorKind::RateLimit);
    assert_eq!(model.requests().len(), 3, "two retries, then the error");
    insta::assert_snapshot!("e25_failed_request", env.step_trace(render).await);
}

#[tokio::test]
async fn e25_retries_recover_a_transient_failure() {
    let model = ScriptedModel::builder("scripted-1")
        .refuse(ModelError::new(
            ModelErrorKind::Transient,
            "502 Bad Gateway",
        ))
        .step(|s| s.text("fine now"))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let trace = env.step_trace(render).await;
    assert!(
        trace.contains("model_retried 0 attempt=1 delay_ms=1 \"502 Bad Gateway\""),
        "{trace}"
    );
}

#[tokio::test]
async fn e24_after_tool_call_fires_for_a_call_an_abort_cut_off() {
    let model = calls_lookup_then_answers();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(slow_tool(None))));
    let env = new_env();
    let session = env.open(&agent).await;
    let stream = session
        .chat(user("u1", "look"), TurnOptions::default())
        .unwrap();
    let request_id = stream.request_id.clone();
    while !agent
        .calls()
        .iter()
        .any(|c| c.starts_with("before_tool_call"))
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The decision is committed before the tool runs; give it that moment, then cancel.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(session.cancel_chat(&request_id).unwrap());
    let out = tokio::time::timeout(Duration::from_secs(10), stream.finish())
        .await
        .expect("the abort ends the turn")
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Aborted);
    let calls = agent.calls();
    let after = calls
        .iter()
        .find(|c| c.starts_with("after_tool_call(lookup"))
        .unwrap_or_else(|| panic!("no after_tool_call: {calls:?}"));
    assert!(after.contains("success=false"), "{after}");
    assert!(after.contains(mull::engine::ABORTED_TOOL_CALL), "{after}");
    // The saved answer shows the call failed, so the next turn's model sees it did not run.
    let part = session.read_state(|s| {
        s.messages
            .iter()
            .flat_map(|m| &m.parts)
            .find_map(|p| match p {
                UIPart::Tool(t) if t.call_id == "c1" => Some(t.clone()),
                _ => None,
            })
    });
    let part = part.expect("the aborted turn keeps its call");
    assert_eq!(part.state, ToolPartState::OutputError);
    assert_eq!(
        part.error_text.as_deref(),
        Some(mull::engine::ABORTED_TOOL_CALL)
    );
}

#[tokio::test]
async fn e27_failures_are_events_and_broadcast() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.error("boom"))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let mut failures = session.failures();
    let mut all = session.subscribe();
    session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    let failure = failures.recv().await.unwrap();
    match failure.envelope.event {
        Event::TurnFailed {
            stage,
            messages_persisted,
            ..
        } => {
            assert_eq!(stage, ErrorStage::Stream);
            assert!(messages_persisted);
        }
        other => panic!("unexpected {other:?}"),
    }
    // The input comes first, then the messages it brought.
    let first = all.recv().await.unwrap();
    assert_eq!(first.kind(), "turn_requested");
    assert_eq!(all.recv().await.unwrap().kind(), "user_messages_saved");
}
