//! D. Tool calls (D.11–D.21): validation, durable decisions, allow / block / substitute,
//! failures, streaming tools, durations from the injected clock, client tools and the step number.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use mull::core::{Event, StreamPart, ToolPartState, ToolSpec, UIPart};
use mull::engine::{
    ClientToolOutcome, FnTool, HookResult, OutcomeStatus, ToolCallContext, ToolCallDecision,
    ToolError, ToolSet, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use mull::store::LogReader;
use serde_json::{json, Value};

use crate::harness::{
    lookup_then_answer, lookup_tool, new_env, ran, render, tool_result_sent, user, LookupInput,
};
use crate::recording_agent::Rec;
use crate::support::test_log::TestLog as Env;

async fn run_tool_scenario(
    decide: impl Fn(&ToolCallContext) -> HookResult<Option<ToolCallDecision>>
        + Send
        + std::marker::Sync
        + 'static,
) -> (Env, Arc<Rec>, Arc<Mutex<Vec<Value>>>, ScriptedModel) {
    let model = lookup_then_answer();
    let ran = ran();
    let agent = Arc::new(
        Rec::new(&model)
            .tools(ToolSet::new().with(lookup_tool(ran.clone())))
            .before_tool_call(decide),
    );
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "define mull"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    (env, agent, ran, model)
}

#[tokio::test]
async fn d11_invalid_input_is_a_tool_error_not_a_turn_failure() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "lookup", json!({"query": 5})))
        .step(|s| s.tool_call_text("c2", "lookup", "{not json"))
        .step(|s| s.text("I will stop."))
        .build();
    let ran = ran();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(lookup_tool(ran.clone()))));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "x"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert!(ran.lock().unwrap().is_empty());
    assert!(
        !agent.calls().iter().any(|c| c.contains("tool_call")),
        "no tool hook runs for invalid input"
    );
    insta::assert_snapshot!("d11_trace", env.step_trace(render).await);
}

#[tokio::test]
async fn d12_the_decision_is_durable_before_execute_runs() {
    let model = lookup_then_answer();
    let env = new_env();
    let path = env.path.clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let tool = FnTool::new("lookup", "Looks up.", move |_: LookupInput, call| {
        let path = path.clone();
        let seen = seen2.clone();
        async move {
            // Another process's view: only committed rows are visible.
            let reader = LogReader::open(&path).unwrap();
            let page = reader.session_page("s1", 0, 1000).unwrap();
            let decided = page.iter().any(|e| {
                matches!(&e.event, Event::ToolDecided { call_id, .. } if *call_id == call.call_id)
            });
            seen.lock().unwrap().push(decided);
            Ok::<Value, ToolError>(json!("ok"))
        }
    })
    .shared();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(tool)));
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "x"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), [true]);
    let hooks = agent.calls();
    let before = hooks
        .iter()
        .position(|c| c.starts_with("before_tool_call"))
        .unwrap();
    let after = hooks
        .iter()
        .position(|c| c.starts_with("after_tool_call"))
        .unwrap();
    assert!(before < after);
}

#[tokio::test]
async fn d13_no_decision_executes_once_with_the_models_input() {
    let (env, agent, ran, _) = run_tool_scenario(|_| Ok(None)).await;
    assert_eq!(*ran.lock().unwrap(), [json!({"q": "mull"})]);
    insta::assert_snapshot!("d13_trace", env.step_trace(render).await);
    insta::assert_snapshot!("d13_hooks", agent.calls_folded());
}

