//! The read contract on PostgreSQL: [`PgReader`] implements [`ReadLog`] with the queries of
//! [`Reads`], natively — no copy of the log is made to read it.
//!
//! The contract is synchronous (its readers are command-line tools and the dashboard's
//! threads); the driver is not. So a `PgReader` runs its connection on a one-worker runtime of
//! its own and waits for each query on the caller's thread, which works from plain threads and
//! from inside another runtime alike.
//!
//! The session list and change cursor come from `mull_sessions`, which the statement that
//! commits each batch keeps current: listing the newest sessions is one index range, and a
//! follower with nothing new reads nothing else (see [`Reads::changes`]). Turns, tool calls
//! and overviews read the lifecycle index (no chunk).

use std::future::Future;

use mull_core::Envelope;
use mull_store::overview::OVERVIEW_KINDS;
use mull_store::{
    ChangeCursor, Changes, ReadLog, SessionKey, SessionOverviews, SessionState, SessionSummary,
    SessionToolCalls, StoreError, TurnSummary,
};

use tokio_postgres::Config;

use crate::error::{parse, Target};
use crate::read::Reads;

/// The kinds a session's tool table folds (as the SQLite log's reader).
const TOOL_KINDS: &[&str] = &[
    "turn_started",
    "tool_call_started",
    "tool_decided",
    "tool_call_finished",
    "client_tool_result",
    "tool_call_repaired",
    "tool_approval_requested",
    "tool_approval_answered",
];

/// A PostgreSQL log, read through the read contract.
#[derive(Debug)]
pub struct PgReader {
    reads: Reads,
    /// Drives the connection; `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
}

impl PgReader {
    /// Opens the log at `url` for reading: checks it is a mull database of this schema and
    /// changes nothing.
    pub fn open(url: &str) -> Result<PgReader, StoreError> {
        let (config, target) = parse(url)?;
        PgReader::open_with(config, target)
    }

    /// [`PgReader::open`] with the connection settings already parsed (a node's writer opens
    /// its followers' reader so).
    pub(crate) fn open_with(config: Config, target: Target) -> Result<PgReader, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mull-pg-read")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Server {
                context: "starting the PostgreSQL reader's runtime".to_owned(),
                message: e.to_string(),
            })?;
        let opened = runtime.spawn(async move { Reads::open_with(&config, &target).await });
        let reads = futures::executor::block_on(opened).map_err(|e| StoreError::Server {
            context: "opening the PostgreSQL log".to_owned(),
            message: e.to_string(),
        })??;
        Ok(PgReader {
            reads,
            runtime: Some(runtime),
        })
    }

    /// The asynchronous reads underneath (export, stats and check use a few more).
    pub fn reads(&self) -> &Reads {
        &self.reads
    }

    /// Waits for one query; the connection runs on this reader's runtime.
    pub fn wait<T>(&self, query: impl Future<Output = T>) -> T {
        futures::executor::block_on(query)
    }
}

impl Drop for PgReader {
    fn drop(&mut self) {
        // Never blocks: a reader may be dropped on a runtime's thread.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl ReadLog for PgReader {
    fn name(&self) -> String {
        self.reads.database()
    }

    fn newest_sessions(
        &self,
        before: Option<&SessionKey>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        self.wait(self.reads.newest_sessions(before, limit))
    }

    fn session_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Envelope>, StoreError> {
        self.wait(self.reads.session_page(session_id, after_seq, limit))
    }

    fn turn_events(&self, session_id: &str, turn_id: &str) -> Result<Vec<Envelope>, StoreError> {
        self.wait(self.reads.turn_events(session_id, turn_id))
    }

    fn fork_origin(&self, session_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        self.wait(self.reads.fork_origin(session_id))
    }

    fn cursor(&self) -> Result<ChangeCursor, StoreError> {
        self.wait(self.reads.cursor())
    }

    fn changes(&self, since: ChangeCursor) -> Result<Changes, StoreError> {
        self.wait(self.reads.changes(since))
    }

    fn event_count(&self) -> Result<u64, StoreError> {
        self.wait(self.reads.event_count())
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        self.wait(self.reads.sessions())
    }

    fn event_at(&self, session_id: &str, seq: u64) -> Result<Option<Envelope>, StoreError> {
        self.wait(self.reads.event_at(session_id, seq))
    }

    fn turns(&self, session_id: &str) -> Result<Vec<TurnSummary>, StoreError> {
        let mut state = SessionState::new(session_id);
        self.wait(
            self.reads
                .lifecycle(&[session_id.to_owned()], &[], |env| state.apply(&env)),
        )?;
        Ok(state.turns)
    }

    fn session_tool_calls(&self, session_id: &str) -> Result<SessionToolCalls, StoreError> {
        let mut calls = SessionToolCalls::new(session_id);
        self.wait(
            self.reads
                .lifecycle(&[session_id.to_owned()], TOOL_KINDS, |env| {
                    calls.apply(&env)
                }),
        )?;
        Ok(calls)
    }

    fn overviews_of(&self, sessions: &[String]) -> Result<SessionOverviews, StoreError> {
        let mut all = SessionOverviews::default();
        for chunk in sessions.chunks(1024) {
            self.wait(
                self.reads
                    .lifecycle(chunk, OVERVIEW_KINDS, |env| all.apply(&env)),
            )?;
        }
        Ok(all)
    }
}
