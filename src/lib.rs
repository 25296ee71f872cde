//! mull: LLM agent chat turns over an append-only event log.
//!
//! You implement an [`Agent`](engine::Agent) — its model, tools, system prompt and whichever
//! lifecycle hooks you need (`before_turn`, `before_tool_call`, `on_chat_response`, …) — open a
//! [`Log`](store::Log) (a SQLite file; PostgreSQL through `mull-store-pg` for several nodes), open
//! a [`Session`](engine::Session) on it, and drive turns. Every fact of a turn — the request,
//! each step, each streamed chunk, each tool decision, the end — is an event in the log before
//! anything can observe it, so the same log feeds the conversation state, `mull dash`, replay,
//! diffs and traces.
//!
//! [`prelude`] holds what a first agent needs, and this crate re-exports the crates an agent's
//! code uses ([`async_trait`], [`serde`], [`serde_json`], [`schemars`], [`futures`]), so a
//! service depends on `mull` and `tokio` alone.
//!
//! ```
//! use mull::prelude::*;
//! use std::sync::Arc;
//!
//! /// The input of the `order_status` tool; its JSON schema is derived from the type.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(crate = "mull::serde")]
//! #[schemars(crate = "mull::schemars")]
//! struct OrderQuery {
//!     /// The order number, e.g. "A-1001".
//!     order: String,
//! }
//!
//! struct Support {
//!     model: Arc<dyn LanguageModel>,
//! }
//!
//! #[async_trait]
//! impl Agent for Support {
//!     fn name(&self) -> &str {
//!         "support"
//!     }
//!     fn model(&self) -> Arc<dyn LanguageModel> {
//!         Arc::clone(&self.model)
//!     }
//!     fn system_prompt(&self) -> String {
//!         "You help customers with their orders.".into()
//!     }
//!     fn tools(&self) -> ToolSet {
//!         let status = FnTool::new("order_status", "Looks an order up.", |q: OrderQuery, _| async move {
//!             Ok::<Value, ToolError>(json!({ "order": q.order, "status": "delivered" }))
//!         });
//!         ToolSet::new().with(status.shared())
//!     }
//!     // A hook: every tool call is decided here before it runs (allow, block, substitute, …).
//!     async fn before_tool_call(&self, ctx: &ToolCallContext) -> HookResult<Option<ToolCallDecision>> {
//!         Ok(None) // None: the default decision, allow
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("support.db");
//! // A scripted model keeps this example offline; `mull::providers` has the real ones.
//! let model = mull::providers::scripted::ScriptedModel::builder("scripted")
//!     .step(|s| s.tool_call("c1", "order_status", json!({ "order": "A-1001" })))
//!     .step(|s| s.text("Order A-1001 was delivered."))
//!     .build();
//! let log = Log::open(&path)?;
//! let agent = Arc::new(Support { model: Arc::new(model) });
//! let session = Session::open(&log, agent, SessionOptions::new("customer-42")).await?;
//!
//! let mut turn = session.chat(
//!     vec![UIMessage::user("m1", "Where is order A-1001?")],
//!     TurnOptions::default(),
//! )?;
//! while let Some(part) = turn.next().await {
//!     if let StreamPart::TextDelta { text, .. } = part {
//!         print!("{text}");
//!     }
//! }
//! let outcome = turn.finish().await?;
//! assert_eq!(outcome.status, OutcomeStatus::Completed);
//!
//! // The conversation is a projection of the log.
//! let answer = session.read_state(|s| s.messages.last().map(|m| m.plain_text()));
//! assert_eq!(answer.as_deref(), Some("Order A-1001 was delivered."));
//! # Ok(())
//! # }
//! ```
//!
//! **Spend caps.** A [`Budget`](engine::Budget) limits what a session's model calls may spend,
//! per turn and per session, in tokens, dollars and model calls. An agent sets its own in
//! `configure_session`; whoever runs an agent it did not write lays one over it with
//! [`SessionOptions::with_budget`](engine::SessionOptions::with_budget) (each limit the tighter
//! of the two). The check stands before every model call — retries, compaction summaries and
//! sub-agents included — and a used-up limit writes a `budget_exceeded` event and ends the turn
//! with an error at stage `budget`:
//!
//! ```
//! use mull::prelude::*;
//! use mull::core::ErrorStage;
//! use mull::engine::Budget;
//! use std::sync::Arc;
//!
//! struct Researcher(Arc<dyn LanguageModel>);
//!
//! #[async_trait]
//! impl Agent for Researcher {
//!     fn name(&self) -> &str {
//!         "researcher"
//!     }
//!     fn model(&self) -> Arc<dyn LanguageModel> {
//!         Arc::clone(&self.0)
//!     }
//!     fn tools(&self) -> ToolSet {
//!         let search = FnTool::new("search", "Searches.", |_: Value, _| async move {
//!             Ok::<Value, ToolError>(json!(["a result"]))
//!         });
//!         ToolSet::new().with(search.shared())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let log = Log::open(dir.path().join("capped.db"))?;
//! // A model that would search, then answer: two model calls.
//! let model = mull::providers::scripted::ScriptedModel::builder("scripted")
//!     .step(|s| s.tool_call("c1", "search", json!({"q": "tides"})).usage(400, 20))
//!     .step(|s| s.text("High tide is at six."))
//!     .build();
//! let agent = Arc::new(Researcher(Arc::new(model)));
//! // At most 300 tokens a turn: the first call spends 420, so the second is not made.
//! let options = SessionOptions::new("capped").with_budget(Budget::new().turn_tokens(300));
//! let session = Session::open(&log, agent, options).await?;
//! let outcome = session
//!     .save_messages(vec![UIMessage::user("m1", "When is high tide?")], TurnOptions::default())
//!     .await?;
//! assert_eq!(outcome.status, OutcomeStatus::Error);
//! let error = outcome.error.expect("the budget's error");
//! assert_eq!(error.stage, ErrorStage::Budget);
//! assert!(error.message.contains("the turn's token budget is used up (420 tokens spent of 300"));
//! # Ok(())
//! # }
//! ```
//!
//! The `mull` binary's `chat`, `serve` and `demo` take the same caps as flags
//! (`--budget-turn-tokens`, `--budget-session-usd`, …); `mull stats`, the dashboard and the
//! traces show each stop.
//!
//! Beyond the prelude: [`core`] (the vocabulary: events, messages, stream parts, the model
//! trait), [`store`] (the log, its readers and folds), [`engine`] (sessions, hooks, tools,
//! sub-agents, approvals, replay), [`providers`] (OpenAI-compatible and Anthropic models, the
//! scripted and replay models) and [`mcp`] (MCP servers' tools in turns). [`demo`],
//! [`tool_desk`] and [`agents`] are the built-in agents the `mull` binary runs, [`policy`] lays
//! stricter tool policies over any agent, and [`replay`] re-executes recorded sessions against
//! new hook code. The contributors' map of
//! the code is ARCHITECTURE.md in the repository.

