//! Context blocks and message search end to end (CONFORMANCE B.2 with `configure_session`
//! blocks): the system prompt built from blocks, writes by the model through `update_context`
//! (checked against the block's budget) and by the application, the cached prompt that changes
//! only when a block changes, block values rebuilt from the log, and FTS5 search over the
//! conversation for the application and as a tool for the model.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mull::core::{ContextBlockSource, Envelope, Event, LanguageModel};
use mull::core::{Role, UIMessage};
use mull::engine::{
    compact_function, summarizer, Agent, CompactOptions, ContextBlock, ContextError, HookResult,
    OutcomeStatus, Session, SessionConfig, TurnConfig, TurnContext, TurnOptions, SEARCH_TOOL,
    UPDATE_CONTEXT_TOOL,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;

type ConfigureFn = dyn Fn(SessionConfig) -> SessionConfig + Send + Sync;
type BeforeTurnFn = dyn Fn(&TurnContext) -> Option<TurnConfig> + Send + Sync;

struct Mem {
    model: Arc<dyn LanguageModel>,
    configure: Box<ConfigureFn>,
    before_turn: Option<Box<BeforeTurnFn>>,
    seen_systems: Mutex<Vec<String>>,
}

impl Mem {
    fn new(
        model: &ScriptedModel,
        configure: impl Fn(SessionConfig) -> SessionConfig + Send + Sync + 'static,
    ) -> Mem {
        Mem {
            model: Arc::new(model.clone()),
            configure: Box::new(configure),
            before_turn: None,
            seen_systems: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl Agent for Mem {
    fn name(&self) -> &str {
        "mem"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn system_prompt(&self) -> String {
        "You are terse.".into()
    }
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        (self.configure)(session)
    }
    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        self.seen_systems.lock().unwrap().push(ctx.system.clone());
        Ok(self.before_turn.as_ref().and_then(|f| f(ctx)))
    }
}

mod support;
use support::test_log::TestLog as Env;

fn new_env() -> Env {
    Env::new()
}

/// One line per event, chunks left out.
async fn trace(env: &Env) -> String {
    let events = env.events().await;
    support::trace::render(events.iter().filter(|e| e.kind() != "chunk"), render)
}

fn render(env: &Envelope) -> String {
    let body = match &env.event {
        Event::ContextBlockUpdated {
            block,
            content,
            source,
            call_id,
        } => format!("{block} {source:?} {content:?} call={call_id:?}"),
        Event::TurnStarted { request_id, .. } => request_id.clone(),
        Event::TurnConfigured { config } => format!(
            "tools={:?} system={:?}",
            config.tool_names,
            config.system.as_deref().map(|s| s.len())
        ),
        Event::StepStarted { step } => format!("{step}"),
        Event::StepConfigured { step, .. } => format!("{step}"),
        Event::ToolCallStarted {
            call_id,
            tool,
            input,
            ..
        } => format!("{call_id} {tool} {input}"),
        Event::ToolDecided {
            call_id, action, ..
        } => format!("{call_id} {}", action.as_str()),
        Event::ToolCallFinished {
            call_id,
            success,
            output,
            error,
            ..
        } => format!("{call_id} success={success} output={output:?} error={error:?}"),
        Event::StepFinished { record } => {
            format!("{} {}", record.step, record.finish_reason.as_str())
        }
        Event::AssistantMessageSaved { message, .. } => {
            format!("{} {:?}", message.id, message.plain_text())
        }
        Event::UserMessagesSaved { messages, .. } => format!("{}", messages.len()),
        Event::TurnFinished { status, .. } => status.as_str().to_owned(),
        Event::CompactionApplied {
            reason,
            replaced_ids,
            ..
        } => format!("{reason:?} {replaced_ids:?}"),
        other => other.kind().to_owned(),
    };
    support::trace::line(env, &body)
}

fn soul(calls: Arc<AtomicU32>) -> ContextBlock {
    ContextBlock::provided(move || {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok("You are a helpful coding assistant.".to_owned()) }
    })
}

async fn say(session: &Session, id: &str, text: &str) -> mull::engine::TurnOutcome {
    session
        .save_messages(vec![UIMessage::user(id, text)], TurnOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn b02_the_cached_prompt_is_built_from_blocks_and_changes_only_when_a_block_does() {
    let model = ScriptedModel::builder("scripted-1")
        // Turn 1: the model remembers something, then answers.
        .step(|s| {
            s.tool_call(
                "call_1",
                UPDATE_CONTEXT_TOOL,
                json!({"block": "memory", "content": "Prefers tea."}),
            )
        })
        .step(|s| s.text("Noted."))
        // Turn 2: a write over the budget is refused as a tool error.
        .step(|s| {
            s.tool_call(
                "call_2",
                UPDATE_CONTEXT_TOOL,
                json!({"block": "memory", "content": "Prefers tea, green, at seven, never with milk."}),
            )
        })
        .step(|s| s.text("Too long to keep."))
        // Turn 3: nothing written.
        .step(|s| s.text("Tea it is."))
        .build();
    let provider_calls = Arc::new(AtomicU32::new(0));
    let calls = provider_calls.clone();
    let agent = Arc::new(Mem::new(&model, move |c| {
        c.with_context("soul", soul(calls.clone()))
            .with_context(
                "memory",
                ContextBlock::writable("Learned facts about the user.", 5),
            )
            .with_cached_prompt()
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    for (id, text) in [("u1", "I like tea."), ("u2", "More detail?"), ("u3", "So?")] {
        assert_eq!(
            say(&session, id, text).await.status,
            OutcomeStatus::Completed
        );
    }

    let systems: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.system.clone().unwrap_or_default())
        .collect();
    assert_eq!(systems.len(), 5);
    let empty_memory = "## soul\nYou are a helpful coding assistant.\n\n## memory\n\
                        Learned facts about the user.\n\
                        (Writable with the update_context tool; 0/5 tokens.)\n(empty)";
    let with_tea = "## soul\nYou are a helpful coding assistant.\n\n## memory\n\
                    Learned facts about the user.\n\
                    (Writable with the update_context tool; 3/5 tokens.)\nPrefers tea.";
    // A turn's prompt is fixed when it is configured: the write shows from the next turn, and
    // the refused write changes nothing, so turns 2 and 3 send the same bytes.
    assert_eq!(
        systems,
        [empty_memory, empty_memory, with_tea, with_tea, with_tea]
    );
    assert_eq!(
        *agent.seen_systems.lock().unwrap(),
        [empty_memory, with_tea, with_tea],
        "TurnContext::system is the assembled prompt"
    );
    assert_eq!(
        provider_calls.load(Ordering::SeqCst),
        1,
        "cached: the provider ran once"
    );
    let tools = &model.requests()[0].tools;
    assert_eq!(tools[0].name, UPDATE_CONTEXT_TOOL);
    assert_eq!(
        tools[0].input_schema["properties"]["block"]["enum"],
        json!(["memory"])
    );

    // Block values live in the log: a fold of the log alone gives the same values.
    let replayed = env.replayed().await.context_blocks;
    assert_eq!(replayed, session.context_blocks());
    assert_eq!(session.context_blocks()["memory"], "Prefers tea.");
    insta::assert_snapshot!("b02_cached_prompt", trace(&env).await);
}

#[tokio::test]
async fn without_a_cached_prompt_providers_run_every_turn_and_only_changes_are_recorded() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("1"))
        .step(|s| s.text("2"))
        .step(|s| s.text("3"))
        .build();
    let turn = Arc::new(AtomicU32::new(0));
    let agent = Arc::new(Mem::new(&model, move |c| {
        let turn = turn.clone();
        c.with_context(
            "clock",
            ContextBlock::provided(move || {
                let n = turn.fetch_add(1, Ordering::SeqCst);
                async move { Ok(format!("Day {}", n.div_ceil(2))) }
            })
            .with_description("What day it is."),
        )
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    for id in ["u1", "u2", "u3"] {
        say(&session, id, "What day is it?").await;
    }
    let systems: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.system.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        systems,
        [
            "## clock\nWhat day it is.\nDay 0",
            "## clock\nWhat day it is.\nDay 1",
            "## clock\nWhat day it is.\nDay 1"
        ]
    );
    let updates: Vec<(String, ContextBlockSource, Option<String>)> = env
        .events()
        .await
        .into_iter()
        .filter_map(|e| match e.event {
            Event::ContextBlockUpdated {
                content, source, ..
            } => Some((content, source, e.turn_id)),
            _ => None,
        })
        .collect();
    assert_eq!(
        updates,
        [
            (
                "Day 0".to_owned(),
                ContextBlockSource::Provider,
                Some("turn_1".to_owned())
            ),
            (
                "Day 1".to_owned(),
                ContextBlockSource::Provider,
                Some("turn_2".to_owned())
            ),
        ]
    );
}

#[tokio::test]
async fn b02_turn_config_system_replaces_the_block_prompt_and_no_blocks_means_the_agents() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("a"))
        .step(|s| s.text("b"))
        .build();
    let mut agent = Mem::new(&model, |c| {
        c.with_context(
            "soul",
            ContextBlock::provided(|| async { Ok("Be kind.".to_owned()) }),
        )
    });
    agent.before_turn = Some(Box::new(|ctx| {
        Some(TurnConfig {
            system: Some(format!("{}\n\nUser is editing: main.rs", ctx.system)),
            ..TurnConfig::default()
        })
    }));
    let env = new_env();
    let session = env.open(&Arc::new(agent)).await;
    say(&session, "u1", "hi").await;
    assert_eq!(
        model.requests()[0].system.as_deref(),
        Some("## soul\nBe kind.\n\nUser is editing: main.rs")
    );
    assert_eq!(
        session.context_prompt().as_deref(),
        Some("## soul\nBe kind.")
    );

    let plain = Arc::new(Mem::new(&model, |c| c));
    let env = new_env();
    let session = env.open(&plain).await;
    say(&session, "u1", "hi").await;
    assert_eq!(
        model.requests()[1].system.as_deref(),
        Some("You are terse.")
    );
    assert_eq!(session.context_prompt(), None);
    assert!(
        model.requests()[1].tools.is_empty(),
        "no writable block, no update_context"
    );
}

#[tokio::test]
async fn the_application_writes_blocks_within_their_budget() {
    let model = ScriptedModel::builder("scripted-1").build();
    let agent = Arc::new(Mem::new(&model, |c| {
        c.with_context("memory", ContextBlock::writable("Facts.", 4))
            .with_context("rules", ContextBlock::default().read_only())
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    session
        .set_context_block("rules", "No refunds.")
        .await
        .unwrap();
    session.set_context_block("memory", "Tea.").await.unwrap();
    let over = session
        .set_context_block("memory", "Tea, green, at seven, no milk.")
        .await
        .unwrap_err();
    assert!(
        matches!(
            over,
            ContextError::OverBudget {
                tokens: 8,
                max_tokens: 4,
                ..
            }
        ),
        "{over}"
    );
    let unknown = session.set_context_block("diary", "x").await.unwrap_err();
    assert_eq!(
        unknown.to_string(),
        "no context block \"diary\" (the session has: memory, rules)"
    );
    assert_eq!(session.context_blocks()["memory"], "Tea.");
    let prompt = session.context_prompt().unwrap();
    assert!(prompt.starts_with(
        "## memory\nFacts.\n(Writable with the update_context tool; 1/4 tokens.)\nTea."
    ));
    assert!(prompt.ends_with("## rules\nNo refunds."));
    let sources: Vec<ContextBlockSource> = env
        .events()
        .await
        .into_iter()
        .filter_map(|e| match e.event {
            Event::ContextBlockUpdated { source, .. } => Some(source),
            _ => None,
        })
        .collect();
    assert_eq!(sources, [ContextBlockSource::Application; 2]);
}

// ---------------------------------------------------------------------------------------------
// Search
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn search_finds_projected_messages_and_follows_compaction() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Green tea has less caffeine than coffee."))
        .step(|s| s.text("A marathon is 42.195 km."))
        .step(|s| s.text("Try oolong."))
        .build();
    let agent = Arc::new(Mem::new(&model, |c| {
        c.on_compaction(compact_function(CompactOptions {
            keep_head: 0,
            keep_tail: 2,
            summarize: summarizer(|_| async { Ok("They discussed green tea.".to_owned()) }),
        }))
    }));
    let env = new_env();
    let session = env.open(&agent).await;
    say(&session, "u1", "Is green tea strong?").await;
    say(&session, "u2", "How long is a marathon?").await;
    let hits = session.search("green tea", 10).unwrap();
    let found: Vec<(&str, Role)> = hits
        .iter()
        .map(|h| (h.message_id.as_str(), h.role))
        .collect();
    assert_eq!(found.len(), 2);
    assert!(found.contains(&("u1", Role::User)) && found.contains(&("msg_1", Role::Assistant)));
    let marathon = session.search("MARATHON", 10).unwrap();
    assert_eq!(marathon[0].message_id, "u2");
    assert_eq!(marathon[0].position, 2);
    assert_eq!(marathon[0].snippet, "How long is a [marathon]?");
    assert_eq!(session.search("marathon", 1).unwrap().len(), 1);
    assert!(session.search("espresso", 10).unwrap().is_empty());
    // New messages are found as soon as they are saved.
    say(&session, "u3", "Something like sencha?").await;
    assert_eq!(session.search("sencha", 10).unwrap()[0].message_id, "u3");
    // After a compaction the summary is found, the replaced messages are not.
    assert!(session.compact().await.unwrap());
    let hits = session.search("green tea", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].message_id, "summary_1");
    assert!(session.search("marathon", 10).unwrap().is_empty());
}

#[tokio::test]
async fn the_model_searches_the_conversation_with_the_search_tool() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Noted: your locker code is 4711."))
        .step(|s| {
            s.tool_call(
                "call_1",
                SEARCH_TOOL,
                json!({"query": "locker code", "limit": 3}),
            )
        })
        .step(|s| s.text("It is 4711."))
        .build();
    let agent = Arc::new(Mem::new(&model, |c| c.with_search_tool()));
    let env = new_env();
    let session = env.open(&agent).await;
    say(&session, "u1", "Remember my locker code: 4711.").await;
    say(&session, "u2", "What was my code for the locker?").await;
    let requests = model.requests();
    assert_eq!(requests[1].tools[0].name, SEARCH_TOOL);
    let result = env
        .events()
        .await
        .into_iter()
        .find_map(|e| match e.event {
            Event::ToolCallFinished { output, .. } => output,
            _ => None,
        })
        .unwrap();
    let ids: Vec<&str> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.contains(&"u1") && ids.contains(&"msg_1") && ids.contains(&"u2"));
    assert_eq!(
        session.state().messages.last().unwrap().plain_text(),
        "It is 4711."
    );
}
