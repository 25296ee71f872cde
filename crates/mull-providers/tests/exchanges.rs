//! Recorded server exchanges, each run through a whole turn: what a real OpenAI-compatible
//! server (llama.cpp's, through llama-cpp-python, with a small model) answered mull, byte for
//! byte, and the providers' documented example streams for OpenAI and Anthropic. Each file in
//! `fixtures/exchanges/` is one scenario, one HTTP exchange a line: the request mull sent (absent
//! for the documented examples), then the status, content type and body the server gave, and
//! whether the connection was cut after that body. A local server plays the answers back in
//! order; the test runs a real session over them and checks both sides: the turn's events, and
//! that mull sent exactly what the real server accepted.
//!
//! Re-capture against a live server (this overwrites the `llama-cpp-*` files):
//! ```text
//! /work/shared/tools/real-llm.sh serve 8765 &     # or any llama-cpp-python server, alias `local`
//! MULL_CAPTURE_LLM=http://127.0.0.1:8765/v1 \
//!   cargo test -p mull-providers --test exchanges -- --ignored recapture
//! ```
//! Without `MULL_CAPTURE_LLM` the capture test prints why it did nothing and passes, so CI's
//! `--include-ignored` run needs no server.

mod common;
mod exchanges_support;

use std::sync::Arc;

use exchanges_support::{capture, load, replay, run_turn, AddAgent, Scenario, CAPTURE_VARIABLE};
use mull_core::{Event, LanguageModel, TurnStatus};
use mull_providers::anthropic::{AnthropicConfig, AnthropicModel};
use mull_providers::openai::{OpenAiConfig, OpenAiModel};
use mull_providers::Secret;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openais_documented_tool_call_stream_runs_a_whole_tool_turn() {
    let exchanges = load("openai-docs-tool-turn");
    let (_server, base_url) = replay(&exchanges).await;
    let mut config = OpenAiConfig::openai("gpt-4o-2024-08-06", Secret::new("sk-test"));
    config.base_url = base_url;
    let model: Arc<dyn LanguageModel> = Arc::new(OpenAiModel::new(config).expect("model"));
    let run = run_turn(
        AddAgent::new(model, Scenario::Weather),
        Scenario::Weather.prompt(),
    )
    .await;
    assert_weather_turn(&run, "Paris, France");
    let first = &step_records(&run)[0];
    assert_eq!(
        first.response["id"],
        "chatcmpl-AZ3n4TQmbZNCeqDpkWmBLmpwvV9nD"
    );
    assert_eq!(first.response["model_id"], "gpt-4o-2024-08-06");
    // The chunks' `created` time, not the clock's.
    assert_eq!(
        first.response["timestamp"]
            .as_str()
            .map(|t| t.starts_with("2024-")),
        Some(true),
        "{}",
        first.response
    );
    assert!(first.response["headers"]["content-type"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropics_documented_tool_use_stream_runs_a_whole_tool_turn() {
    let exchanges = load("anthropic-docs-tool-turn");
    let (_server, base_url) = replay(&exchanges).await;
    let mut config = AnthropicConfig::new("claude-3-haiku-20240307", Secret::new("sk-ant-test"));
    config.base_url = base_url;
    let model: Arc<dyn LanguageModel> = Arc::new(AnthropicModel::new(config).expect("model"));
    let run = run_turn(
        AddAgent::new(model, Scenario::Weather),
        Scenario::Weather.prompt(),
    )
    .await;
    assert_weather_turn(&run, "San Francisco, CA");
    let records = step_records(&run);
    assert_eq!(records[0].response["id"], "msg_014p7gG3wDgGV9EUtLvnow3U");
    assert_eq!(records[1].response["id"], "msg_01VHbM8bsXTkGd5Q7Ma3Wbss");
    assert_eq!(records[0].response["model_id"], "claude-3-haiku-20240307");
    assert!(records[0].response["headers"]["content-type"].is_string());
    assert!(records[0].warnings.is_empty());
}

/// The step records of a turn, as `on_step_finish` saw them.
fn step_records(run: &exchanges_support::Run) -> Vec<mull_core::StepRecord> {
    run.events
        .iter()
        .filter_map(|e| match e {
            Event::StepFinished { record } => Some((**record).clone()),
            _ => None,
        })
        .collect()
}

fn assert_weather_turn(run: &exchanges_support::Run, location: &str) {
    assert_eq!(run.status, TurnStatus::Completed, "{:#?}", run.events);
    assert!(
        run.events.iter().any(|e| matches!(
            e,
            Event::ToolCallStarted { tool, input, .. }
                if tool == "get_weather" && input["location"] == location
        )),
        "{:#?}",
        run.events
    );
    assert!(run.events.iter().any(|e| matches!(
        e,
        Event::ToolCallFinished { tool, success: true, .. } if tool == "get_weather"
    )));
    let steps = run
        .events
        .iter()
        .filter(|e| matches!(e, Event::StepFinished { .. }))
        .count();
    assert_eq!(steps, 2);
    assert!(!run.text.is_empty());
}

/// Re-captures the `llama-cpp-*` scenarios against the live server `MULL_CAPTURE_LLM` names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "re-captures from a live llama.cpp server; opt in with MULL_CAPTURE_LLM"]
async fn recapture() {
    let Ok(upstream) = std::env::var(CAPTURE_VARIABLE) else {
        eprintln!(
            "SKIPPED: set {CAPTURE_VARIABLE}=http://127.0.0.1:PORT/v1 to re-capture from a live \
             llama.cpp server (see this file's docs)"
        );
        return;
    };
    capture(&upstream).await;
}
