//! A scripted agent for the server's tests, end-to-end run and load bench: the Scripted model
//! plays a script chosen by the chat id's prefix, with one server tool (`weather`), one
//! streaming server tool (`progress`) and one client tool (`get_location`) — and, in
//! `approve-` chats, `book`, which waits for a person's approval. `overflow-` chats
//! also recover from context overflow (compact the middle of the history, then retry).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mull_core::{
    default_context_overflow_classifier, ChatErrorClassification, LanguageModel, ToolSpec,
};
use mull_engine::{
    compact_function, summarizer, Agent, ChatError, ChatErrorContext, CompactOptions, FnTool,
    SessionConfig, ToolSet,
};
use mull_providers::scripted::ScriptedModel;
use serde::Deserialize;
use serde_json::{json, Value};

/// The agent: a scripted model and three tools.
pub struct ScriptAgent {
    model: ScriptedModel,
    recover_overflow: bool,
    /// `approve-` chats also have `book`, a tool whose every call waits for approval.
    bookings: bool,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Hotel {
    hotel: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Steps {
    steps: u32,
}

impl ScriptAgent {
    /// The agent of chat `chat_id` (see [`script_for`]).
    pub fn for_chat(chat_id: &str) -> Arc<dyn Agent> {
        Arc::new(ScriptAgent {
            model: script_for(chat_id),
            recover_overflow: chat_id.starts_with("overflow-"),
            bookings: chat_id.starts_with("approve-"),
        })
    }
}

#[async_trait::async_trait]
impl Agent for ScriptAgent {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }

    async fn configure_session(&self, session: SessionConfig) -> SessionConfig {
        if !self.recover_overflow {
            return session;
        }
        let summarize = summarizer(|_prompt| async { Ok("Earlier: small talk.".to_owned()) });
        session
            .context_overflow(true, 1)
            .on_compaction(compact_function(CompactOptions {
                keep_head: 1,
                keep_tail: 1,
                summarize,
            }))
    }

    fn classify_chat_error(
        &self,
        error: &ChatError,
        _ctx: &ChatErrorContext,
    ) -> Option<ChatErrorClassification> {
        default_context_overflow_classifier(error.as_error_input())
    }

    fn tools(&self) -> ToolSet {
        let weather = FnTool::new(
            "weather",
            "Current weather in a city",
            |input: City, _| async move {
                Ok::<Value, mull_engine::ToolError>(
                    json!({"city": input.city, "sky": "sunny", "celsius": 21}),
                )
            },
        );
        let progress = FnTool::streaming("progress", "Reports progress", |input: Steps, _| {
            futures::stream::iter((1..=input.steps).map(|i| Ok(json!({"done": i})))).boxed()
        });
        let tools = ToolSet::new()
            .with(Arc::new(weather))
            .with(Arc::new(progress))
            .with_client(ToolSpec {
                name: "get_location".to_owned(),
                description: "The user's location, answered by the client".to_owned(),
                input_schema: json!({"type": "object", "properties": {}}).into(),
            });
        if !self.bookings {
            return tools;
        }
        let book = FnTool::new("book", "Books a hotel", |input: Hotel, _| async move {
            Ok::<Value, mull_engine::ToolError>(json!({"booked": input.hotel}))
        })
        .needs_approval(true);
        tools.with(Arc::new(book))
    }
}

/// How many text deltas a `slow-` chat streams, one every [`SLOW_DELAY`].
pub const SLOW_DELTAS: usize = 60;
/// The pause before each part of a `slow-` chat.
pub const SLOW_DELAY: Duration = Duration::from_millis(40);
/// How many text deltas a `load-` chat streams.
pub const LOAD_DELTAS: usize = 50;
/// How long the second turn of a `race-` chat pauses before its text.
pub const RACE_PAUSE: Duration = Duration::from_millis(1500);

/// The script of a chat, by the prefix of its id:
/// - `text-`: reasoning, then "Hello, world!" in three deltas.
/// - `tool-`: a `weather` call, a `progress` call (3 preliminary results), then an answer.
/// - `client-`: a `get_location` call the client answers; the continuation answers with it.
/// - `slow-`: [`SLOW_DELTAS`] deltas, [`SLOW_DELAY`] apart (for resume and cancel).
/// - `load-`: [`LOAD_DELTAS`] deltas, no pause.
/// - `regen-`: "First answer.", then (regenerated) "Second answer.".
/// - `overflow-`: two answers ("A0", "A1"), then a context-overflow refusal, then "Recovered."
///   (the retry after compaction).
/// - `race-`: a `get_location` call; then a turn that pauses [`RACE_PAUSE`] before "Slow.";
///   then "Unrelated."; then "You are in Berlin.".
/// - `approve-`: two `book` calls (each waits for approval), then "Done." once both are
///   answered.
/// - anything else: one text "ok".
pub fn script_for(chat_id: &str) -> ScriptedModel {
    let builder = ScriptedModel::builder("scripted-1");
    let prefix = chat_id.split('-').next().unwrap_or_default();
    match prefix {
        "text" => builder
            .step(|s| {
                s.reasoning("The user greets me.")
                    .text_deltas(["Hello", ", ", "world!"])
            })
            .build(),
        "tool" => builder
            .step(|s| {
                s.tool_call("call_weather", "weather", json!({"city": "Paris"}))
                    .tool_call("call_progress", "progress", json!({"steps": 3}))
            })
            .step(|s| s.text("It is sunny in Paris."))
            .build(),
        "client" => builder
            .step(|s| s.tool_call("call_location", "get_location", json!({})))
            .step(|s| s.text("You are in Berlin."))
            .build(),
        "slow" => builder
            .part_delay(SLOW_DELAY)
            .step(|s| s.text_deltas((0..SLOW_DELTAS).map(|i| format!("w{i} "))))
            .build(),
        "load" => builder
            .step(|s| s.text_deltas((0..LOAD_DELTAS).map(|i| format!("w{i} "))))
            .build(),
        "regen" => builder
            .step(|s| s.text("First answer."))
            .step(|s| s.text("Second answer."))
            .build(),
        "overflow" => builder
            .step(|s| s.text("A0"))
            .step(|s| s.text("A1"))
            .refuse_context_overflow()
            .step(|s| s.text("Recovered."))
            .build(),
        "race" => builder
            .step(|s| s.tool_call("call_location", "get_location", json!({})))
            .step(|s| s.pause(RACE_PAUSE).text("Slow."))
            .step(|s| s.text("Unrelated."))
            .step(|s| s.text("You are in Berlin."))
            .build(),
        "approve" => builder
            .step(|s| {
                s.tool_call("call_ritz", "book", json!({"hotel": "Ritz"}))
                    .tool_call("call_savoy", "book", json!({"hotel": "Savoy"}))
            })
            .step(|s| s.text("Done."))
            .build(),
        _ => builder.step(|s| s.text("ok")).build(),
    }
}
