//! A built-in demo: a travel-desk agent on the Scripted model that plays seven turns paced like
//! a real model — a moment before the first token, then words at a few tens of tokens per
//! second, tools that take their time (one streams its progress, one is slow enough to show
//! as a stall), a call its `before_tool_call` policy blocks, a pause mid-answer, a question
//! it hands to a research sub-agent (a child session in the same log), and a hotel booking
//! that waits for a person's approval — with the user "typing" between turns, so a dashboard
//! has something live to show without an API key.
//!
//! The booking's approval comes through the log's inbox ([`mull_store::inbox`]), as an answer
//! from the dashboard does: the demo waits up to [`DemoOptions::approval_wait`] for a person
//! (`a` in `mull dash`), taking the inbox as it waits — having told
//! [`DemoOptions::on_approval_wait`] when it will stop — and then posts the approval itself,
//! named in the log as its answerer (`by`), so nobody mistakes it for a person's. A
//! deterministic run posts it at once.
//!
//! With [`DemoOptions::deterministic`] the demo uses a ticking clock, counting ids and no
//! pacing, so it writes the same log bytes every run (the `fixtures/demo.jsonl` fixture);
//! [`DemoOptions::fast`] keeps the real clock and ids but skips the pacing.

mod script;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use futures::StreamExt;
use mull_core::{
    Clock, IdSource, LanguageModel, ModelContent, ModelMessage, RandomIds, SequentialIds,
    SystemClock, UIMessage,
};
use mull_engine::{
    Agent, AgentTool, CommandOptions, EngineError, FnTool, HookResult, ModelChoice, OutcomeStatus,
    PrepareStepContext, Reply, Session, SessionOptions, StepConfig, ToolCallContext,
    ToolCallDecision, ToolError, ToolSet, TurnOptions, TurnOutcome,
};
use mull_providers::scripted::ScriptedModel;
use mull_store::{
    EventLog, Inbox, InboxMessage, InboxStore, Log, PendingApproval, INBOX_SWEEP_PERIOD,
};
use serde::Deserialize;

use crate::policy::{Guarded, ToolPolicy};
use script::{research_script, script, words};
use serde_json::{json, Value};

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Ticking clock from the fixture epoch, counting ids, no pacing: the same bytes every run.
    pub deterministic: bool,
    /// The session the demo writes.
    pub session_id: String,
    /// Delay between streamed parts when paced.
    pub part_delay: Duration,
    /// A stricter tool policy over the demo agent's own (see [`crate::policy`]).
    pub policy: Option<ToolPolicy>,
    /// No pacing (real clock and ids): the whole demo in a moment.
    pub fast: bool,
    /// How long the booking's approval waits for a person before the demo approves it
    /// itself (zero: at once; a deterministic run always approves at once).
    pub approval_wait: Duration,
    /// Told when the demo starts waiting for a person's approval (the CLI prints it, or
    /// announces it on the dashboard).
    pub on_approval_wait: Option<ApprovalNotice>,
    /// MCP servers (or other outside tool sources) whose tools join the demo session's turns
    /// beside the travel desk's own. The scripted model calls only its own tools; the turns'
    /// `turn_configured` events list the servers' tools.
    pub tool_sources: ToolSources,
    /// A budget laid over the travel desk's (it sets none): a turn that reaches it ends the
    /// demo with that turn's budget error.
    pub budget: Option<mull_engine::Budget>,
    /// Raised to stop the demo early (the dashboard quit): it ends after the turn in
    /// progress, leaving a waiting approval unanswered.
    pub stop: Option<Arc<AtomicBool>>,
}

/// Outside tool sources for a session (see [`DemoOptions::tool_sources`]).
#[derive(Clone, Default)]
pub struct ToolSources(pub Vec<Arc<dyn mull_engine::ToolSource>>);

impl std::fmt::Debug for ToolSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|s| s.name()).collect();
        f.debug_tuple("ToolSources").field(&names).finish()
    }
}

/// What an [`ApprovalNotice`] calls: the approval waited for, and when (by the session's
/// clock) and as whom the demo approves it itself if nobody answers.
pub type NoticeFn = dyn Fn(&PendingApproval, &SelfApproval) + Send + Sync;

/// The demo's plan for an approval nobody answers: it approves the call itself at `at`,
/// recorded as answered `by` (so the log tells it from a person's answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfApproval {
    /// When the demo stops waiting, by the session's clock.
    pub at: DateTime<Utc>,
    /// How long it waits from the request.
    pub wait: Duration,
    /// The answerer the log names.
    pub by: String,
}

/// A callback told about an approval the demo waits for, and when it approves it itself.
#[derive(Clone)]
pub struct ApprovalNotice(pub Arc<NoticeFn>);

impl std::fmt::Debug for ApprovalNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalNotice")
    }
}

