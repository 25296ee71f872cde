//! How a session is opened and how each entry path is called.

use std::sync::Arc;
use std::time::Duration;

use mull_core::{Clock, IdSource, RandomIds, SequentialIds, SystemClock, ToolSpec};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::extension::{Extension, Extensions};
use crate::outside::{Outside, RealWorld};
use crate::tool::ToolSet;

/// How a session is opened.
#[derive(Clone)]
pub struct SessionOptions {
    pub session_id: String,
    /// Stamps every event.
    pub clock: Arc<dyn Clock>,
    /// Names requests, turns and messages.
    pub ids: Arc<dyn IdSource>,
    /// Run a continuation turn once every pending client tool call of a step has a result.
    pub auto_continue: bool,
    /// First delay between retries of a retryable model error (doubled each retry) when the
    /// provider does not say how long to wait.
    pub retry_base_delay: Duration,
    /// Free-form data recorded in `session_opened`.
    pub metadata: Value,
    /// Events a subscriber may fall behind by before it must catch up from the log.
    pub bus_capacity: usize,
    /// Record tool inputs and outputs on tracing spans (off: spans carry names, ids and counts).
    pub capture_content: bool,
    /// Extensions, in load order; each runs right after the agent's own hook.
    pub extensions: Extensions,
    /// MCP servers (or other outside tool sources) of this session, merged after the agent's.
    pub mcp_servers: Vec<Arc<dyn crate::tool_source::ToolSource>>,
    /// How long an approval request waits before it turns into a denial (none: forever).
    /// Checked with the session's clock whenever the session is next touched — an answer, a
    /// turn's start — or swept by [`Session::expire_approvals`](crate::Session::expire_approvals).
    pub approval_expiry: Option<Duration>,
    /// The outside world the session touches: the models its steps call, the tools its turns
    /// offer, and what happens before each of the agent's hooks. [`RealWorld`] (the default)
    /// changes nothing; re-execution replay serves them from a recording (see
    /// [`crate::outside`]).
    pub outside: Arc<dyn Outside>,
    /// The `tracing` span this session's turns are traced under (a turn runs on a task of its
    /// own, so it does not inherit the caller's). None: each turn attempt is the root of its
    /// trace. A sub-agent's session sets it to the parent's `execute_tool` span, so the child's
    /// turn is one trace with the call that ran it.
    pub trace_parent: Option<tracing::Span>,
    /// A budget laid over the agent's own (each limit the tighter of the two; dollars priced
    /// at the agent's prices when it sets a budget, else at this one's): the cap an operator
    /// puts on an agent it did not write, such as `mull chat --budget-turn-tokens`.
    pub budget: Option<crate::session_config::budget::Budget>,
    /// Whether deliveries of `on_chat_response` are marked, laid over the agent's choice: a
    /// re-execution follows what its recording did (see `Recording::marks_deliveries`).
    pub(crate) marks_deliveries: Option<bool>,
}

impl SessionOptions {
    /// Real time and random ids.
    pub fn new(session_id: impl Into<String>) -> SessionOptions {
        SessionOptions {
            session_id: session_id.into(),
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            auto_continue: true,
            retry_base_delay: Duration::from_secs(2),
            metadata: Value::Null,
            bus_capacity: 1024,
            capture_content: false,
            extensions: Extensions::new(),
            mcp_servers: Vec::new(),
            approval_expiry: None,
            outside: Arc::new(RealWorld),
            trace_parent: None,
            budget: None,
            marks_deliveries: None,
        }
    }

    /// A fixed clock at the fixture epoch and counting ids: the same script writes the same log.
    pub fn deterministic(session_id: impl Into<String>) -> SessionOptions {
        SessionOptions {
            clock: Arc::new(mull_core::FixedClock::at_fixture_epoch()),
            ids: Arc::new(SequentialIds::new()),
            ..SessionOptions::new(session_id)
        }
    }

    /// Unanswered approval requests turn into denials after `expiry`.
    pub fn with_approval_expiry(mut self, expiry: Duration) -> SessionOptions {
        self.approval_expiry = Some(expiry);
        self
    }

    /// Adds an MCP server (or another outside tool source) to the session's turns.
    pub fn with_mcp_server(
        mut self,
        server: Arc<dyn crate::tool_source::ToolSource>,
    ) -> SessionOptions {
        self.mcp_servers.push(server);
        self
    }

    /// Traces the session's turns under `span` (see [`SessionOptions::trace_parent`]).
    pub fn with_trace_parent(mut self, span: tracing::Span) -> SessionOptions {
        self.trace_parent = Some(span);
        self
    }

    /// Caps the session's spend with `budget`, over the agent's own (see
    /// [`SessionOptions::budget`]).
    pub fn with_budget(mut self, budget: crate::session_config::budget::Budget) -> SessionOptions {
        self.budget = Some(budget);
        self
    }

    /// Uses `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> SessionOptions {
        self.clock = clock;
        self
    }

    /// Uses `outside` for the models, tools and hook points the session reaches.
    pub fn with_outside(mut self, outside: Arc<dyn Outside>) -> SessionOptions {
        self.outside = outside;
        self
    }

    /// Uses `ids`.
    pub fn with_ids(mut self, ids: Arc<dyn IdSource>) -> SessionOptions {
        self.ids = ids;
        self
    }

    /// Turns auto-continuation after client tool results on or off.
    pub fn with_auto_continue(mut self, on: bool) -> SessionOptions {
        self.auto_continue = on;
        self
    }

    /// Loads `extensions`, in order, after any already loaded.
    pub fn with_extensions(
        mut self,
        extensions: impl IntoIterator<Item = Arc<dyn Extension>>,
    ) -> SessionOptions {
        for extension in extensions {
            self.extensions.push(extension);
        }
        self
    }

    /// Sets the first retry delay.
    pub fn with_retry_base_delay(mut self, delay: Duration) -> SessionOptions {
        self.retry_base_delay = delay;
        self
    }
}

/// Per-call options of an entry path.
#[derive(Clone, Default)]
pub struct TurnOptions {
    /// Custom fields hooks see as `TurnContext::body`.
    pub body: Value,
    /// Cancels the turn (an already-cancelled signal still persists the user's messages).
    pub signal: Option<CancellationToken>,
    /// Tools the client answers itself (no execute).
    pub client_tools: Vec<ToolSpec>,
    /// Tools the caller adds for this turn (the last layer of the merge).
    pub tools: ToolSet,
}

impl TurnOptions {
    /// Options with a request body.
    pub fn with_body(body: Value) -> TurnOptions {
        TurnOptions {
            body,
            ..TurnOptions::default()
        }
    }
}

/// Options of a durable submission.
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// A caller-chosen id; a second submission with the same id is a duplicate.
    pub submission_id: Option<String>,
    /// A caller-chosen key; a second submission with the same key is a duplicate.
    pub idempotency_key: Option<String>,
    pub body: Value,
}
