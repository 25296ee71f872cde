//! E. Ending a turn, error stages (E.26): one test that provokes each stage — parse, persist,
//! turn, stream, recovery (with G.34's reopen) and transcript.

use std::sync::Arc;
use std::time::Duration;

use mull::core::{
    Clock, DecisionAction, ErrorStage, Event, FixedClock, Role, StreamPart, ToolPartState,
    UIMessage, UIPart,
};
use mull::engine::{
    OutcomeStatus, Session, SessionOptions, Timeout, ToolSet, TurnConfig, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use mull::store::{Log, LogReader};
use serde_json::{json, Value};

use crate::harness::{calls_lookup_then_answers, new_env, render, slow_tool, slow_writer, user};
use crate::recording_agent::Rec;
use crate::support;
use crate::support::trace;

#[tokio::test]
async fn e26_stage_parse_a_body_that_cannot_be_decoded() {
    let model = ScriptedModel::builder("scripted-1").build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages_json(r#"{"messages": "not a list"}"#, TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.error.unwrap().stage, ErrorStage::Parse);
    assert!(session.state().messages.is_empty(), "nothing persisted");
    // A decodable body runs normally, its other fields becoming the body.
    let model2 = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("ok"))
        .build();
    let agent2 = Arc::new(Rec::new(&model2));
    let env2 = new_env();
    let s2 = env2.open(&agent2).await;
    let ok = s2
        .save_messages_json(
            r#"{"messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}],"mode":"fast"}"#,
            TurnOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(ok.status, OutcomeStatus::Completed);
    assert!(env2
        .step_trace(render)
        .await
        .contains(r#"body={"mode":"fast"}"#));
    insta::assert_snapshot!("e26_parse", env.step_trace(render).await);
    insta::assert_snapshot!("e26_parse_hooks", agent.calls_folded());
}

#[tokio::test]
async fn e26_stage_persist_saving_the_messages_fails() {
    let model = ScriptedModel::builder("scripted-1").build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("  ", "no id"), TurnOptions::default())
        .await
        .unwrap();
    let error = out.error.unwrap();
    assert_eq!(error.stage, ErrorStage::Persist);
    assert!(error.message.contains("empty id"), "{}", error.message);
    insta::assert_snapshot!("e26_persist", env.step_trace(render).await);
}

#[tokio::test]
async fn e26_stage_turn_before_turn_fails_or_the_model_cannot_be_resolved() {
    for case in ["fails", "panics", "unknown_model"] {
        let model = ScriptedModel::builder("scripted-1").build();
        let agent = Arc::new(Rec::new(&model).before_turn(move |_| match case {
            "fails" => Err("quota service down".into()),
            "panics" => panic!("before_turn bug"),
            _ => Ok(Some(TurnConfig {
                model: Some(mull::engine::ModelChoice::Id("gpt-imaginary".into())),
                ..TurnConfig::default()
            })),
        }));
        let env = new_env();
        let session = env.open(&agent).await;
        let out = session
            .save_messages(user("u1", "hi"), TurnOptions::default())
            .await
            .unwrap();
        assert_eq!(out.error.unwrap().stage, ErrorStage::Turn, "{case}");
        // The same rule as a failed before_step: the turn started and ended, so
        // on_chat_response reports it (status error, no parts).
        let responses: Vec<String> = agent
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("on_chat_response"))
            .collect();
        assert_eq!(responses.len(), 1, "{case}");
        assert!(
            responses[0].starts_with("on_chat_response(error, parts=0"),
            "{case}: {responses:?}"
        );
        insta::assert_snapshot!(format!("e26_turn_{case}"), env.step_trace(render).await);
    }
}

#[tokio::test]
async fn e26_stage_stream_a_stalled_stream_and_a_turn_timeout() {
    // The stall watchdog.
    let model = slow_writer();
    let agent = Arc::new(Rec::new(&model).before_turn(|_| {
        Ok(Some(TurnConfig {
            chat_stream_stall_timeout_ms: Some(50),
            ..TurnConfig::default()
        }))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    let error = out.error.unwrap();
    assert_eq!(error.stage, ErrorStage::Stream);
    assert!(error.message.contains("stalled"), "{}", error.message);
    insta::assert_snapshot!("e26_stream_stall", env.step_trace(render).await);
    // The whole-turn timeout.
    let model2 = slow_writer();
    let agent2 = Arc::new(Rec::new(&model2).before_turn(|_| {
        Ok(Some(TurnConfig {
            timeout: Some(Timeout {
                total: Some(Duration::from_millis(50)),
                chunk: None,
            }),
            ..TurnConfig::default()
        }))
    }));
    let env2 = new_env();
    let s2 = env2.open(&agent2).await;
    let out2 = s2
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    let error2 = out2.error.unwrap();
    assert_eq!(error2.stage, ErrorStage::Stream);
    assert!(error2.message.contains("timed out"), "{}", error2.message);
    // A turn that timed out names its request, to the hook and in the log.
    assert_eq!(error2.request_id.as_deref(), Some(out2.request_id.as_str()));
    assert!(agent2
        .calls()
        .iter()
        .any(|c| c.starts_with("on_chat_error(Stream") && c.contains("request=true")));
    assert!(env2.bare_events().await.iter().any(|e| matches!(
        e,
        Event::TurnFailed { request_id: Some(id), .. } if *id == out2.request_id
    )));
    // An explicit 0 disables the watchdog an agent sets.
    let model3 = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("a").pause(Duration::from_millis(80)).text("b"))
        .build();
    let mut rec3 = Rec::new(&model3).before_turn(|_| {
        Ok(Some(TurnConfig {
            chat_stream_stall_timeout_ms: Some(0),
            ..TurnConfig::default()
        }))
    });
    rec3.stall_ms = 20;
    let agent3 = Arc::new(rec3);
    let env3 = new_env();
    let s3 = env3.open(&agent3).await;
    let out3 = s3
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out3.status, OutcomeStatus::Completed);
}

#[tokio::test]
async fn e26_a_streaming_tool_cut_off_after_progress_is_interrupted_not_a_success() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mull.db");
    // A previous process: a streaming tool was decided and had sent a progress value when the
    // process died.
    {
        let log = Log::open(&path).unwrap();
        let at = FixedClock::at_fixture_epoch().now();
        let append = |turn: Option<&str>, event: Event| {
            log.append("s1", turn, at, event).unwrap();
        };
        let chunk = |part: StreamPart| Event::Chunk {
            step: 0,
            part,
            original: None,
        };
        append(
            None,
            Event::SessionOpened {
                agent: "rec".into(),
                metadata: Value::Null,
            },
        );
        append(
            None,
            Event::UserMessagesSaved {
                request_id: Some("req_old".into()),
                messages: user("u1", "count to ten"),
            },
        );
        let turn = Some("turn_old");
        append(
            turn,
            Event::TurnStarted {
                request_id: "req_old".into(),
                message_id: "msg_old".into(),
                entry: mull::core::EntryPath::SaveMessages,
                continuation: false,
                attempt: 0,
                body: Value::Null,
            },
        );
        append(turn, Event::StepStarted { step: 0 });
        append(
            turn,
            chunk(StreamPart::ToolCall {
                call_id: "c1".into(),
                tool_name: "count".into(),
                input: "{}".into(),
            }),
        );
        append(
            turn,
            Event::ToolDecided {
                step: 0,
                call_id: "c1".into(),
                tool: "count".into(),
                action: DecisionAction::Allow,
                model_input: json!({}),
                effective_input: json!({}),
                reason: None,
                output: None,
            },
        );
        append(
            turn,
            chunk(StreamPart::ToolResult {
                call_id: "c1".into(),
                tool_name: "count".into(),
                output: json!({"progress": 5}),
                preliminary: true,
            }),
        );
        log.flush_blocking().unwrap();
    }
    let log = Log::open(&path).unwrap();
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Counting was cut off."))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let options = SessionOptions::deterministic("s1");
    let session = Session::open(&log, agent.clone(), options).await.unwrap();
    // The recovered message keeps the call, as an interrupted one: the progress value is gone.
    let part = session.read_state(|s| {
        s.messages
            .iter()
            .flat_map(|m| &m.parts)
            .find_map(|p| match p {
                UIPart::Tool(t) if t.call_id == "c1" => Some(t.clone()),
                _ => None,
            })
            .unwrap()
    });
    assert_eq!(part.state, ToolPartState::OutputError);
    assert_eq!(part.output, None);
    assert!(!part.preliminary);
    assert_eq!(
        part.error_text.as_deref(),
        Some(mull::engine::INTERRUPTED_TOOL_CALL)
    );
    // The repair is an event of the recovered turn, written before anything else runs.
    log.flush().await.unwrap();
    let reader = LogReader::open(&path).unwrap();
    let kinds: Vec<String> = reader
        .session_page("s1", 0, 1000)
        .unwrap()
        .iter()
        .map(|e| e.event.kind().to_owned())
        .collect();
    let repaired = kinds.iter().position(|k| k == "tool_call_repaired");
    let finished = kinds.iter().rposition(|k| k == "turn_finished");
    assert!(
        matches!((repaired, finished), (Some(r), Some(f)) if r < f),
        "{kinds:?}"
    );
    // The next turn tells the model the call was interrupted, never the progress as its answer.
    session
        .save_messages(user("u2", "and?"), TurnOptions::default())
        .await
        .unwrap();
    let request = model.requests().pop().unwrap();
    let result = request
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|c| match c {
            mull::core::ModelContent::ToolResult {
                call_id,
                output,
                is_error,
                ..
            } if call_id == "c1" => Some((output.clone(), *is_error)),
            _ => None,
        })
        .unwrap();
    assert!(
        result.1,
        "the model sees an error, not a success: {result:?}"
    );
    assert!(!result.0.to_string().contains("progress"), "{result:?}");
}

#[tokio::test]
async fn e26_stage_stream_a_silent_tool_trips_the_stall_watchdog_unless_the_turn_raises_it() {
    // The watchdog counts a running tool's silence like the model's.
    let model = calls_lookup_then_answers();
    let mut rec = Rec::new(&model).tools(ToolSet::new().with(slow_tool(None)));
    rec.stall_ms = 50;
    let agent = Arc::new(rec);
    let env = new_env();
    let session = env.open(&agent).await;
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        session.save_messages(user("u1", "look"), TurnOptions::default()),
    )
    .await
    .expect("the watchdog ends the turn")
    .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    let error = out.error.unwrap();
    assert_eq!(error.stage, ErrorStage::Stream);
    assert!(
        error.message.contains("silent for 50 ms"),
        "{}",
        error.message
    );
    assert_eq!(error.request_id.as_deref(), Some(out.request_id.as_str()));
    let calls = agent.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("after_tool_call(lookup") && c.contains("success=false")),
        "{calls:?}"
    );
    let finished = support::events::first_tool_finish(&env.bare_events().await);
    assert!(
        matches!(&finished, Some((false, e)) if e.contains("silent")),
        "{finished:?}"
    );
    // A turn that needs the slow tool raises the timeout for itself, as the seed describes.
    let model2 = calls_lookup_then_answers();
    let mut rec2 = Rec::new(&model2)
        .tools(ToolSet::new().with(slow_tool(Some(Duration::from_millis(150)))))
        .before_turn(|_| {
            Ok(Some(TurnConfig {
                chat_stream_stall_timeout_ms: Some(5_000),
                ..TurnConfig::default()
            }))
        });
    rec2.stall_ms = 50;
    let env2 = new_env();
    let s2 = env2.open(&Arc::new(rec2)).await;
    let out2 = s2
        .save_messages(user("u1", "look"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out2.status, OutcomeStatus::Completed);
}