/// How long the paced demo waits for a person to answer the booking's approval: long enough
/// to read the screen, find the call and press `a` then `y`.
pub const APPROVAL_WAIT: Duration = Duration::from_secs(60);

/// How long the user "types" before the next turn, when paced.
const TYPING: Duration = Duration::from_millis(1800);

impl Default for DemoOptions {
    fn default() -> DemoOptions {
        DemoOptions {
            deterministic: false,
            session_id: "demo".to_owned(),
            part_delay: Duration::from_millis(35),
            policy: None,
            fast: false,
            approval_wait: APPROVAL_WAIT,
            on_approval_wait: None,
            tool_sources: ToolSources::default(),
            budget: None,
            stop: None,
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
    /// Stopped early ([`DemoOptions::stop`]) before its seven turns.
    pub stopped: bool,
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
    #[error("demo session {session_id}: the inbox: {source}")]
    Inbox {
        session_id: String,
        #[source]
        source: mull_store::StoreError,
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
struct HotelInput {
    /// The city to stay in.
    city: String,
    /// A neighbourhood to be close to.
    near: String,
    /// How many nights.
    nights: u32,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct BookInput {
    /// The hotel to book.
    hotel: String,
    /// How many nights.
    nights: u32,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct CancelInput {
    /// The booking reference.
    booking: String,
}

/// The demo's agent: a travel desk with a forecast, a guide search, a hotel booking that a
/// person approves, and a booking canceller that its policy never lets run.
struct TravelDesk {
    model: ScriptedModel,
    paced: bool,
    /// The research sub-agent the `research` tool asks.
    researcher: Arc<dyn Agent>,
}

#[async_trait]
impl Agent for TravelDesk {
    fn name(&self) -> &str {
        AGENT_NAME
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }

    fn system_prompt(&self) -> String {
        "You are a concise travel desk. Use tools for facts; never cancel bookings yourself."
            .to_owned()
    }

    /// After the booking was declined (by a person, or blocked by a policy), the closing step
    /// says so instead of the scripted confirmation (a declined call reaches the model as its
    /// reason, with no reference).
    async fn before_step(&self, ctx: &PrepareStepContext) -> HookResult<Option<StepConfig>> {
        if !booking_declined(&ctx.messages) {
            return Ok(None);
        }
        let declined = ScriptedModel::builder(self.model.model_id())
            .provider(self.model.provider())
            .step(|s| {
                s.text_deltas(words(
                    "The booking did not go through, so nothing is reserved at Casa do \
                     Largo. Say the word if you want another hotel.",
                ))
                .usage(1720, 18)
            })
            .build();
        Ok(Some(StepConfig {
            model: Some(ModelChoice::Model(Arc::new(declined))),
            ..StepConfig::default()
        }))
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
        let search = search_guides(paced);
        let hotels = FnTool::new(
            "find_hotels",
            "Looks up hotels with rooms free; slow, like the booking sites it asks.",
            move |input: HotelInput, _| async move {
                if paced {
                    tokio::time::sleep(Duration::from_millis(1900)).await;
                }
                Ok::<Value, ToolError>(json!({
                    "city": input.city,
                    "near": input.near,
                    "nights": input.nights,
                    "hotels": [
                        {"name": "Casa do Largo", "from_eur": 140},
                        {"name": "Memmo Alfama", "from_eur": 260}
                    ]
                }))
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
        let research = AgentTool::new(
            "research",
            "Asks the research desk a travel question; it reads the guides and answers.",
            Arc::clone(&self.researcher),
        )
        .shared();
        ToolSet::new()
            .with(weather)
            .with(search)
            .with(hotels)
            .with(book_hotel())
            .with(cancel)
            .with(research)
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

/// The guide search both agents use: streams two progress reports, then its results.
fn search_guides(paced: bool) -> std::sync::Arc<dyn mull_engine::Tool> {
    FnTool::streaming(
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
.shared()
}

/// The demo's research sub-agent: the travel desk's `research` tool asks it, and it reads the
/// guides before it answers (see [`mull_engine::subagent`]).
struct Researcher {
    model: ScriptedModel,
    paced: bool,
}

#[async_trait]
impl Agent for Researcher {
    fn name(&self) -> &str {
        RESEARCH_AGENT_NAME
    }

    fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::new(self.model.clone())
    }

    fn system_prompt(&self) -> String {
        "You research one travel question in the guides and answer it in a sentence or two."
            .to_owned()
    }

    fn tools(&self) -> ToolSet {
        ToolSet::new().with(search_guides(self.paced))
    }
}

/// The research sub-agent's name in the log.
pub const RESEARCH_AGENT_NAME: &str = "travel-research";

/// The research sub-agent, unpaced: what a recorded research session is re-executed against.
pub fn research_agent() -> Arc<dyn Agent> {
    Arc::new(Researcher {
        model: research_script(Duration::ZERO, false),
        paced: false,
    })
}

/// The booking tool: every call waits for a person's approval (its `needs_approval` rule).
fn book_hotel() -> std::sync::Arc<dyn mull_engine::Tool> {
    FnTool::new(
        "book_hotel",
        "Books a hotel room; a person approves every booking.",
        |input: BookInput, _| async move {
            Ok::<Value, ToolError>(json!({
                "booked": input.hotel,
                "nights": input.nights,
                "reference": "LIS-3107"
            }))
        },
    )
    .needs_approval(true)
    .shared()
}

/// Whether the model is about to answer a declined booking: the last message holds
/// `book_hotel`'s result, and no booking reference came back.
fn booking_declined(messages: &[ModelMessage]) -> bool {
    let Some(last) = messages.last() else {
        return false;
    };
    last.content.iter().any(|part| {
        matches!(part, ModelContent::ToolResult { tool_name, output, .. }
            if tool_name == "book_hotel" && output.get("reference").is_none())
    })
}

/// The demo agent's name in the log.
pub const AGENT_NAME: &str = "travel-desk";

/// The demo's agent, unpaced: what a recorded demo session is re-executed against.
pub fn agent() -> Arc<dyn Agent> {
    Arc::new(TravelDesk {
        model: script(Duration::ZERO, false),
        paced: false,
        researcher: research_agent(),
    })
}

/// The demo's agent, unpaced, with `policy` over its own tool policy.
pub fn guarded_agent(policy: ToolPolicy) -> Arc<dyn Agent> {
    Arc::new(Guarded::new(agent(), policy))
}

/// Runs the demo's seven turns into `log` under `options.session_id`, answering the booking's
/// approval through the log's inbox (see the module docs).
pub async fn run(log: &Log, options: DemoOptions) -> Result<DemoReport, DemoError> {
    let inbox = Inbox::open(log.path()).map_err(|source| DemoError::Inbox {
        session_id: options.session_id.clone(),
        source,
    })?;
    run_on(Arc::new(log.clone()), &inbox, options).await
}

/// [`run`] on any log and its inbox (a PostgreSQL log and its `mull_inbox`, say).
pub async fn run_on(
    log: Arc<dyn EventLog>,
    inbox: &dyn InboxStore,
    options: DemoOptions,
) -> Result<DemoReport, DemoError> {
    let session_id = options.session_id.clone();
    let engine_err = |source| DemoError::Engine {
        session_id: session_id.clone(),
        source,
    };
    let paced = !options.deterministic && !options.fast;
    let part_delay = if paced {
        options.part_delay
    } else {
        Duration::ZERO
    };
    let agent: Arc<dyn Agent> = Arc::new(TravelDesk {
        model: script(part_delay, paced),
        paced,
        researcher: Arc::new(Researcher {
            model: research_script(part_delay, paced),
            paced,
        }),
    });
    let agent = match options.policy.clone() {
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
    for source in &options.tool_sources.0 {
        session_options = session_options.with_mcp_server(Arc::clone(source));
    }
    if let Some(budget) = &options.budget {
        session_options = session_options.with_budget(budget.clone());
    }
    let clock = Arc::clone(&session_options.clock);
    let session = Session::open_on(log, agent, session_options)
        .await
        .map_err(engine_err)?;
    let prompts = [
        ("u_1", "What's Lisbon like, in one breath?"),
        (
            "u_2",
            "I'm there this weekend. Weather, and a walk from the guides?",
        ),
        ("u_3", "Somewhere to stay near Alfama for two nights?"),
        ("u_4", "Actually, cancel my booking LIS-2291."),
        ("u_5", "What should I pack for the rain?"),
        ("u_6", "Can your researcher find the tram to Belém?"),
        ("u_7", "Book Casa do Largo for the two nights."),
    ];
    let mut turns = Vec::new();
    // Answers posted while no writer ran (a session reopened) are taken first.
    for reply in session
        .take_inbox(inbox, CommandOptions::default())
        .await
        .map_err(engine_err)?
    {
        if let Reply::Turn(outcome) = reply {
            turns.push(completed(*outcome).map_err(|e| *e)?);
        }
    }
    let stopped = || {
        options
            .stop
            .as_ref()
            .is_some_and(|stop| stop.load(Ordering::SeqCst))
    };
    for (index, (id, text)) in prompts.into_iter().enumerate() {
        if paced && index > 0 {
            tokio::time::sleep(TYPING).await;
        }
        if stopped() {
            break;
        }
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
        turns.push(completed(outcome).map_err(|e| *e)?);
        let wait = if options.deterministic {
            Duration::ZERO
        } else {
            options.approval_wait
        };
        for outcome in approve(&session, inbox, clock.as_ref(), wait, &options, &stopped).await? {
            turns.push(completed(outcome).map_err(|e| *e)?);
        }
    }
    let events = session.read_state(|s| s.last_seq);
    Ok(DemoReport {
        session_id,
        turns,
        events,
        stopped: stopped(),
    })
}

/// Answers the approvals the last turn left waiting, through the inbox: a person has `wait` to
/// answer from the dashboard (the inbox is taken as it waits); then (at once when `wait` is
/// zero) the demo posts the approval itself, named as its answerer — unless it was stopped
/// meanwhile, which leaves the call waiting. Returns the continuations' outcomes.
async fn approve(
    session: &Session,
    inbox: &dyn InboxStore,
    clock: &dyn Clock,
    wait: Duration,
    options: &DemoOptions,
    stopped: &dyn Fn() -> bool,
) -> Result<Vec<TurnOutcome>, DemoError> {
    let engine_err = |source| DemoError::Engine {
        session_id: session.id().to_owned(),
        source,
    };
    let inbox_err = |source| DemoError::Inbox {
        session_id: session.id().to_owned(),
        source,
    };
    let mut outcomes = Vec::new();
    let mut take = |replies: Vec<Reply>| {
        outcomes.extend(replies.into_iter().filter_map(|reply| match reply {
            Reply::Turn(outcome) => Some(*outcome),
            _ => None,
        }))
    };
    let pending = session.pending_approvals();
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let by = self_approver(wait);
    if !wait.is_zero() {
        if let Some(notice) = &options.on_approval_wait {
            let plan = SelfApproval {
                at: clock.now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX),
                wait,
                by: by.clone(),
            };
            for p in &pending {
                (notice.0)(p, &plan);
            }
        }
        let start = tokio::time::Instant::now();
        while !session.pending_approvals().is_empty() && start.elapsed() < wait {
            if stopped() {
                return Ok(outcomes);
            }
            tokio::time::sleep(INBOX_SWEEP_PERIOD.min(Duration::from_millis(200))).await;
            take(
                session
                    .take_inbox(inbox, CommandOptions::default())
                    .await
                    .map_err(engine_err)?,
            );
        }
    }
    // Nobody answered (or nobody was asked): the demo is the person who approves.
    for p in session.pending_approvals() {
        let answer = InboxMessage::ApprovalAnswer {
            approval_id: p.approval_id.clone(),
            approved: true,
            reason: None,
            by: Some(by.clone()),
        };
        inbox
            .post(session.id(), &answer, clock.now())
            .await
            .map_err(inbox_err)?;
    }
    take(
        session
            .take_inbox(inbox, CommandOptions::default())
            .await
            .map_err(engine_err)?,
    );
    Ok(outcomes)
}

/// Who the log says approved a call nobody answered: the demo itself, and after how long.
fn self_approver(wait: Duration) -> String {
    if wait.is_zero() {
        "mull demo itself".to_owned()
    } else {
        format!("mull demo itself, unanswered for {} s", wait.as_secs())
    }
}

/// The turn as the report lists it, or (boxed: it is large) the error of a turn that did not
/// complete.
fn completed(outcome: TurnOutcome) -> Result<DemoTurn, Box<DemoError>> {
    if outcome.status != OutcomeStatus::Completed {
        return Err(Box::new(DemoError::Turn {
            request_id: outcome.request_id,
            status: outcome.status,
            error: outcome.error.map(|e| e.message).unwrap_or_default(),
        }));
    }
    Ok(DemoTurn {
        request_id: outcome.request_id,
        status: outcome.status,
    })
}

/// The built-in policies (by name; `None` for the demo agent's own) a log of many demo
/// sessions is recorded under, in turn: half plain, a quarter under `no-weather`, a quarter
/// under `guides-only`, so a backtest over it meets calls recorded as run and as blocked.
pub const RECORDED_MIX: [Option<&str>; 4] = [None, None, Some("no-weather"), Some("guides-only")];

/// Records `count` deterministic demo sessions, `demo-00001` …, into `log`, session `i` under
/// the policy `RECORDED_MIX[(i - 1) % 4]`. Returns how many events they hold.
pub async fn record_sessions(log: &Log, count: usize) -> Result<u64, DemoError> {
    let mut events = 0;
    for i in 1..=count {
        let policy = RECORDED_MIX[(i - 1) % RECORDED_MIX.len()].and_then(ToolPolicy::builtin);
        let options = DemoOptions {
            deterministic: true,
            session_id: format!("demo-{i:05}"),
            policy,
            ..DemoOptions::default()
        };
        let before = log.last_seq();
        let report = run(log, options).await?;
        events += report.events.saturating_sub(before);
    }
    Ok(events)
}

#[cfg(test)]
mod tests;
