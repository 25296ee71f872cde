//! A built-in demo: a travel-desk agent on the Scripted model that plays three turns with
//! realistic pacing — an answer with reasoning, two tools (one of them streaming its progress)
//! in one turn, and a call its `before_tool_call` policy blocks — so a dashboard or a log
//! reader has something real to show without an API key.
//!
//! With [`DemoOptions::deterministic`] the demo uses a ticking clock, counting ids and no
//! pacing, so it writes the same log bytes every run (the `fixtures/demo.jsonl` fixture).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use futures::StreamExt;
use mull_core::{Clock, IdSource, LanguageModel, RandomIds, SequentialIds, SystemClock, UIMessage};
use mull_engine::{
    Agent, EngineError, FnTool, HookResult, OutcomeStatus, Session, SessionOptions,
    ToolCallContext, ToolCallDecision, ToolError, ToolSet, TurnOptions,
};
use mull_providers::scripted::ScriptedModel;
use mull_store::Log;
use serde::Deserialize;

use crate::policy::{Guarded, ToolPolicy};
use serde_json::{json, Value};

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Ticking clock from the fixture epoch, counting ids, no pacing: the same bytes every run.
    pub deterministic: bool,
    /// The session the demo writes.
    pub session_id: String,
    /// Delay between streamed parts when not deterministic.
    pub part_delay: Duration,
    /// A stricter tool policy over the demo agent's own (see [`crate::policy`]).
    pub policy: Option<ToolPolicy>,
}

impl Default for DemoOptions {
    fn default() -> DemoOptions {
        DemoOptions {
            deterministic: false,
            session_id: "demo".to_owned(),
            part_delay: Duration::from_millis(35),
            policy: None,
        }
    }
}

/// One turn the demo ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoTurn {
    pub request_id: String,
    pub status: OutcomeStatus,
}

/// What the demo did.
#[derive(Debug, Clone)]
pub struct DemoReport {
    pub session_id: String,
    pub turns: Vec<DemoTurn>,
    /// How many events the session holds afterwards.
    pub events: u64,
}

/// Why the demo could not finish.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("demo session {session_id}: {source}")]
    Engine {
        session_id: String,
        #[source]
        source: EngineError,
    },
    #[error("demo turn {request_id} ended as {status:?}: {error}")]
    Turn {
        request_id: String,
        status: OutcomeStatus,
        error: String,
    },
}

/// A deterministic clock that moves forward a fixed step each time it is read, so recorded
/// logs have distinct, increasing timestamps and still come out the same on every run.
#[derive(Debug)]
pub struct TickingClock {
    micros: AtomicI64,
    step_micros: i64,
}

impl TickingClock {
    /// A clock at 2025-01-01T00:00:00Z moving `step` per read.
    pub fn from_fixture_epoch(step: Duration) -> TickingClock {
        let start = Utc
            .with_ymd_and_hms(2025, 1, 1, 0, 0, 0)
            .single()
            .unwrap_or_default();
        TickingClock {
            micros: AtomicI64::new(start.timestamp_micros()),
            step_micros: i64::try_from(step.as_micros()).unwrap_or(1_000),
        }
    }
}

