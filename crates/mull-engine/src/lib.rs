//! mull's turn engine: the agentic loop — model stream → tool calls → next step — with Think's
//! lifecycle hooks, over an append-only event log.
//!
//! Most services depend on the `mull` crate, which re-exports this one beside the model
//! providers and MCP, with a prelude and a complete example that runs. Depend on this crate
//! directly to bring your own [`LanguageModel`](mull_core::LanguageModel) and nothing else.
//!
//! # What you implement
//! - An [`Agent`]. Only [`name`](Agent::name) and [`model`](Agent::model) are required; every
//!   other method has a default that changes nothing: [`tools`](Agent::tools) (built with
//!   [`FnTool`] and [`ToolSet`]; a tool's input schema is derived from its Rust type), the
//!   system prompt, and the lifecycle hooks — `configure_session` ([`SessionConfig`]: context
//!   blocks, compaction, recovery), `before_turn` ([`TurnConfig`]), `before_step`
//!   ([`StepConfig`]), `before_tool_call` ([`ToolCallDecision`]: allow, allow with new input,
//!   block, substitute, or ask a person), `after_tool_call`, `on_step_finish`, `on_chunk`,
//!   `on_chat_response`, `on_chat_error` and `classify_chat_error`.
//! - If you need them: [`Tool`] for a tool that is more than a function (streaming output, a
//!   client tool, an approval rule), [`ToolSource`] for tools listed again at every turn from
//!   outside the process, [`Extension`] for hook subscribers that are not the agent,
//!   [`StreamTransform`] to rewrite the stream before anyone sees it, [`Summarizer`] for
//!   compaction.
//!
//! # What you call
//! - [`Session::open`] on a [`mull_store::Log`] (a SQLite file), or [`Session::open_on`] on any
//!   [`mull_store::EventLog`] (PostgreSQL's, or an in-memory one in tests).
//! - The entry paths: [`Session::chat`] (a turn whose parts you stream), `save_messages`,
//!   `submit_messages` (durable and idempotent by submission id), `continue_last_turn`,
//!   `regenerate`, `add_tool_result` (a client tool's answer), `answer_approval`; and
//!   `cancel_chat` / `abort_all`. [`Session::read_state`] reads the conversation.
//! - [`AgentTool`] runs another agent as a tool, in a child session of the same log;
//!   `Session::fork` starts a session from a prefix of another; [`reexecute`] runs an agent
//!   again over a recorded session and names the first event that differs, and
//!   [`replay::backtest()`] asks what new hook code would have decided.
//!
//! # What the log gives you
//! Every input is appended as an event before the session acts on it, and every fact of a turn
//! (a step, a streamed chunk, a tool decision, the end) is an event before anyone can observe
//! it. The session's state is a fold of those events ([`mull_store::SessionState`]), so the
//! same log feeds the conversation, dashboards, replays and traces. Nothing leaves the process —
//! a tool run, a reported turn end, an acknowledged submission — before the events it depends on
//! are durable; after a crash, reopening the session resolves what was running (a tool cut off is
//! reported as interrupted, never run twice). A hook's error, panic or timeout is recorded as a
//! `hook_failed` event and the turn goes on. Time and ids come from the injected clock and id
//! source ([`SessionOptions`]), so a scripted run writes the same bytes every time.
//!
//! ```
//! use std::sync::Arc;
//!
//! use futures::StreamExt;
//! use mull_core::{LanguageModel, StreamPart, UIMessage};
//! use mull_engine::{
//!     Agent, FnTool, HookResult, OutcomeStatus, Session, SessionOptions, ToolCallContext,
//!     ToolCallDecision, ToolError, ToolSet, TurnOptions,
//! };
//! use mull_store::Log;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::{json, Value};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct OrderQuery {
//!     /// The order number, e.g. "A-1001".
//!     order: String,
//! }
//!
//! struct Support {
//!     model: Arc<dyn LanguageModel>,
//! }
//!
//! #[async_trait::async_trait]
//! impl Agent for Support {
//!     fn name(&self) -> &str {
//!         "support"
//!     }
//!     fn model(&self) -> Arc<dyn LanguageModel> {
//!         Arc::clone(&self.model)
//!     }
//!     fn tools(&self) -> ToolSet {
//!         let status = FnTool::new("order_status", "Looks an order up.", |q: OrderQuery, _| async move {
//!             Ok::<Value, ToolError>(json!({ "order": q.order, "status": "delivered" }))
//!         });
//!         ToolSet::new().with(status.shared())
//!     }
//!     async fn before_tool_call(&self, ctx: &ToolCallContext) -> HookResult<Option<ToolCallDecision>> {
//!         // Every call is decided here, and the decision is an event, before the tool runs.
//!         Ok((ctx.tool_name == "delete_order").then(|| ToolCallDecision::Block {
//!             reason: Some("orders are never deleted here".into()),
//!         }))
//!     }
//! }
//!
//! /// One turn: the answer streamed as it comes, the outcome once its end is durable.
//! async fn ask(log: &Log, model: Arc<dyn LanguageModel>) -> Result<(), Box<dyn std::error::Error>> {
//!     let agent = Arc::new(Support { model });
//!     let session = Session::open(log, agent, SessionOptions::new("customer-42")).await?;
//!     let question = UIMessage::user("m1", "Where is order A-1001?");
//!     let mut turn = session.chat(vec![question], TurnOptions::default())?;
//!     while let Some(part) = turn.next().await {
//!         if let StreamPart::TextDelta { text, .. } = part {
//!             print!("{text}");
//!         }
//!     }
//!     assert_eq!(turn.finish().await?.status, OutcomeStatus::Completed);
//!     Ok(())
//! }
//! ```
//!
//! The contributors' map of this crate (its layers, how an event travels through it) is
//! ARCHITECTURE.md in the repository.

