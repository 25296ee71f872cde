//! What a node's log handles, its writer task and its lease renewal share: the options, the
//! queue of appended rows, the sessions held, and how far commits have got.
//!
//! # Invariants
//! 1. Tickets number appended rows in the order they were queued; `Progress::committed` only
//!    grows, and every row up to it is committed (or refused by its epoch).
//! 2. A session's `committed_seq` is its last seq the database holds under this node's epoch;
//!    `next_seq` is one past the last appended, so seqs are handed out without a gap.
//! 3. A fenced session stays fenced (and known) until it is opened again: a turn still running
//!    there gets the fence, never "not open".
//! 4. `State` is one mutex, never held across an await.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mull_store::StoreError;
use tokio::sync::{watch, Notify};
use tokio_postgres::Config;

use crate::error::Target;
use crate::read::Reads;
use crate::reader::PgReader;

/// How a node writes: its name in lease rows, how long a lease lasts, how batches are cut.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// This node's name in the lease rows (unique per running node).
    pub node: String,
    /// How long a lease lasts without renewal: the longest a session of a dead node waits
    /// before another node may take it.
    pub lease_ttl: Duration,
    /// Commit once a batch holds this many events. (The default, 1,024, commits a fast turn's
    /// rows and many sessions' turns in fewer, larger statements than 512 did, at no cost to a
    /// slow stream, whose batches the delay cuts: see BENCHMARKS.md, "PostgreSQL at speed".)
    pub batch_max_events: usize,
    /// Commit once the batch's first event has waited this long.
    pub batch_max_delay: Duration,
}

impl PgOptions {
    /// Defaults for a node called `node`: 10 s leases, batches of 1,024 events or 5 ms.
    pub fn new(node: impl Into<String>) -> PgOptions {
        PgOptions {
            node: node.into(),
            lease_ttl: Duration::from_secs(10),
            batch_max_events: 1024,
            batch_max_delay: Duration::from_millis(5),
        }
    }
}

/// What a node has asked of its database so far, in round trips (a round trip is one awaited
/// exchange with the server; statements sent together in one pipeline count once). For a bench
/// to count what a turn costs, and a test to see what an open did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PgTraffic {
    /// Batches committed (each one statement, one round trip), retries after a lost
    /// connection included.
    pub commits: u64,
    /// Round trips on the lease connections: sessions taken (lease and history), leases given
    /// back, statements prepared there.
    pub opening: u64,
    /// Statements prepared on the lease connections (each prepared once per connection).
    pub opening_prepared: u64,
}

pub(super) struct Inner {
    pub(super) target: Target,
    /// How the writer connects again after a loss.
    pub(super) config: Config,
    pub(super) options: PgOptions,
    pub(super) state: Mutex<State>,
    /// Wakes the writer task.
    pub(super) wake: Notify,
    /// What the writer task has committed (or that it stopped).
    pub(super) progress: watch::Sender<Progress>,
    /// Batches the writer sent to be committed (see [`PgTraffic::commits`]).
    pub(super) commits: AtomicU64,
    /// Reads, on a connection of their own.
    pub(super) reads: Reads,
    /// Leases taken and given back, on connections of their own ([`LEASE_CONNECTIONS`]), each
    /// session always on the same one ([`Inner::leases_of`]), so its take, its history read and
    /// its give-back keep their order. Several, so that sessions opening at once do not wait
    /// for one commit each, one after the other: the server flushes the commits of
    /// several connections together.
    pub(super) leases: Vec<Reads>,
    /// Renewals, on a third: a renewal must never wait behind a node's reads or behind the
    /// leases of many chats opening at once, or a busy node would lose the leases it holds
    /// while working (and other nodes would take over chats that are running fine).
    pub(super) renewals: Reads,
    /// The read contract for this process's followers ([`EventLog::read_log`]), on a
    /// connection and runtime of its own, opened on first use.
    ///
    /// [`EventLog::read_log`]: mull_store::EventLog::read_log
    pub(super) read_log: Mutex<Option<Arc<PgReader>>>,
}

/// How many connections a node takes and gives back leases on.
pub(super) const LEASE_CONNECTIONS: usize = 4;

