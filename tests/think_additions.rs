//! What Think added after the seed (0.17–0.24), as a ported agent expects it: the
//! `configure_context` hook beside the older `configure_session` chain; `TurnContext`'s request
//! id, trigger and abort signal; the running turn inspectable from outside; a continuation's own
//! request id; `TurnConfig::message_metadata`; and `StepConfig::system` as system messages.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mull::core::{EntryPath, Event, LanguageModel, ModelMessage, ModelRole, StreamPart, UIMessage};
use mull::engine::{
    Agent, ContextBlock, ContextConfig, HookResult, MessageMetadata, OutcomeStatus,
    PrepareStepContext, SessionConfig, StepConfig, TurnConfig, TurnContext, TurnOptions,
};
use mull::providers::scripted::ScriptedModel;
use serde_json::json;
use support::test_log::TestLog;

/// Generous: only a broken build waits this long.
const BOUND: Duration = Duration::from_secs(30);

/// What the agent saw of each turn in `before_turn`.
#[derive(Debug, Clone)]
struct Seen {
    request_id: String,
    trigger: EntryPath,
    continuation: bool,
    system: String,
    aborted_while_waiting: bool,
}

#[derive(Default)]
struct Knobs {
    /// `before_turn` waits for the turn's abort signal (and says it saw it).
    wait_for_abort: bool,
    /// `before_turn` asks for message metadata.
    metadata: bool,
    /// `before_step` sends these as the step's system prompt.
    step_system: Option<Vec<ModelMessage>>,
}

struct Porter {
    model: Arc<dyn LanguageModel>,
    knobs: Knobs,
    seen: Mutex<Vec<Seen>>,
    waiting: tokio::sync::Notify,
}

