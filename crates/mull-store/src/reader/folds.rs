//! Projections read from the log: a session's state, its turns, its tool calls and every
//! session's overview, each folded from the rows it needs (the lifecycle index, and chunks only
//! of a turn still running), with turns whose writer is gone shown as interrupted.

use mull_core::TurnStatus;
use rusqlite::params;

use super::history::Fold;
use super::rows::decode_parts;
use super::{LogReader, COLUMNS};
use crate::error::StoreError;
use crate::overview::{SessionOverviews, OVERVIEW_KINDS};
use crate::projection::{SessionState, SessionToolCalls, TurnSummary};
use crate::schema::LIFECYCLE_PREDICATE;

impl LogReader {
    /// The turns of a session, folded from its lifecycle events only (chunks are skipped by
    /// the partial index, so this stays cheap for long streams).
    pub fn turns(&self, session_id: &str) -> Result<Vec<TurnSummary>, StoreError> {
        let mut state = SessionState::new(session_id);
        self.scan(
            &format!(
                "SELECT {COLUMNS} FROM events WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} ORDER BY seq"
            ),
            params![session_id],
            "listing turns",
            |env| state.apply(&env),
        )?;
        self.show_interrupted(&mut state);
        Ok(state.turns)
    }

    /// Whether a writer has the log open now, i.e. holds its single-writer lock. Probed
    /// without waiting: a shared lock that is granted means no writer (it is let go at once).
    /// A log no writer ever opened has no lock file: no writer either.
    pub fn writer_active(&self) -> bool {
        let Ok(file) = std::fs::File::open(crate::gate::lock::lock_path(&self.path)) else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            // Cannot tell: show what the log says.
            Err(std::fs::TryLockError::Error(_)) => true,
        }
    }

    /// Running turns are shown as interrupted when no writer has the log open.
    fn show_interrupted(&self, state: &mut SessionState) {
        if state.turns.iter().any(|t| t.status == TurnStatus::Running) && !self.writer_active() {
            state.mark_interrupted();
        }
    }

    /// A session's tool calls and turn count, for session-wide tool statistics without
    /// reading the session's chunks: only the lifecycle index is walked, and only tool and
    /// `turn_started` events are decoded. Keep the result current with
    /// [`SessionToolCalls::apply`].
    pub fn session_tool_calls(&self, session_id: &str) -> Result<SessionToolCalls, StoreError> {
        let mut calls = SessionToolCalls::new(session_id);
        self.scan(
            &tool_calls_sql(),
            params![session_id],
            "reading tool calls",
            |env| calls.apply(&env),
        )?;
        Ok(calls)
    }

    /// Every session at a glance (agent, first prompt, status mix, tokens), folded from the
    /// few lifecycle kinds an overview needs ([`OVERVIEW_KINDS`]): the lifecycle index is
    /// walked session by session and no chunk is read. Keep the result current with
    /// [`SessionOverviews::apply`].
    pub fn session_overviews(&self) -> Result<SessionOverviews, StoreError> {
        let mut all = SessionOverviews::default();
        self.scan(&overview_sql(), [], "reading session overviews", |env| {
            all.apply(&env)
        })?;
        if all.running() > 0 && !self.writer_active() {
            all.mark_interrupted();
        }
        Ok(all)
    }

    /// Rebuilds a session's state by folding its events, page by page. A fork's history is
    /// resolved: its origin's events up to the fork point come first (see
    /// [`LogReader::session_history`]). The chunks of turns that ended are not read: they
    /// only ever built the draft their turn's end cleared, so the state is exactly what
    /// folding every event gives (`SessionState::apply` over the history), at the cost of the
    /// lifecycle events and the chunks of a turn still running.
    pub fn load_session(&self, session_id: &str) -> Result<SessionState, StoreError> {
        let mut state = SessionState::new(session_id);
        if self.has_session(session_id)? {
            // Folded from each row's parts: the ids are read in place, not copied per event.
            self.each_history_row(session_id, Fold::Projection, |row| {
                let parts = decode_parts(row)?;
                state.apply_own(parts.event_ref());
                Ok(())
            })?;
        }
        self.show_interrupted(&mut state);
        Ok(state)
    }
}

/// The events [`LogReader::session_tool_calls`] folds: the lifecycle predicate is repeated so
/// the planner walks the partial index, never the session's chunks.
pub(super) fn tool_calls_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM events WHERE session_id = ?1 AND {LIFECYCLE_PREDICATE} \
         AND kind IN ('turn_started', 'tool_call_started', 'tool_decided', \
         'tool_call_finished', 'client_tool_result', 'tool_call_repaired', \
         'tool_approval_requested', 'tool_approval_answered') ORDER BY seq"
    )
}

/// The rows an overview folds, session by session through the lifecycle index.
fn overview_sql() -> String {
    let kinds = OVERVIEW_KINDS
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT {COLUMNS} FROM events INDEXED BY events_lifecycle \
         WHERE {LIFECYCLE_PREDICATE} AND kind IN ({kinds}) ORDER BY session_id, seq"
    )
}