pub mod agent;
pub mod approval;
mod broadcast;
pub mod budget;
pub mod config;
pub mod context;
pub mod error;
pub mod extension;
mod fork;
mod guard;
pub mod hooks;
pub mod memory;
mod otel_fields;
pub mod outside;
mod recorder;
pub mod replay;
mod runtime;
pub mod session;
pub mod session_config;
pub mod stop;
pub mod subagent;
pub mod tool;
mod tool_input;
pub mod tool_source;
pub mod transform;
mod turn;
pub mod workspace;

pub use memory::{compaction, context_blocks, search, skills, tokens};

pub use agent::Agent;
pub use approval::Approval;
pub use budget::Budget;
pub use compaction::{
    compact_function, model_summarizer, summarizer, CompactOptions, Summarizer, SUMMARY_PREFIX,
};
pub use config::{MessageMetadata, ModelChoice, StepConfig, SystemPrompt, Timeout, TurnConfig};
pub use context::{
    ChatErrorContext, ChatResponseResult, ChunkContext, PrepareStepContext, RecoveryExhausted,
    StepContext, ToolCallContext, ToolCallDecision, ToolCallResultContext, TurnContext,
};
pub use context_blocks::{BlockProvider, ContextBlock, ContextError, UPDATE_CONTEXT_TOOL};
pub use error::{ChatError, EngineError, HookError, HookResult};
pub use extension::{
    ChunkSnapshot, Extension, ExtensionHook, ExtensionHost, Extensions, HostCallError, PatchError,
    StepSnapshot, ToolCallSnapshot, ToolResultSnapshot, TurnConfigPatch, TurnSnapshot,
};
pub use outside::{HookPoint, Outside, RealWorld};
pub use replay::{reexecute, Divergence, Recording, ReplayError, ReplayOptions, ReplayReport};
pub use search::{SearchError, SearchHit, SEARCH_TOOL};
pub use session::follow::{Follow, FollowError};
pub use session::{
    ActiveTurn, ChatStream, ClientToolOutcome, CommandOptions, OutcomeStatus, Reply, Session,
    SessionOptions, SubmissionResult, SubmitOptions, SubmitReceipt, TurnFailure, TurnOptions,
    TurnOutcome,
};
pub use session_config::{
    ChatRecovery, Compaction, CompactionRequest, ContextConfig, ContextOverflow, ProactiveGuard,
    SessionConfig,
};
pub use skills::{Skill, LOAD_SKILL_TOOL};
pub use stop::{has_tool_call, step_count_is, StopCondition};
pub use subagent::{AgentTool, DEFAULT_MAX_DEPTH};
pub use tokens::{CharEstimator, SharedTokenCounter, TokenCounter};
pub use tool::{FnTool, Tool, ToolEntry, ToolError, ToolExecution, ToolOutput, ToolSet};
pub use tool_source::{ToolListing, ToolSource};
pub use transform::StreamTransform;
pub use turn::{
    ABORTED_TOOL_CALL, CONTEXT_KEEP_LAST, CONTEXT_TRUNCATE_CHARS, INTERRUPTED_TOOL_CALL,
};
pub use workspace::Workspace;