impl Inner {
    /// The lease connection of `session_id`: always the same one for a session.
    pub(super) fn leases_of(&self, session_id: &str) -> &Reads {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        session_id.hash(&mut hasher);
        &self.leases[hasher.finish() as usize % self.leases.len()]
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Progress {
    /// Every row with a ticket up to this one is committed (or refused by its epoch).
    pub(super) committed: u64,
    pub(super) stopped: bool,
}

#[derive(Default)]
pub(super) struct State {
    /// The ticket of the last row appended.
    pub(super) appended: u64,
    pub(super) rows: Vec<Row>,
    pub(super) first_at: Option<Instant>,
    /// A barrier waits: commit without waiting for the batch to fill.
    pub(super) urgent: bool,
    pub(super) sessions: HashMap<String, Held>,
    pub(super) failure: Option<Failure>,
    /// Why the writer cannot commit now (its connection was lost and is being made again).
    pub(super) down: Option<String>,
    /// Committed rows handed back so that the threads that append free them, one per append:
    /// memory freed by the thread that allocated it goes back to that thread's cache, where
    /// memory freed by the writer task's thread would go back through the allocator's shared
    /// arena, whose lock the threads would then contend for on every batch (glibc's malloc).
    /// At most [`SPENT_ROWS`] rows, none with a payload over [`SPENT_ROW_BYTES`].
    pub(super) spent: Vec<Row>,
}

/// The most committed rows waiting for an appending thread to free them, and the largest
/// payload such a row may have (so what waits stays under 4 MiB of payloads).
pub(super) const SPENT_ROWS: usize = 1024;
pub(super) const SPENT_ROW_BYTES: usize = 4096;

/// A session this node writes.
pub(super) struct Held {
    pub(super) epoch: i64,
    pub(super) next_seq: u64,
    /// The ticket of the session's last appended row.
    pub(super) last_ticket: u64,
    /// The session's last seq in the database (committed by this handle or read at its open).
    pub(super) committed_seq: u64,
    pub(super) fenced: Option<Fence>,
    /// Until when the lease is surely this node's by its own clock (see `lease::valid_until`).
    pub(super) valid_until: Instant,
}

impl Held {
    /// Whether the session is still this node's (not fenced).
    pub(super) fn is_live(&self) -> bool {
        self.fenced.is_none()
    }

    /// Whether this node may still tell its clients what it writes to the session: not fenced,
    /// and its lease not past its expiry by this node's own clock at `now`.
    pub(super) fn is_valid(&self, now: Instant) -> bool {
        self.is_live() && now < self.valid_until
    }

    pub(super) fn fence_error(&self, session_id: &str) -> Option<StoreError> {
        self.fenced.as_ref().map(|f| f.error(session_id))
    }
}

/// Why a session is no longer written here.
#[derive(Clone)]
pub(super) enum Fence {
    /// Another node took it over (a newer epoch).
    TakenOver {
        epoch: i64,
        current: i64,
        owner: String,
    },
}

impl Fence {
    pub(super) fn error(&self, session_id: &str) -> StoreError {
        match self {
            Fence::TakenOver {
                epoch,
                current,
                owner,
            } => StoreError::Fenced {
                session_id: session_id.to_owned(),
                epoch: *epoch,
                current: *current,
                owner: owner.clone(),
            },
        }
    }
}

#[derive(Clone)]
pub(super) enum Failure {
    Conflict { session_id: String, seq: u64 },
    Other(String),
}

impl Failure {
    pub(super) fn error(&self) -> StoreError {
        match self {
            Failure::Conflict { session_id, seq } => StoreError::Conflict {
                session_id: session_id.clone(),
                seq: *seq,
            },
            Failure::Other(message) => StoreError::WriterFailed {
                message: message.clone(),
            },
        }
    }
}

#[derive(Clone)]
pub(super) struct Row {
    pub(super) ticket: u64,
    pub(super) session_id: Arc<str>,
    pub(super) seq: i64,
    pub(super) turn_id: Option<String>,
    pub(super) at: i64,
    pub(super) kind: String,
    pub(super) payload: String,
    pub(super) epoch: i64,
}

pub(super) fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
