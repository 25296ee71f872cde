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
//! pip install 'llama-cpp-python[server]==0.3.36'    # and a small GGUF model, e.g. Gemma 3 270M
//! python -m llama_cpp.server --model MODEL.gguf --host 127.0.0.1 --port 8765 --n_ctx 4096 \
//!   --model_alias local --chat_format chatml-function-calling &
//! MULL_CAPTURE_LLM=http://127.0.0.1:8765/v1 \
//!   cargo test -p mull-providers --test exchanges -- --ignored recapture
//! ```
//! Without `MULL_CAPTURE_LLM` the capture test prints why it did nothing and passes, so CI's
//! `--include-ignored` run needs no server.

mod common;
mod exchanges_support;

use std::sync::Arc;

use exchanges_support::{capture, load, replay, run_turn, AddAgent, Scenario, CAPTURE_VARIABLE};
use mull_core::{ChatErrorClassification, Event, LanguageModel, TurnStatus};
use mull_providers::anthropic::{AnthropicConfig, AnthropicModel};
use mull_providers::openai::{OpenAiConfig, OpenAiModel};
use mull_providers::Secret;
use serde_json::Value;

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

/// The step reports of a turn, as its log holds them.
fn step_records(run: &exchanges_support::Run) -> Vec<mull_core::StepReport> {
    run.events
        .iter()
        .filter_map(|e| match e {
            Event::StepFinished { record } => Some((**record).clone()),
            _ => None,
        })
        .collect()
}

