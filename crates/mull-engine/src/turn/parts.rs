//! What a turn runs on, taken apart from the session's runtime: each field is a part a turn
//! touches, so the turn's code names what it reads and writes, and the session's API (its
//! lock, its requests in flight, its waiters) stays out of reach below it.

use std::any::Any;
use std::sync::Arc;

use mull_core::Envelope;

use crate::broadcast::Broadcast;
use crate::hooks::Hooks;
use crate::memory::compaction::Compactor;
use crate::recorder::Recorder;
use crate::runtime::search_index::SearchIndex;
use crate::runtime::{Runtime, SessionOptions, TurnFailure};
use crate::session_config::SessionConfig;
use crate::tool::CallSite;

/// The parts of a session a turn uses (see the module docs).
pub(crate) struct TurnParts<'a> {
    /// The log handle with its projection: every fact a turn writes, everything it reads, and
    /// the clock.
    pub recorder: &'a Arc<Recorder>,
    /// The one dispatcher of the agent's and the extensions' hooks, with their guard.
    pub hooks: &'a Hooks,
    /// What `configure_session` set up.
    pub config: &'a Arc<SessionConfig>,
    /// How the session was opened: its ids, the outside world, content capture, approval
    /// expiry, retry delay, trace parent and MCP servers.
    pub options: &'a SessionOptions,
    /// The full-text index the session's search tool reads.
    pub search: &'a Arc<SearchIndex>,
    /// Where a failed turn's final event is published.
    failures: &'a Broadcast<TurnFailure>,
    /// What a tool call's site carries to the sub-agent tool (a [`CallingParent`]), opaque
    /// at the tools' layer.
    session: Arc<dyn Any + Send + Sync>,
}

/// The parts of the session a tool call runs in that a sub-agent it starts uses: the log its
/// start and end are linked in, the configuration its budget is taken from, and the options
/// (clock, ids, extensions, outside world) the child inherits.
pub(crate) struct CallingParent {
    pub recorder: Arc<Recorder>,
    pub config: Arc<SessionConfig>,
    pub options: Arc<SessionOptions>,
}

impl<'a> TurnParts<'a> {
    /// The parts of `runtime` a turn runs on.
    pub(crate) fn of(runtime: &'a Arc<Runtime>) -> TurnParts<'a> {
        TurnParts {
            recorder: runtime.recorder(),
            hooks: runtime.hooks(),
            config: runtime.shared_config(),
            options: runtime.options(),
            search: runtime.search_index(),
            failures: runtime.failures(),
            session: Arc::new(CallingParent {
                recorder: Arc::clone(runtime.recorder()),
                config: Arc::clone(runtime.shared_config()),
                options: Arc::clone(runtime.shared_options()),
            }),
        }
    }

    /// The session's id.
    pub(crate) fn session_id(&self) -> &str {
        self.recorder.session_id()
    }

    /// Where a tool call in turn `turn_id` runs.
    pub(crate) fn call_site(&self, turn_id: &str) -> CallSite {
        CallSite::new(
            Arc::clone(self.recorder),
            Arc::clone(&self.session),
            turn_id.to_owned(),
        )
    }

    /// Sends a failed turn's final event to the session's failure subscribers.
    pub(crate) fn publish_failure(&self, envelope: Envelope) {
        self.failures.publish(|| TurnFailure { envelope });
    }

    /// The session's compaction.
    pub(crate) fn compactor(&self) -> Compactor<'_> {
        Compactor {
            recorder: self.recorder,
            hooks: self.hooks,
            config: self.config,
            ids: &*self.options.ids,
        }
    }
}