#[tokio::test]
async fn d14_allow_with_input_runs_substituted_input() {
    let (env, agent, ran, _) =
        run_tool_scenario(|_| Ok(Some(ToolCallDecision::AllowWithInput(json!({"q": "MULL"})))))
            .await;
    assert_eq!(*ran.lock().unwrap(), [json!({"q": "MULL"})]);
    let after = agent
        .calls()
        .into_iter()
        .find(|c| c.starts_with("after_tool_call"))
        .unwrap();
    assert!(after.contains(r#"input={"q":"mull"}"#), "{after}");
    assert!(after.contains(r#"effective_input={"q":"MULL"}"#), "{after}");
    // The step record's tool result is shaped like after_tool_call: the model's input.
    let step = agent
        .step_records()
        .into_iter()
        .find(|r| !r.tool_results.is_empty())
        .unwrap();
    assert_eq!(step.tool_results[0].input, json!({"q": "mull"}));
    insta::assert_snapshot!("d14_trace", env.step_trace(render).await);
}

#[tokio::test]
async fn d15_block_skips_execute_and_the_model_sees_the_default_text() {
    let (env, agent, ran, model) =
        run_tool_scenario(|_| Ok(Some(ToolCallDecision::Block { reason: None }))).await;
    assert!(ran.lock().unwrap().is_empty());
    assert_eq!(
        tool_result_sent(&model),
        json!("Tool \"lookup\" was blocked by beforeToolCall.")
    );
    let after = agent
        .calls()
        .into_iter()
        .find(|c| c.starts_with("after_tool_call"))
        .unwrap();
    assert!(after.contains("decision=block, success=true"), "{after}");
    insta::assert_snapshot!("d15_trace", env.step_trace(render).await);
}

#[tokio::test]
async fn d15_block_with_a_reason() {
    let (_env, _agent, ran, model) = run_tool_scenario(|_| {
        Ok(Some(ToolCallDecision::Block {
            reason: Some("lookups are disabled in read-only mode".into()),
        }))
    })
    .await;
    assert!(ran.lock().unwrap().is_empty());
    assert_eq!(
        tool_result_sent(&model),
        json!("lookups are disabled in read-only mode")
    );
}

#[tokio::test]
async fn d16_substitute_skips_execute_and_the_model_sees_the_output() {
    let (env, agent, ran, model) = run_tool_scenario(|_| {
        Ok(Some(ToolCallDecision::Substitute {
            output: json!({"word": "mull", "cached": true}),
            input: None,
        }))
    })
    .await;
    assert!(ran.lock().unwrap().is_empty());
    assert_eq!(
        tool_result_sent(&model),
        json!({"word": "mull", "cached": true})
    );
    assert!(agent
        .calls()
        .iter()
        .any(|c| c.starts_with("after_tool_call(lookup, decision=substitute, success=true")));
    insta::assert_snapshot!("d16_trace", env.step_trace(render).await);
}

#[tokio::test]
async fn d17_execute_failure_is_a_tool_error_and_the_turn_goes_on() {
    let model = lookup_then_answer();
    let failing = FnTool::new("lookup", "Fails.", |_: LookupInput, _| async move {
        Err::<Value, ToolError>("dictionary service unavailable".into())
    })
    .shared();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(failing)));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "x"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert!(agent.calls().iter().any(|c| c
        .starts_with("after_tool_call(lookup, decision=allow, success=false")
        && c.contains("dictionary service unavailable")));
    insta::assert_snapshot!("d17_execute_failure", env.step_trace(render).await);
}

#[tokio::test]
async fn d17_a_failing_or_panicking_before_tool_call_behaves_like_a_failed_execute() {
    for panics in [false, true] {
        let model = lookup_then_answer();
        let ran = ran();
        let agent = Arc::new(
            Rec::new(&model)
                .tools(ToolSet::new().with(lookup_tool(ran.clone())))
                .before_tool_call(move |_| {
                    if panics {
                        panic!("policy engine crashed");
                    }
                    Err("policy service unreachable".into())
                }),
        );
        let env = new_env();
        let session = env.open(&agent).await;
        let out = session
            .save_messages(user("u1", "x"), TurnOptions::default())
            .await
            .unwrap();
        assert_eq!(out.status, OutcomeStatus::Completed);
        assert!(ran.lock().unwrap().is_empty());
        assert!(agent
            .calls()
            .iter()
            .any(|c| c.starts_with("after_tool_call(lookup, decision=hook_failed, success=false")));
        let name = if panics {
            "d17_hook_panics"
        } else {
            "d17_hook_fails"
        };
        insta::assert_snapshot!(name, env.step_trace(render).await);
    }
}

fn progress_tool() -> Arc<dyn mull::engine::Tool> {
    FnTool::streaming("progress", "Reports progress.", |i: LookupInput, _| {
        futures::stream::iter(vec![
            Ok::<Value, ToolError>(json!({"pct": 50})),
            Ok(json!({"pct": 100})),
            Ok(json!({"done": i.q})),
        ])
        .boxed()
    })
    .shared()
}

fn progress_model() -> ScriptedModel {
    ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "progress", json!({"q": "build"})))
        .step(|s| s.text("Built."))
        .build()
}

#[tokio::test]
async fn d18_streaming_tool_yields_preliminaries_then_the_final() {
    let model = progress_model();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(progress_tool())));
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "x"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(tool_result_sent(&model), json!({"done": "build"}));
    insta::assert_snapshot!("d18_streaming", env.step_trace(render).await);
}

