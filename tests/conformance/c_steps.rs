//! C. Steps (C.6–C.10): `before_step`, every part as a chunk, `on_step_finish`'s record, call
//! settings reaching the model, and stream transforms.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use mull::core::{Event, StreamPart, ToolChoice, UIPart};
use mull::engine::{OutcomeStatus, StepConfig, StreamTransform, ToolSet, TurnConfig, TurnOptions};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;

use crate::harness::{
    lookup_then_answer, lookup_tool, new_env, ran, render, tool_result_sent, user,
};
use crate::recording_agent::Rec;

#[tokio::test]
async fn c06_before_step_config_applies_to_its_step_only() {
    let model = lookup_then_answer();
    let seen_results = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen_results.clone();
    let agent = Arc::new(
        Rec::new(&model)
            .tools(ToolSet::new().with(lookup_tool(ran())))
            .before_step(move |ctx| {
                if ctx.step_number == 1 {
                    seen2.lock().unwrap().push(ctx.steps[0].tool_results.len());
                    return Ok(None);
                }
                Ok(Some(StepConfig {
                    tool_choice: Some(ToolChoice::Tool {
                        tool_name: "lookup".into(),
                    }),
                    system: Some("Step zero system.".into()),
                    ..StepConfig::default()
                }))
            }),
    );
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "define mull"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(
        *seen_results.lock().unwrap(),
        [1],
        "step 1 sees step 0's tool result"
    );
    let requests = model.requests();
    assert_eq!(
        requests[0].tool_choice,
        ToolChoice::Tool {
            tool_name: "lookup".into()
        }
    );
    assert_eq!(requests[0].system.as_deref(), Some("Step zero system."));
    assert_eq!(requests[1].tool_choice, ToolChoice::Auto);
    assert_eq!(requests[1].system.as_deref(), Some("You are terse."));
    // Step 1's messages carry step 0's call and result.
    assert_eq!(requests[1].messages.len(), 3);
    insta::assert_snapshot!("c06_hooks", agent.calls_folded());
}

#[tokio::test]
async fn c07_every_part_is_a_chunk_event_and_an_on_chunk_call() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.reasoning("Think first.")
                .text_deltas(["a", "b"])
                .source_url("src1", "https://example.com", Some("Example"))
                .raw(json!({"provider": "detail"}))
                .usage(3, 4)
        })
        .build();
    let agent = Arc::new(Rec::new(&model));
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    let chunk_events = env
        .events()
        .await
        .iter()
        .filter(|e| e.kind() == "chunk")
        .count();
    let on_chunk_calls = agent
        .calls()
        .iter()
        .filter(|c| c.starts_with("on_chunk"))
        .count();
    assert_eq!(chunk_events, 10);
    // on_chunk sees exactly the seed's ChunkContext kinds; the block starts and ends and the
    // finish are still chunk events (and reach the client), but not the hook.
    let observed: Vec<String> = agent
        .calls()
        .iter()
        .filter_map(|c| {
            c.strip_prefix("on_chunk(")
                .map(|k| k.trim_end_matches(')').to_owned())
        })
        .collect();
    assert_eq!(
        observed,
        [
            "reasoning-delta",
            "text-delta",
            "text-delta",
            "source",
            "raw"
        ]
    );
    assert_eq!(on_chunk_calls, observed.len());
    insta::assert_snapshot!("c07_trace", env.step_trace(render).await);
}

