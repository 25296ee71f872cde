//! mull's turn engine: the agentic loop with Think's lifecycle hooks, over the event log.
//!
//! An application implements [`Agent`] (model, tools, prompt, hooks), opens a [`Session`] on a
//! [`mull_store::Log`], and drives turns through its entry paths. Every fact of a turn is an
//! event appended to the log before anyone observes it; the session's state is the fold of
//! those events ([`mull_store::SessionState`]).
//!
//! Where things are: [`agent`] (the trait), [`context`] (what hooks see and decide),
//! [`config`] (TurnConfig / StepConfig and their merge), [`tool`] (tools, schemas, validation),
//! [`stop`] (stop conditions), [`transform`] (stream transforms), [`session_config`]
//! (what `configure_session` sets up), [`context_blocks`] (the system prompt built from named
//! blocks the model may write), [`compaction`] (shortening the history, overflow guards),
//! [`tokens`] (token counting), [`search`] (full-text search of the conversation),
//! [`session`] (entry paths, the turn lock, cancellation, submissions, recovery),
//! `turn` (the loop itself), [`extension`] (hook subscribers outside
//! the agent, in-process or in another process).

pub mod agent;
mod broadcast;
pub mod compaction;
pub mod config;
pub mod context;
pub mod context_blocks;
pub mod error;
pub mod extension;
mod recorder;
pub mod replay;
pub mod search;
pub mod session;
pub mod session_config;
pub mod stop;
pub mod tokens;
pub mod tool;
pub mod transform;
mod turn;

pub use agent::Agent;
pub use compaction::{
    compact_function, model_summarizer, summarizer, CompactOptions, Summarizer, SUMMARY_PREFIX,
};
pub use config::{ModelChoice, StepConfig, Timeout, TurnConfig};
pub use context::{
    ChatErrorContext, ChatResponseResult, ChunkContext, PrepareStepContext, StepContext,
    ToolCallContext, ToolCallDecision, ToolCallResultContext, TurnContext,
};
pub use context_blocks::{BlockProvider, ContextBlock, ContextError, UPDATE_CONTEXT_TOOL};
pub use error::{ChatError, EngineError, HookError, HookResult};
pub use extension::{
    ChunkSnapshot, Extension, ExtensionHook, ExtensionHost, Extensions, HostCallError,
    StepSnapshot, ToolCallSnapshot, ToolResultSnapshot, TurnConfigPatch, TurnSnapshot,
};
pub use replay::{reexecute, Divergence, Recording, ReplayError, ReplayOptions, ReplayReport};
pub use search::{SearchError, SearchHit, SEARCH_TOOL};
pub use session::{
    ChatStream, ClientToolOutcome, OutcomeStatus, Session, SessionOptions, SubmissionResult,
    SubmitOptions, SubmitReceipt, TurnFailure, TurnOptions, TurnOutcome,
};
pub use session_config::{
    Compaction, CompactionRequest, ContextOverflow, ProactiveGuard, SessionConfig,
};
pub use stop::{has_tool_call, step_count_is, StopCondition};
pub use tokens::{CharEstimator, SharedTokenCounter, TokenCounter};
pub use tool::{FnTool, Tool, ToolEntry, ToolError, ToolExecution, ToolOutput, ToolSet};
pub use transform::StreamTransform;
pub use turn::{CONTEXT_KEEP_LAST, CONTEXT_TRUNCATE_CHARS, INTERRUPTED_TOOL_CALL};