#[tokio::test]
async fn e26_stage_recovery_and_g34_reopen_resolves_unfinished_submissions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mull.db");
    // A previous process: one submission applied with a partial turn, one only accepted.
    {
        let log = Log::open(&path).unwrap();
        let clock = FixedClock::at_fixture_epoch();
        let at = clock.now();
        let append = |turn: Option<&str>, event: Event| {
            log.append("s1", turn, at, event).unwrap();
        };
        append(
            None,
            Event::SessionOpened {
                agent: "rec".into(),
                metadata: Value::Null,
            },
        );
        append(
            None,
            Event::SubmissionAccepted {
                submission_id: "sub_a".into(),
                idempotency_key: None,
                messages: user("u1", "first"),
                body: json!({"n": 1}),
            },
        );
        append(
            None,
            Event::SubmissionAccepted {
                submission_id: "sub_b".into(),
                idempotency_key: Some("key-b".into()),
                messages: user("u2", "second"),
                body: json!({"n": 2}),
            },
        );
        append(
            None,
            Event::UserMessagesSaved {
                request_id: Some("req_old".into()),
                messages: user("u1", "first"),
            },
        );
        append(
            None,
            Event::SubmissionApplied {
                submission_id: "sub_a".into(),
                request_id: "req_old".into(),
            },
        );
        append(
            Some("turn_old"),
            Event::TurnStarted {
                request_id: "req_old".into(),
                message_id: "msg_old".into(),
                entry: mull::core::EntryPath::SubmitMessages,
                continuation: false,
                attempt: 0,
                body: json!({"n": 1}),
            },
        );
        append(Some("turn_old"), Event::StepStarted { step: 0 });
        for part in [
            StreamPart::TextStart { id: "t".into() },
            StreamPart::TextDelta {
                id: "t".into(),
                text: "Half an ans".into(),
            },
        ] {
            append(
                Some("turn_old"),
                Event::Chunk {
                    step: 0,
                    part,
                    original: None,
                },
            );
        }
        log.flush_blocking().unwrap();
    }
    let log = Log::open(&path).unwrap();
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Second answered."))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let options =
        SessionOptions::deterministic("s1").with_retry_base_delay(Duration::from_millis(1));
    let session = Session::open(&log, agent.clone(), options).await.unwrap();
    let b = session.wait_submission("sub_b").await.unwrap();
    assert_eq!(b.status, mull::core::SubmissionStatus::Completed);
    let a = session.wait_submission("sub_a").await.unwrap();
    assert_eq!(a.status, mull::core::SubmissionStatus::Error);
    let state = session.state();
    let texts: Vec<String> = state.messages.iter().map(UIMessage::plain_text).collect();
    assert_eq!(
        texts,
        ["first", "Half an ans", "second", "Second answered."]
    );
    // The interrupted turn was resolved when the log opened, before any session did: the log
    // says so (turn_failed at stage recovery), and no agent's on_chat_error saw it.
    let recovered = log.recovered_at_open();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(
        (recovered[0].request_id.as_str(), recovered[0].kept_partial),
        ("req_old", true)
    );
    assert!(!agent
        .calls()
        .iter()
        .any(|c| c.starts_with("on_chat_error(Recovery")));
    // Nothing ran twice: only sub_b reached the model.
    assert_eq!(model.requests().len(), 1);
    log.flush().await.unwrap();
    let reader = LogReader::open(&path).unwrap();
    let trace = trace::render_steps(&reader.session_page("s1", 0, 1000).unwrap(), 0, render);
    insta::assert_snapshot!("e26_recovery_g34", trace);
}

#[tokio::test]
async fn e26_stage_transcript_a_history_that_cannot_be_repaired() {
    let model = ScriptedModel::builder("scripted-1").build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let tool_part = |state| {
        UIPart::Tool(mull::core::ToolPart {
            call_id: "dup".into(),
            tool_name: "lookup".into(),
            state,
            input: json!({}),
            output: Some(json!("x")),
            error_text: None,
            preliminary: false,
        })
    };
    let history = vec![
        UIMessage::user("u1", "hi"),
        UIMessage {
            id: "a1".into(),
            role: Role::Assistant,
            metadata: None,
            parts: vec![tool_part(ToolPartState::OutputAvailable)],
        },
        UIMessage {
            id: "a2".into(),
            role: Role::Assistant,
            metadata: None,
            parts: vec![tool_part(ToolPartState::OutputAvailable)],
        },
    ];
    let out = session
        .save_messages(history, TurnOptions::default())
        .await
        .unwrap();
    let error = out.error.unwrap();
    assert_eq!(error.stage, ErrorStage::Transcript);
    insta::assert_snapshot!("e26_transcript", env.step_trace(render).await);
}