#[tokio::test]
async fn c07_send_reasoning_false_logs_reasoning_but_does_not_send_it() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.reasoning("secret plan").text("answer"))
        .build();
    let agent = Arc::new(Rec::new(&model).before_turn(|_| {
        Ok(Some(TurnConfig {
            send_reasoning: Some(false),
            ..TurnConfig::default()
        }))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let mut stream = session
        .chat(user("u1", "hi"), TurnOptions::default())
        .unwrap();
    let mut sent = Vec::new();
    while let Some(part) = stream.next().await {
        sent.push(part.kind());
    }
    let out = stream.finish().await.unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    assert_eq!(sent, ["text-start", "text-delta", "text-end", "finish"]);
    let logged: Vec<_> = env
        .events()
        .await
        .iter()
        .filter_map(|e| match &e.event {
            Event::Chunk { part, .. } if part.is_reasoning() => Some(part.kind()),
            _ => None,
        })
        .collect();
    assert_eq!(
        logged,
        ["reasoning-start", "reasoning-delta", "reasoning-end"]
    );
}

#[tokio::test]
async fn c08_on_step_finish_receives_the_full_step_record() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| {
            s.part(StreamPart::StreamStart {
                warnings: vec![mull::core::CallWarning::UnsupportedSetting {
                    setting: "top_k".into(),
                    details: None,
                }],
            })
            .part(StreamPart::ResponseMetadata {
                id: Some("resp_1".into()),
                model_id: Some("scripted-1-2026".into()),
                timestamp: None,
                headers: Some([("x-request-id".to_string(), "abc".to_string())].into()),
                streamed: None,
            })
            .reasoning("hmm")
            .text("Answer.")
            .source_url("s1", "https://example.com/a", None)
            .file("image/png", "aGk=")
            .usage_full(mull::core::Usage {
                input_tokens: Some(100),
                output_tokens: Some(20),
                total_tokens: Some(120),
                reasoning_tokens: Some(7),
                cached_input_tokens: Some(64),
            })
            .raw_finish_reason("end_turn")
            .provider_metadata(json!({"anthropic": {"cacheReadInputTokens": 64}}))
        })
        .build();
    let seen = Arc::new(Mutex::new(None));
    let seen2 = seen.clone();
    let agent = Arc::new(Rec::new(&model).on_step_finish(move |ctx| {
        *seen2.lock().unwrap() = Some(ctx.clone());
        Ok(())
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    let ctx = seen.lock().unwrap().clone().unwrap();
    let r = &ctx.record;
    assert_eq!(ctx.step_number, 0);
    assert_eq!(r.text, "Answer.");
    assert_eq!(r.reasoning_text.as_deref(), Some("hmm"));
    assert_eq!(ctx.reasoning, ["hmm"]);
    assert_eq!(r.sources.len(), 1);
    assert_eq!(r.files, [("image/png".to_string(), "aGk=".to_string())]);
    assert_eq!(r.finish_reason.as_str(), "stop");
    assert_eq!(r.raw_finish_reason.as_deref(), Some("end_turn"));
    assert_eq!(r.usage.cached_input_tokens, Some(64));
    assert_eq!(r.usage.reasoning_tokens, Some(7));
    assert_eq!(r.model_id, "scripted-1");
    assert_eq!(r.request["hash"].as_str().unwrap().len(), 64);
    assert_eq!(
        r.request["hash"].as_str().unwrap(),
        model.requests()[0].canonical_hash()
    );
    assert_eq!(r.response["provider"], "scripted");
    // What the provider said about the call and its response reaches the hook.
    assert_eq!(
        r.warnings,
        [mull::core::CallWarning::UnsupportedSetting {
            setting: "top_k".into(),
            details: None
        }]
    );
    assert_eq!(r.response["id"], "resp_1");
    assert_eq!(r.response["model_id"], "scripted-1-2026");
    assert_eq!(r.response["headers"]["x-request-id"], "abc");
    // No time from the provider: dated by the step's start (the injected clock).
    assert!(r.response["timestamp"].is_string());
    // The call metadata is logged but is no chunk the hook or a client sees.
    assert!(!agent
        .calls()
        .iter()
        .any(|c| c.contains("stream-start") || c.contains("response-metadata")));
    assert!(r.provider_metadata.is_some());
    assert!(!ctx.response_messages.is_empty());
}

#[tokio::test]
async fn c09_call_settings_reach_the_model_request_unchanged() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("ok"))
        .build();
    let agent = Arc::new(Rec::new(&model).before_turn(|_| {
        let mut headers = std::collections::BTreeMap::new();
        headers.insert("x-team".to_string(), "search".to_string());
        Ok(Some(TurnConfig {
            max_output_tokens: Some(256),
            temperature: Some(0.3),
            top_p: Some(0.9),
            top_k: Some(40),
            presence_penalty: Some(0.1),
            frequency_penalty: Some(0.2),
            stop_sequences: Some(vec!["END".into()]),
            seed: Some(7),
            headers: Some(headers),
            provider_options: Some(json!({"anthropic": {"thinking": {"budget": 1024}}})),
            ..TurnConfig::default()
        }))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    let s = &model.requests()[0].settings;
    assert_eq!(s.max_output_tokens, Some(256));
    assert_eq!(s.temperature, Some(0.3));
    assert_eq!(s.top_p, Some(0.9));
    assert_eq!(s.top_k, Some(40));
    assert_eq!(s.presence_penalty, Some(0.1));
    assert_eq!(s.frequency_penalty, Some(0.2));
    assert_eq!(s.stop_sequences, ["END"]);
    assert_eq!(s.seed, Some(7));
    assert_eq!(s.headers["x-team"], "search");
    assert_eq!(
        s.provider_options,
        Some(json!({"anthropic": {"thinking": {"budget": 1024}}}))
    );
    // The log never holds header values.
    let configured = env
        .events()
        .await
        .into_iter()
        .find_map(|e| match e.event {
            Event::TurnConfigured { config } => Some(config),
            _ => None,
        })
        .unwrap();
    assert_eq!(configured.settings.headers["x-team"], "[redacted]");
}

#[tokio::test]
async fn c10_a_stream_transform_rewrites_parts_and_the_log_keeps_the_original() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text_deltas(["quiet ", "words"]))
        .build();
    let agent = Arc::new(Rec::new(&model).before_turn(|_| {
        Ok(Some(TurnConfig {
            transforms: vec![StreamTransform::new("upper", |part| match part {
                StreamPart::TextDelta { id, text } => StreamPart::TextDelta {
                    id,
                    text: text.to_uppercase(),
                },
                other => other,
            })],
            ..TurnConfig::default()
        }))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.message.unwrap().plain_text(), "QUIET WORDS");
    insta::assert_snapshot!("c10_trace", env.step_trace(render).await);
}

/// The seed's example: a transform that emits source parts derived from tool results. Another
/// one, after it, drops every tool result: the engine keeps the call paired with its outcome
/// anyway, so the next request still carries the result.
#[tokio::test]
async fn c10_a_stream_transform_adds_sources_from_tool_results_and_calls_stay_paired() {
    let model = lookup_then_answer();
    let agent = Arc::new(
        Rec::new(&model)
            .tools(ToolSet::new().with(lookup_tool(ran())))
            .before_turn(|_| {
                Ok(Some(TurnConfig {
                    transforms: vec![
                        StreamTransform::flat_map("sources-from-results", |part| match &part {
                            StreamPart::ToolResult {
                                call_id, output, ..
                            } => {
                                let source = StreamPart::Source {
                                    source: mull::core::Source::Url {
                                        id: format!("src-{call_id}"),
                                        url: format!("https://dict.example/{}", output["word"]),
                                        title: None,
                                    },
                                };
                                vec![part, source]
                            }
                            _ => vec![part],
                        }),
                        StreamTransform::flat_map("drop-results", |part| match part {
                            StreamPart::ToolResult { .. } => Vec::new(),
                            other => vec![other],
                        }),
                    ],
                    ..TurnConfig::default()
                }))
            }),
    );
    let env = new_env();
    let session = env.open(&agent).await;
    let out = session
        .save_messages(user("u1", "define mull"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    // The next request carries the call's result although a transform dropped it.
    assert_eq!(tool_result_sent(&model), json!({"word": "mull", "hits": 3}));
    let message = out.message.unwrap();
    assert!(message.parts.iter().any(|p| matches!(
        p,
        UIPart::SourceUrl { url, .. } if url == "https://dict.example/\"mull\""
    )));
    let events = env.events().await;
    // The log keeps what the tool produced and what the user saw: the result, then the source.
    let at = events
        .iter()
        .position(|e| {
            matches!(
                &e.event,
                Event::PartTransformed {
                    original: StreamPart::ToolResult { .. },
                    shown: 2,
                    ..
                }
            )
        })
        .expect("the transformed result is logged");
    let shown: Vec<&str> = events[at + 1..at + 3]
        .iter()
        .map(|e| match &e.event {
            Event::Chunk { part, .. } => part.kind(),
            other => other.kind(),
        })
        .collect();
    assert_eq!(shown, ["tool-result", "source"]);
    // on_chunk sees the added source too.
    assert!(agent.calls().iter().any(|c| c == "on_chunk(source)"));
}