#[tokio::test]
async fn d18_a_blocked_streaming_tool_yields_exactly_one_extra_preliminary() {
    let model = progress_model();
    let agent = Arc::new(
        Rec::new(&model)
            .tools(ToolSet::new().with(progress_tool()))
            .before_tool_call(|_| Ok(Some(ToolCallDecision::Block { reason: None }))),
    );
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "x"), TurnOptions::default())
        .await
        .unwrap();
    let results: Vec<bool> = env
        .events()
        .await
        .iter()
        .filter_map(|e| match &e.event {
            Event::Chunk {
                part: StreamPart::ToolResult { preliminary, .. },
                ..
            } => Some(*preliminary),
            _ => None,
        })
        .collect();
    assert_eq!(results, [true, false]);
    insta::assert_snapshot!("d18_blocked_streaming", env.step_trace(render).await);
}

#[tokio::test]
async fn d19_duration_is_measured_with_the_injected_clock() {
    let model = lookup_then_answer();
    let env = new_env();
    let clock = env.clock.clone();
    let slow = FnTool::new("lookup", "Slow.", move |_: LookupInput, _| {
        let clock = clock.clone();
        async move {
            clock.advance(Duration::from_millis(250));
            Ok::<Value, ToolError>(json!("ok"))
        }
    })
    .shared();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(slow)));
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "x"), TurnOptions::default())
        .await
        .unwrap();
    let durations: Vec<u64> = env
        .events()
        .await
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallFinished { duration_ms, .. } => Some(*duration_ms),
            _ => None,
        })
        .collect();
    assert_eq!(durations, [250]);
    assert!(agent
        .calls()
        .iter()
        .any(|c| c.ends_with("duration_ms=250)")));
    // A skipped call takes 0.
    let (env2, _, _, _) =
        run_tool_scenario(|_| Ok(Some(ToolCallDecision::Block { reason: None }))).await;
    assert!(env2.step_trace(render).await.contains("duration_ms=0"));
}

#[tokio::test]
async fn d20_client_tools_fire_no_hooks_and_auto_continue_after_results() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.text("Need to ask.")
                .tool_call("c1", "ask_user", json!({"question": "Which file?"}))
                .tool_call("c2", "ask_user", json!({"question": "Which line?"}))
        })
        .step(|s| s.text("Thanks, editing main.rs line 3."))
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    let ask = ToolSpec {
        name: "ask_user".into(),
        description: "Ask the user.".into(),
        input_schema: json!({"type": "object"}).into(),
    };
    let out = session
        .save_messages(
            user("u1", "edit it"),
            TurnOptions {
                client_tools: vec![ask],
                body: json!({"file_hint": "src"}),
                ..TurnOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let message = out.message.unwrap();
    assert!(message.parts.iter().all(|p| match p {
        UIPart::Tool(t) => t.state == ToolPartState::InputAvailable,
        _ => true,
    }));
    assert_eq!(session.state().pending_client_calls.len(), 2);
    let first = session
        .add_tool_result("c1", ClientToolOutcome::Output(json!("main.rs")))
        .await
        .unwrap();
    assert!(first.is_none(), "one call of the step is still pending");
    let cont = session
        .add_tool_result("c2", ClientToolOutcome::Error(None))
        .await
        .unwrap()
        .expect("all results in: a continuation turn ran");
    assert_eq!(cont.status, OutcomeStatus::Completed);
    assert!(!agent.calls().iter().any(|c| c.contains("tool_call(")));
    let state = session.state();
    assert_eq!(
        state.messages.len(),
        3,
        "the continuation wrote a new assistant message"
    );
    insta::assert_snapshot!("d20_trace", env.step_trace(render).await);
    insta::assert_snapshot!("d20_hooks", agent.calls_folded());
}

#[tokio::test]
async fn d21_tool_call_context_carries_the_step_number() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.tool_call("c1", "lookup", json!({"q": "a"})))
        .step(|s| s.tool_call("c2", "lookup", json!({"q": "b"})))
        .step(|s| s.text("done"))
        .build();
    let agent = Arc::new(Rec::new(&model).tools(ToolSet::new().with(lookup_tool(ran()))));
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "x"), TurnOptions::default())
        .await
        .unwrap();
    let steps: Vec<String> = agent
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("before_tool_call"))
        .collect();
    assert_eq!(
        steps,
        [
            r#"before_tool_call(lookup, step=0, input={"q":"a"})"#,
            r#"before_tool_call(lookup, step=1, input={"q":"b"})"#
        ]
    );
}
