//! B. Turn setup (B.1–B.5): tool merge order, the system prompt, repairing and truncating the
//! history, one `before_turn` per attempt, and an empty message list.

use std::sync::Arc;
use std::time::Duration;

use mull::core::{ErrorStage, StreamPart, ToolPartState, ToolSpec, UIMessage, UIPart};
use mull::engine::{OutcomeStatus, ToolSet, TurnConfig, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::harness::{lookup_then_answer, lookup_tool, new_env, ran, render, user};
use crate::recording_agent::Rec;

#[tokio::test]
async fn b01_tools_merge_in_order_and_turn_tools_win() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "lookup", json!({"q": "x"})))
        .step(|s| s.text("done"))
        .build();
    let agent_ran = ran();
    let turn_ran = ran();
    let turn_ran2 = turn_ran.clone();
    let agent = Arc::new(
        Rec::new(&model)
            .tools(ToolSet::new().with(lookup_tool(agent_ran.clone())))
            .before_turn(move |_| {
                Ok(Some(TurnConfig {
                    tools: Some(ToolSet::new().with(lookup_tool(turn_ran2.clone()))),
                    ..TurnConfig::default()
                }))
            }),
    );
    let env = new_env();
    let session = env.open(&agent).await;
    let client = ToolSpec {
        name: "ask_user".into(),
        description: "Asks the user.".into(),
        input_schema: json!({"type": "object"}).into(),
    };
    let caller = ToolSet::new().with_client(ToolSpec {
        name: "ask_user".into(),
        description: "Caller's version wins over the client's.".into(),
        input_schema: json!({"type": "object"}).into(),
    });
    let opts = TurnOptions {
        client_tools: vec![client],
        tools: caller,
        ..TurnOptions::default()
    };
    session.save_messages(user("u1", "go"), opts).await.unwrap();
    assert!(
        agent_ran.lock().unwrap().is_empty(),
        "the agent's lookup was replaced"
    );
    assert_eq!(
        turn_ran.lock().unwrap().len(),
        1,
        "TurnConfig.tools won the name clash"
    );
    let requests = model.requests();
    let names: Vec<_> = requests[0].tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["lookup", "ask_user"]);
    assert_eq!(
        requests[0].tools[1].description,
        "Caller's version wins over the client's."
    );
    insta::assert_snapshot!("b01_tools_merge", agent.calls_folded());
}

#[tokio::test]
async fn b02_system_prompt_and_turn_override() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("a"))
        .step(|s| s.text("b"))
        .build();
    let agent = Arc::new(Rec::new(&model).before_turn(|ctx| {
        Ok((ctx.body["mode"] == "override").then(|| TurnConfig {
            system: Some(format!("{} Editing main.rs.", ctx.system)),
            ..TurnConfig::default()
        }))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "one"), TurnOptions::default())
        .await
        .unwrap();
    session
        .save_messages(
            user("u2", "two"),
            TurnOptions::with_body(json!({"mode": "override"})),
        )
        .await
        .unwrap();
    let requests = model.requests();
    assert_eq!(requests[0].system.as_deref(), Some("You are terse."));
    assert_eq!(
        requests[1].system.as_deref(),
        Some("You are terse. Editing main.rs.")
    );
}

#[tokio::test]
async fn b03_interrupted_tool_calls_are_repaired_before_the_next_turn() {
    // The first turn is aborted while the model streams a tool call's input.
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.part(StreamPart::ToolInputStart {
                call_id: "c1".into(),
                tool_name: "lookup".into(),
            })
            .part(StreamPart::ToolInputDelta {
                call_id: "c1".into(),
                delta: "{\"q\":".into(),
            })
            .pause(Duration::from_secs(30))
        })
        .step(|s| s.text("Starting over."))
        .build();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(lookup_tool(ran()))));
    let env = new_env();
    let session = env.open(&agent).await;
    let signal = CancellationToken::new();
    let cancel = signal.clone();
    let agent_watch = agent.clone();
    let watcher = tokio::spawn(async move {
        while !agent_watch
            .calls()
            .iter()
            .any(|c| c.starts_with("on_chunk(tool-input-delta)"))
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        cancel.cancel();
    });
    let first = session
        .save_messages(
            user("u1", "look"),
            TurnOptions {
                signal: Some(signal),
                ..TurnOptions::default()
            },
        )
        .await
        .unwrap();
    watcher.await.unwrap();
    assert_eq!(first.status, OutcomeStatus::Aborted);
    session
        .save_messages(user("u2", "again"), TurnOptions::default())
        .await
        .unwrap();
    let state = session.state();
    let repaired = state.messages[1]
        .parts
        .iter()
        .find_map(|p| match p {
            UIPart::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(repaired.state, ToolPartState::OutputError);
    assert_eq!(
        repaired.error_text.as_deref(),
        Some("The tool call was interrupted before a result was recorded.")
    );
    insta::assert_snapshot!("b03_repair", env.step_trace(render).await);
}

#[tokio::test]
async fn b03_old_oversized_parts_are_truncated_last_four_whole() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("ok"))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let big = "x".repeat(20_000);
    let history: Vec<UIMessage> = (0..6)
        .map(|i| UIMessage::user(format!("u{i}"), big.clone()))
        .collect();
    session
        .save_messages(history, TurnOptions::default())
        .await
        .unwrap();
    let sent = &model.requests()[0].messages;
    assert_eq!(sent.len(), 6);
    assert!(sent[0].char_len() < 9_000 && sent[1].char_len() < 9_000);
    assert!(sent[2..].iter().all(|m| m.char_len() == 20_000));
}

#[tokio::test]
async fn b04_before_turn_runs_once_and_the_merged_config_is_one_event() {
    let model = lookup_then_answer();
    let agent = Arc::new(
        Rec::new(&model)
            .tools(ToolSet::new().with(lookup_tool(ran())))
            .before_turn(|_| {
                Ok(Some(TurnConfig {
                    max_steps: Some(4),
                    temperature: Some(0.2),
                    active_tools: Some(vec!["lookup".into()]),
                    ..TurnConfig::default()
                }))
            }),
    );
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "define mull"), TurnOptions::default())
        .await
        .unwrap();
    let calls = agent.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("before_turn"))
            .count(),
        1
    );
    let kinds = env.kinds().await;
    assert_eq!(kinds.iter().filter(|k| *k == "turn_configured").count(), 1);
    insta::assert_snapshot!("b04_trace", env.step_trace(render).await);
}

#[tokio::test]
async fn b05_empty_message_list_is_a_turn_error() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("never"))
        .build();
    let agent = Arc::new(Rec::new(&model).before_turn(|_| {
        Ok(Some(TurnConfig {
            messages: Some(Vec::new()),
            ..TurnConfig::default()
        }))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    assert_eq!(out.error.unwrap().stage, ErrorStage::Turn);
    assert_eq!(model.requests().len(), 0);
    insta::assert_snapshot!("b05_trace", env.step_trace(render).await);
    insta::assert_snapshot!("b05_hooks", agent.calls_folded());
}