/// The request bodies a capture's server accepted (or answered), in order.
fn accepted(exchanges: &[exchanges_support::Exchange]) -> Vec<Value> {
    exchanges.iter().filter_map(|x| x.request.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpps_tool_turn_completes_on_the_requests_it_accepted() {
    let exchanges = load("llama-cpp-tool-turn");
    let (server, base_url) = replay(&exchanges).await;
    let run = run_turn(
        AddAgent::new(Scenario::ToolTurn.local_model(base_url), Scenario::ToolTurn),
        Scenario::ToolTurn.prompt(),
    )
    .await;
    assert_eq!(run.status, TurnStatus::Completed, "{:#?}", run.events);
    assert!(
        run.events.iter().any(|e| matches!(
            e,
            Event::ToolCallFinished { tool, success: true, .. } if tool == "add"
        )),
        "{:#?}",
        run.events
    );
    // mull sent, byte for byte in JSON, what the real server accepted ...
    let sent: Vec<Value> = server.received().into_iter().map(|r| r.body).collect();
    assert_eq!(sent, accepted(&exchanges));
    // ... the assistant message with the tool call carrying "" content: the same request with
    // `null` there is what the server refused with a 500.
    let assistant = sent[1]["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "assistant"))
        .expect("step 2 sends the tool call back");
    assert_eq!(assistant["content"], "");
    assert!(assistant["tool_calls"].is_array());
    let refused = &load("llama-cpp-null-content")[0];
    assert_eq!(refused.status, 500);
    assert!(refused.body.contains("Input should be a valid string"));
    let mut with_null = sent[1].clone();
    for m in with_null["messages"].as_array_mut().expect("messages") {
        if m["role"] == "assistant" {
            m["content"] = Value::Null;
        }
    }
    assert_eq!(refused.request.as_ref(), Some(&with_null));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpps_empty_stream_for_an_automatic_tool_choice_is_answered_without_streaming() {
    let exchanges = load("llama-cpp-auto-tool-turn");
    // What the real server did: HTTP 200 and not one event (a keep-alive comment at most) for
    // the streamed automatic tool choice, then the whole answer for the same request without
    // streaming.
    let first = exchanges[0].request.as_ref().expect("recorded request");
    assert_eq!(first["stream"], true);
    assert_eq!(first["tool_choice"], "auto");
    assert_eq!(exchanges[0].status, 200);
    assert!(
        !exchanges[0].body.contains("data:"),
        "{}",
        exchanges[0].body
    );
    assert_eq!(exchanges[1].status, 200);
    assert!(exchanges[1].content_type.starts_with("application/json"));

    let (server, base_url) = replay(&exchanges).await;
    let run = run_turn(
        AddAgent::new(
            Scenario::AutoToolTurn.local_model(base_url),
            Scenario::AutoToolTurn,
        ),
        Scenario::AutoToolTurn.prompt(),
    )
    .await;
    assert_eq!(run.status, TurnStatus::Completed, "{:#?}", run.events);
    assert!(
        run.events.iter().any(|e| matches!(
            e,
            Event::ToolCallFinished { tool, success: true, .. } if tool == "add"
        )),
        "{:#?}",
        run.events
    );
    // Each step's record says its answer came without streaming, with the usage the server
    // reported in the body (its stream never reports any).
    let records = step_records(&run);
    assert_eq!(records.len(), 2);
    for record in &records {
        assert_eq!(record.response["streamed"], false, "{}", record.response);
        assert!(record.usage.input_tokens.is_some(), "{:?}", record.usage);
    }
    // One empty stream, its answer without streaming, and the next step straight without
    // streaming: mull sent exactly what the real server answered.
    let sent: Vec<Value> = server.received().into_iter().map(|r| r.body).collect();
    assert_eq!(sent, accepted(&exchanges));
    let streamed: Vec<&Value> = sent.iter().map(|b| &b["stream"]).collect();
    assert_eq!(
        streamed,
        [&Value::Bool(true), &Value::Bool(false), &Value::Bool(false)]
    );
    assert_eq!(
        sent[1]["max_tokens"], sent[0]["max_tokens"],
        "the whole request, not a probe"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpps_empty_stream_for_an_overflow_is_probed_and_classified() {
    let exchanges = load("llama-cpp-overflow");
    assert_eq!((exchanges[0].status, exchanges[0].body.as_str()), (200, ""));
    let (server, base_url) = replay(&exchanges).await;
    let run = run_turn(
        AddAgent::new(Scenario::Overflow.local_model(base_url), Scenario::Overflow),
        Scenario::Overflow.prompt(),
    )
    .await;
    assert_eq!(run.status, TurnStatus::Error);
    let (classification, error) = run
        .events
        .iter()
        .find_map(|e| match e {
            Event::TurnFailed {
                classification,
                error,
                ..
            } => Some((*classification, error.clone())),
            _ => None,
        })
        .expect("the turn failed");
    assert_eq!(
        classification,
        Some(ChatErrorClassification::ContextOverflow)
    );
    assert!(error.contains("maximum context length"), "{error}");
    // One streaming request, then one probe without streaming; no retries.
    let sent: Vec<Value> = server.received().into_iter().map(|r| r.body).collect();
    assert_eq!(sent, accepted(&exchanges));
    assert_eq!(sent[1]["stream"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpps_stream_cut_mid_answer_fails_the_turn_at_the_stream_keeping_what_streamed() {
    let exchanges = load("llama-cpp-cut-stream");
    assert!(exchanges[0].cut);
    let (server, base_url) = replay(&exchanges).await;
    let run = run_turn(
        AddAgent::new(
            Scenario::CutStream.local_model(base_url),
            Scenario::CutStream,
        ),
        Scenario::CutStream.prompt(),
    )
    .await;
    // Text already reached the user, so the call is not retried (that would repeat it): the
    // turn fails at the stream stage as transient, and the answer keeps the words that came.
    assert_eq!(run.status, TurnStatus::Error, "{:#?}", run.events);
    let failed = run
        .events
        .iter()
        .find_map(|e| match e {
            Event::TurnFailed {
                stage,
                model_error,
                messages_persisted,
                ..
            } => Some((*stage, model_error.clone(), *messages_persisted)),
            _ => None,
        })
        .expect("the turn failed");
    assert_eq!(failed.0, mull_core::ErrorStage::Stream);
    let model_error = failed.1.expect("the model call's error");
    assert_eq!(model_error.kind, mull_core::ModelErrorKind::Transient);
    assert!(
        model_error.message.contains("mid-stream"),
        "{model_error:?}"
    );
    assert!(failed.2);
    assert!(run.events.iter().any(|e| matches!(e, Event::Chunk { .. })));
    assert!(!run
        .events
        .iter()
        .any(|e| matches!(e, Event::ModelRetried { .. })));
    let sent: Vec<Value> = server.received().into_iter().map(|r| r.body).collect();
    assert_eq!(sent, accepted(&exchanges));
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