impl Porter {
    fn new(model: &ScriptedModel, knobs: Knobs) -> Porter {
        Porter {
            model: Arc::new(model.clone()),
            knobs,
            seen: Mutex::new(Vec::new()),
            waiting: tokio::sync::Notify::new(),
        }
    }
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Agent for Porter {
    fn name(&self) -> &str {
        "porter"
    }
    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model)
    }
    fn system_prompt(&self) -> String {
        "never used: the session has blocks".into()
    }
    // The older chain: a block from configure_session.
    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        session.with_context(
            "soul",
            ContextBlock::provided(|| async { Ok("You carry bags.".to_owned()) }),
        )
    }
    // Think 0.24's hook: sees that block and adds its own.
    async fn configure_context(&self, context: ContextConfig) -> ContextConfig {
        assert_eq!(context.block_names(), ["soul"]);
        context.with_context(
            "house",
            ContextBlock::provided(|| async { Ok("The hotel is on the harbour.".to_owned()) }),
        )
    }
    async fn before_turn(&self, ctx: &TurnContext) -> HookResult<Option<TurnConfig>> {
        let mut aborted_while_waiting = false;
        if self.knobs.wait_for_abort {
            self.waiting.notify_one();
            // A hook doing slow work of its own stops with the turn.
            tokio::time::timeout(BOUND, ctx.abort.cancelled()).await?;
            aborted_while_waiting = true;
        }
        self.seen.lock().unwrap().push(Seen {
            request_id: ctx.request_id.clone(),
            trigger: ctx.trigger(),
            continuation: ctx.continuation,
            system: ctx.system.clone(),
            aborted_while_waiting,
        });
        if !self.knobs.metadata {
            return Ok(None);
        }
        Ok(Some(TurnConfig {
            message_metadata: Some(MessageMetadata::new(|part| {
                let mut keys = serde_json::Map::new();
                match part {
                    StreamPart::TextStart { .. } => {
                        keys.insert("phase".into(), json!("writing"));
                        keys.insert("lang".into(), json!("en"));
                    }
                    StreamPart::Finish { usage, .. } => {
                        keys.insert("phase".into(), json!("done"));
                        keys.insert("outputTokens".into(), json!(usage.output_tokens));
                    }
                    _ => return None,
                }
                Some(keys)
            })),
            ..TurnConfig::default()
        }))
    }
    async fn before_step(&self, _ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        Ok(self.knobs.step_system.clone().map(|list| StepConfig {
            system: Some(list.into()),
            ..StepConfig::default()
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configure_context_blocks_join_the_older_chains_and_build_the_prompt() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Welcome."))
        .step(|s| s.text("And again."))
        .build();
    let agent = Arc::new(Porter::new(&model, Knobs::default()));
    let log = TestLog::for_session("sess_ctx");
    let session = log.open(&agent).await;
    let first = session
        .save_messages(vec![UIMessage::user("u1", "hi")], TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(first.status, OutcomeStatus::Completed);
    let system = model.requests()[0].system.clone().unwrap_or_default();
    assert!(system.contains("You carry bags."), "{system}");
    assert!(system.contains("The hotel is on the harbour."), "{system}");
    assert!(system.find("bags") < system.find("harbour"), "block order");

    // A continuation gets its own request id, and the context says how the turn started.
    let next = session
        .continue_last_turn(TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(next.status, OutcomeStatus::Completed);
    assert_ne!(next.request_id, first.request_id);
    let seen = agent.seen();
    assert_eq!(seen[0].request_id, first.request_id);
    assert_eq!(seen[0].trigger, EntryPath::SaveMessages);
    assert!(!seen[0].continuation);
    assert_eq!(seen[1].request_id, next.request_id);
    assert_eq!(seen[1].trigger, EntryPath::ContinueLastTurn);
    assert!(seen[1].continuation);
    assert_eq!(seen[0].system, system);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_turn_is_inspectable_and_hooks_see_its_abort_signal() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("never"))
        .build();
    let agent = Arc::new(Porter::new(
        &model,
        Knobs {
            wait_for_abort: true,
            ..Knobs::default()
        },
    ));
    let log = TestLog::for_session("sess_active");
    let session = log.open(&agent).await;
    assert!(session.active_turn().is_none(), "nothing runs yet");
    let running = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .save_messages(vec![UIMessage::user("u1", "hi")], TurnOptions::default())
                .await
        }
    });
    tokio::time::timeout(BOUND, agent.waiting.notified())
        .await
        .expect("before_turn started");
    let active = session.active_turn().expect("a turn runs");
    assert_eq!(active.turn.entry, EntryPath::SaveMessages);
    assert_eq!(active.turn.status, mull::core::TurnStatus::Running);
    assert!(session.cancel_chat(&active.turn.request_id).unwrap());
    let out = tokio::time::timeout(BOUND, running)
        .await
        .expect("the turn ended")
        .unwrap()
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Aborted);
    assert_eq!(out.request_id, active.turn.request_id);
    let seen = agent.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].aborted_while_waiting,
        "the hook saw the abort signal"
    );
    assert!(session.active_turn().is_none(), "nothing runs any more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_metadata_is_shallow_merged_per_part_persisted_and_logged() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Your room is ready.").usage(12, 5))
        .build();
    let agent = Arc::new(Porter::new(
        &model,
        Knobs {
            metadata: true,
            ..Knobs::default()
        },
    ));
    let log = TestLog::for_session("sess_meta");
    let session = log.open(&agent).await;
    let out = session
        .save_messages(vec![UIMessage::user("u1", "hi")], TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    // Shallow merge: `phase` set twice keeps the later value, `lang` stays.
    let expected = json!({"phase": "done", "lang": "en", "outputTokens": 5});
    let message = out.message.expect("persisted");
    assert_eq!(message.metadata, Some(expected.clone()));
    let events = log.bare_events().await;
    let updates = events
        .iter()
        .filter(|e| matches!(e, Event::MessageMetadataUpdated { .. }))
        .count();
    assert_eq!(updates, 2, "one event per answered part");
    let saved = events.iter().find_map(|e| match e {
        Event::AssistantMessageSaved { message, .. } => message.metadata.clone(),
        _ => None,
    });
    assert_eq!(saved, Some(expected.clone()));
    // The projection rebuilt from the log alone agrees.
    let replayed = log.replayed().await;
    assert_eq!(replayed.messages.last().unwrap().metadata, Some(expected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_system_prompt_may_be_system_messages() {
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("Noted."))
        .build();
    let agent = Arc::new(Porter::new(
        &model,
        Knobs {
            step_system: Some(vec![
                ModelMessage::text(ModelRole::System, "Rule one."),
                ModelMessage::text(ModelRole::System, "Rule two."),
            ]),
            ..Knobs::default()
        },
    ));
    let log = TestLog::for_session("sess_sys");
    let session = log.open(&agent).await;
    let out = session
        .save_messages(vec![UIMessage::user("u1", "hi")], TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Completed);
    let request = &model.requests()[0];
    assert_eq!(
        request.system, None,
        "the messages replace the string prompt"
    );
    assert_eq!(
        request.messages[0],
        ModelMessage::text(ModelRole::System, "Rule one.")
    );
    assert_eq!(
        request.messages[1],
        ModelMessage::text(ModelRole::System, "Rule two.")
    );
    assert_eq!(request.messages[2].role, ModelRole::User);
    let recorded = log.bare_events().await.into_iter().find_map(|e| match e {
        Event::StepConfigured { system, .. } => system,
        _ => None,
    });
    assert_eq!(recorded.as_deref(), Some("Rule one.\n\nRule two."));

    // A message of another role there is a clear step failure.
    let model = ScriptedModel::builder("scripted-1")
        .step(|s| s.text("never"))
        .build();
    let agent = Arc::new(Porter::new(
        &model,
        Knobs {
            step_system: Some(vec![ModelMessage::text(ModelRole::User, "not a rule")]),
            ..Knobs::default()
        },
    ));
    let log = TestLog::for_session("sess_sys_bad");
    let session = log.open(&agent).await;
    let out = session
        .save_messages(vec![UIMessage::user("u1", "hi")], TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, OutcomeStatus::Error);
    let error = out.error.unwrap().message;
    assert!(error.contains("only system messages"), "{error}");
    assert!(model.requests().is_empty(), "the model was never called");
}