pub use mull_core as core;
pub use mull_engine as engine;
pub use mull_mcp as mcp;
pub use mull_providers as providers;
pub use mull_store as store;

pub mod agents;
pub mod demo;
pub mod policy;
pub mod replay;
pub mod tool_desk;

pub use async_trait;
pub use futures;
pub use schemars;
pub use serde;
pub use serde_json;

/// What a first agent needs in one import: `use mull::prelude::*;`.
///
/// The agent trait and the hook types it decides with, tools, the session and its options,
/// the log, messages and stream parts, plus `async_trait`, serde's derives, `JsonSchema`,
/// `json!`/`Value` and `StreamExt`. Derives through this re-export name their crate:
/// `#[serde(crate = "mull::serde")]`, `#[schemars(crate = "mull::schemars")]` (or add serde
/// and schemars to your own dependencies and leave the attributes out).
pub mod prelude {
    pub use crate::core::{LanguageModel, Role, StreamPart, UIMessage};
    pub use crate::engine::{
        Agent, ChatError, EngineError, FnTool, HookResult, OutcomeStatus, Session, SessionOptions,
        StepConfig, Tool, ToolCallContext, ToolCallDecision, ToolError, ToolExecution, ToolSet,
        TurnConfig, TurnContext, TurnOptions, TurnOutcome,
    };
    pub use crate::store::{Log, SessionState};
    pub use async_trait::async_trait;
    pub use futures::StreamExt;
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};
    pub use serde_json::{json, Value};
}
