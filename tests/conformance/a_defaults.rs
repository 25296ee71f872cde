//! A. Defaults: what a turn does when nothing is configured (max_steps, send_reasoning, the stall
//! watchdog, overflow recovery), and `stop_when` adding to the step count.

use std::sync::{Arc, Mutex};

use mull::core::Event;
use mull::engine::{
    has_tool_call, FnTool, OutcomeStatus, ToolError, ToolSet, TurnConfig, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::{json, Value};

use crate::harness::{lookup_tool, new_env, ran, render, user, LookupInput};
use crate::recording_agent::Rec;

#[tokio::test]
async fn a01_defaults_max_steps_send_reasoning_stall_and_overflow() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("hi"))
        .build();
    let seen = Arc::new(Mutex::new(None));
    let seen2 = seen.clone();
    let agent = Arc::new(Rec::new(&model).configure(move |c| {
        *seen2.lock().unwrap() = Some(c.overflow());
        c
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "hello"), TurnOptions::default())
        .await
        .unwrap();
    let overflow = seen.lock().unwrap().unwrap();
    assert!(!overflow.reactive, "overflow recovery is off by default");
    assert_eq!(overflow.max_retries, 1);
    let configured = env
        .events()
        .await
        .into_iter()
        .find_map(|e| match e.event {
            Event::TurnConfigured { config } => Some(config),
            _ => None,
        })
        .unwrap();
    assert_eq!(configured.max_steps, 10);
    assert!(configured.send_reasoning);
    assert_eq!(configured.stall_timeout_ms, 0);
    assert_eq!(configured.stop_when, ["step_count_is(10)"]);
    assert!(configured.overrides.is_empty());
    insta::assert_snapshot!("a01_defaults", env.step_trace(render).await);
}

#[tokio::test]
async fn a02_stop_when_adds_to_step_count() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "lookup", json!({"q": "a"})))
        .step(|s| s.tool_call("c2", "final_answer", json!({"q": "b"})))
        .step(|s| s.text("never reached"))
        .build();
    let final_answer = FnTool::new("final_answer", "Ends.", |i: LookupInput, _| async move {
        Ok::<Value, ToolError>(json!(i.q))
    })
    .shared();
    let agent = Arc::new(
        Rec::new(&model)
            .tools(ToolSet::new().with(lookup_tool(ran())).with(final_answer))
            .before_turn(|_| {
                Ok(Some(TurnConfig {
                    stop_when: vec![has_tool_call("final_answer")],
                    ..TurnConfig::default()
                }))
            }),
    );
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "go"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(model.remaining_steps(), 1, "has_tool_call stopped the loop");
    // max_steps alone also stops it.
    let model2 = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "lookup", json!({"q": "a"})))
        .step(|s| s.tool_call("c2", "lookup", json!({"q": "b"})))
        .build();
    let agent2 = Arc::new(
        Rec::new(&model2)
            .tools(ToolSet::new().with(lookup_tool(ran())))
            .before_turn(|_| {
                Ok(Some(TurnConfig {
                    max_steps: Some(1),
                    ..TurnConfig::default()
                }))
            }),
    );
    let env2 = new_env();
    let s2 = env2.open(&agent2).await;
    s2.save_messages(user("u1", "go"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(
        model2.remaining_steps(),
        1,
        "step_count_is(1) stopped the loop"
    );
    insta::assert_snapshot!("a02_stop_when", env.step_trace(render).await);
}
