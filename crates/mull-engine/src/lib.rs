//! mull's turn engine: the agentic loop with Think's lifecycle hooks, over the event log.
//!
//! An application implements [`Agent`] (model, tools, prompt, hooks), opens a [`Session`] on a
//! [`mull_store::Log`], and drives turns through its entry paths. Every fact of a turn is an
//! event appended to the log before anyone observes it; the session's state is the fold of
//! those events ([`mull_store::SessionState`]).
//!
//! Where things are, from the public API down (each layer imports only those below it):
//! - [`session`]: the handle applications hold — opening (`session/handle.rs`), the one
//!   command every input goes through (`session/command.rs`), the entry paths
//!   (`session/entry.rs`), durable submissions and the recovery on reopen
//!   (`session/submission.rs`), approvals and memory on demand. [`subagent`] (agents as tools:
//!   a tool call running another agent's turn as a child session) and [`replay`]
//!   (re-execution of a recorded session against the current agent) sit beside and above it.
//! - `turn`: one turn under the turn lock — the state its parts share (`turn/run.rs`), an
//!   attempt (`turn/attempt.rs`), the context it starts from (`turn/assemble.rs`), its steps
//!   (`turn/step.rs`), each tool call of the model's (`turn/tool_call.rs`), a decided call run
//!   once, live or approved (`turn/decided.rs`), parked approvals (`turn/parked.rs`), failure
//!   reporting (`turn/failure.rs`) and the repair of what an
//!   interrupted turn left (`turn/recovery.rs`).
//! - On a session's runtime: [`hooks`] (the dispatcher of the agent's and extensions' hooks),
//!   the failure guard around every hook call (`guard.rs`), [`approval`], and [`memory`]:
//!   [`compaction`], [`context_blocks`] (the system prompt built from named blocks the model
//!   may write), [`search`] (full-text search of the conversation).
//! - `runtime`: one session's state and machinery, which `Session` builds and wraps and every
//!   layer above takes instead of the session itself.
//! - The vocabulary the layers share: [`agent`] (the trait), [`context`] (what hooks see and
//!   decide), [`config`] (TurnConfig / StepConfig and their merge), [`tool`] (tools, schemas,
//!   validation), [`tool_source`] (tools listed from outside the process, such as MCP
//!   servers'), [`extension`] (hook subscribers outside the agent, in-process or in another
//!   process), [`stop`] (stop conditions), [`transform`] (stream transforms),
//!   [`session_config`] (what `configure_session` sets up), [`outside`] (the models, tools and
//!   hook points a session reaches outside the agent's decisions, injected like the clock),
//!   [`tokens`], [`error`].

pub mod agent;
pub mod approval;
mod broadcast;
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