impl Clock for TickingClock {
    fn now(&self) -> DateTime<Utc> {
        let micros = self.micros.fetch_add(self.step_micros, Ordering::SeqCst);
        DateTime::from_timestamp_micros(micros).unwrap_or_default()
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
struct WeatherInput {
    /// The city to forecast.
    city: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct SearchInput {
    /// What to look for in the travel guides.
    query: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct CancelInput {
    /// The booking reference.
    booking: String,
}

/// The demo's agent: a travel desk with a forecast, a guide search and a booking canceller
/// that its policy never lets run.
struct TravelDesk {
    model: ScriptedModel,
    paced: bool,
}

#[async_trait]
impl Agent for TravelDesk {
    fn name(&self) -> &str {
        "travel-desk"
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }

    fn system_prompt(&self) -> String {
        "You are a concise travel desk. Use tools for facts; never cancel bookings yourself."
            .to_owned()
    }

    fn tools(&self) -> ToolSet {
        let paced = self.paced;
        let weather = FnTool::new(
            "weather",
            "Three-day forecast for a city.",
            move |input: WeatherInput, _| async move {
                if paced {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Ok::<Value, ToolError>(json!({
                    "city": input.city,
                    "days": [
                        {"day": "Fri", "high_c": 24, "sky": "sun"},
                        {"day": "Sat", "high_c": 22, "sky": "cloud"},
                        {"day": "Sun", "high_c": 19, "sky": "rain"}
                    ]
                }))
            },
        )
        .shared();
        let search = FnTool::streaming(
            "search_guides",
            "Searches the travel guides; reports progress while it reads.",
            move |input: SearchInput, _| {
                let query = input.query;
                futures::stream::iter(0..3)
                    .then(move |i| {
                        let query = query.clone();
                        async move {
                            if paced {
                                tokio::time::sleep(Duration::from_millis(250)).await;
                            }
                            Ok::<Value, ToolError>(match i {
                                0 => json!({"status": "searching", "guides_read": 1}),
                                1 => json!({"status": "searching", "guides_read": 4}),
                                _ => json!({
                                    "status": "done",
                                    "query": query,
                                    "results": [
                                        {"title": "Lisbon in three days", "url": "https://guides.example/lisbon-3-days"},
                                        {"title": "Alfama on foot", "url": "https://guides.example/alfama"}
                                    ]
                                }),
                            })
                        }
                    })
                    .boxed()
            },
        )
        .shared();
        let cancel = FnTool::new(
            "cancel_booking",
            "Cancels a booking by reference.",
            |input: CancelInput, _| async move {
                Ok::<Value, ToolError>(json!({"cancelled": input.booking}))
            },
        )
        .shared();
        ToolSet::new().with(weather).with(search).with(cancel)
    }

    async fn before_tool_call(
        &self,
        ctx: &ToolCallContext,
    ) -> HookResult<Option<ToolCallDecision>> {
        if ctx.tool_name == "cancel_booking" {
            return Ok(Some(ToolCallDecision::Block {
                reason: Some(
                    "Cancelling bookings needs a human: ask the user to confirm in the app."
                        .to_owned(),
                ),
            }));
        }
        Ok(None)
    }
}

/// The model's script for the three turns.
fn script(part_delay: Duration) -> ScriptedModel {
    ScriptedModel::builder("scripted-travel-1")
        .part_delay(part_delay)
        // A session reopened with a fresh agent (a new process, a server that evicted it)
        // carries on with the turn its conversation has reached.
        .by_conversation()
        // Turn 1: a plain answer with reasoning.
        .step(|s| {
            s.reasoning("The user wants a quick sense of Lisbon; no tool needed for that.")
                .text_deltas([
                    "Lisbon is a hilly, sunny city ",
                    "on the Tagus: trams, tiled façades, ",
                    "and custard tarts in Belém.",
                ])
                .usage(412, 58)
        })
        // Turn 2: two tools in one step, then the answer with a citation.
        .step(|s| {
            s.reasoning("Forecast first, and the guides for a walking plan.")
                .text("Checking the forecast and the guides.")
                .tool_call("call_weather_1", "weather", json!({"city": "Lisbon"}))
                .tool_call(
                    "call_search_1",
                    "search_guides",
                    json!({"query": "Lisbon weekend walk"}),
                )
                .usage(690, 74)
        })
        .step(|s| {
            s.text_deltas([
                "Friday is the sunny one (24 °C): walk Alfama in the morning. ",
                "Saturday turns cloudy, good for museums; ",
                "pack a jacket for Sunday's rain.",
            ])
            .source_url(
                "src_1",
                "https://guides.example/alfama",
                Some("Alfama on foot"),
            )
            .usage(1184, 66)
        })
        // Turn 3: a call the policy blocks, then the explanation.
        .step(|s| {
            s.tool_call(
                "call_cancel_1",
                "cancel_booking",
                json!({"booking": "LIS-2291"}),
            )
            .usage(1320, 31)
        })
        .step(|s| {
            s.text_deltas([
                "I can't cancel bookings myself. ",
                "Please confirm the cancellation of LIS-2291 in the app.",
            ])
            .usage(1402, 29)
        })
        .build()
}

/// The demo's agent, unpaced: what a recorded demo session is re-executed against.
pub fn agent() -> Arc<dyn Agent> {
    Arc::new(TravelDesk {
        model: script(Duration::ZERO),
        paced: false,
    })
}

/// The demo's agent, unpaced, with `policy` over its own tool policy.
pub fn guarded_agent(policy: ToolPolicy) -> Arc<dyn Agent> {
    Arc::new(Guarded::new(agent(), policy))
}

/// Runs the demo's three turns into `log` under `options.session_id`.
pub async fn run(log: &Log, options: DemoOptions) -> Result<DemoReport, DemoError> {
    let session_id = options.session_id.clone();
    let engine_err = |source| DemoError::Engine {
        session_id: session_id.clone(),
        source,
    };
    let paced = !options.deterministic;
    let part_delay = if paced {
        options.part_delay
    } else {
        Duration::ZERO
    };
    let agent: Arc<dyn Agent> = Arc::new(TravelDesk {
        model: script(part_delay),
        paced,
    });
    let agent = match options.policy {
        Some(policy) => Arc::new(Guarded::new(agent, policy)),
        None => agent,
    };
    let mut session_options = SessionOptions::new(session_id.clone());
    session_options.metadata = json!({"demo": true});
    if options.deterministic {
        session_options = session_options
            .with_clock(Arc::new(TickingClock::from_fixture_epoch(
                Duration::from_millis(1),
            )))
            .with_ids(Arc::new(SequentialIds::new()));
    } else {
        session_options = session_options
            .with_clock(Arc::new(SystemClock))
            .with_ids(Arc::new(RandomIds));
    }
    let session = Session::open(log, agent, session_options)
        .await
        .map_err(engine_err)?;
    let prompts = [
        ("u_1", "What's Lisbon like, in one breath?"),
        (
            "u_2",
            "I'm there this weekend. Weather, and a walk from the guides?",
        ),
        ("u_3", "Actually, cancel my booking LIS-2291."),
    ];
    let mut turns = Vec::new();
    for (id, text) in prompts {
        let message_id = if options.deterministic {
            id.to_owned()
        } else {
            RandomIds.next_id("msg")
        };
        let outcome = session
            .save_messages(
                vec![UIMessage::user(message_id, text)],
                TurnOptions::default(),
            )
            .await
            .map_err(engine_err)?;
        if outcome.status != OutcomeStatus::Completed {
            return Err(DemoError::Turn {
                request_id: outcome.request_id,
                status: outcome.status,
                error: outcome.error.map(|e| e.message).unwrap_or_default(),
            });
        }
        turns.push(DemoTurn {
            request_id: outcome.request_id,
            status: outcome.status,
        });
    }
    let events = session.read_state(|s| s.last_seq);
    Ok(DemoReport {
        session_id,
        turns,
        events,
    })
}
