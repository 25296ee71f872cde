//! mull's event log on PostgreSQL, for running `mull serve` on several nodes over one database.
//!
//! The SQLite log (`mull-store`) stays the default: one file, one writer process. This crate
//! stores the same events — same payload encoding, same decoder, same projection — in a
//! PostgreSQL database, where any number of nodes write, each session by one node at a time:
//!
//! - [`PgLog`] is one node's writer. It implements [`mull_store::EventLog`], the interface the
//!   engine drives a session through, with a lease per session and every event stamped with the
//!   lease's epoch, so a node that lost a session can never write to it again (see [`log`]).
//! - [`PgReader`] implements [`mull_store::ReadLog`], the read contract every reader takes
//!   (dashboard, replay, diff, fork, backtest, stats, the OTLP re-export): the log is read where
//!   it is, never copied (see [`reader`]). [`Reads`] holds its queries, for any node, and the
//!   JSONL export.
//! - [`copy`] copies a SQLite log into PostgreSQL ([`import`]).
//! - [`PgInbox`] is the log's inbox (`mull_inbox`): answers posted by processes that do not
//!   hold a session, taken by the node that does (see [`inbox`]).
//! - [`testing`] starts a throwaway server for tests and benches.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use mull_store::{EventLog, ReadLog};
//! use mull_store_pg::{PgLog, PgOptions, PgReader};
//!
//! # async fn node() -> Result<(), Box<dyn std::error::Error>> {
//! let url = "postgres://mull:secret@db:5432/mull";
//! // One writer per node, each with a name of its own; a session opens on it with the engine's
//! // `Session::open_on`, a server with `ServerState::on`.
//! let log: Arc<dyn EventLog> = Arc::new(PgLog::connect(url, PgOptions::new("web-1")).await?);
//! // Readers on any machine: every reader of the log takes a `&dyn ReadLog`.
//! let reader = PgReader::open(url)?;
//! println!("{} sessions", reader.sessions()?.len());
//! # drop(log);
//! # Ok(())
//! # }
//! ```
//!
//! # Storage
//! Table `mull_events(session_id, seq, turn_id, at, v, kind, payload, epoch)`, primary key
//! `(session_id, seq)`: a session's seqs start at 1 and are contiguous, and an append at a seq
//! the session already has fails with `unique_violation` ([`mull_store::StoreError::Conflict`]).
//! Table `mull_sessions(session_id, first_seq, last_seq, first_at, last_at, changed)`: one row
//! per session, kept current by the statement that commits each batch, for listing the newest
//! sessions and the sessions changed since a cursor without reading events.
//! Table `mull_leases(session_id, owner, epoch, expires_at)`: who writes a session. Tables
//! `mull_cancels` and `mull_inbox` carry requests to the node that holds a session. The
//! schema is versioned in `mull_meta`; see [`schema`].
//!
//! # What a crash or partition can lose
//! A killed node loses what it had queued but not committed: at most one batch of chunks per
//! session (the last few milliseconds of a stream), exactly as a killed SQLite writer; every
//! barrier it passed is in the database. Its sessions wait for their leases to expire (the
//! lease's time to live) and are then taken over by the next node that opens them, which
//! recovers their open turns as a restart would. A node cut off from the database or paused
//! past its lease loses nothing already committed; its later writes are refused by the epoch,
//! and its turns fail with [`mull_store::StoreError::Fenced`]. Durability of a commit is
//! PostgreSQL's (`synchronous_commit`, replication), not mull's.

mod conn;
pub mod copy;
pub mod error;
pub mod inbox;
pub mod log;
pub mod read;
pub mod reader;
pub mod schema;
pub mod testing;

pub use copy::import;
pub use error::is_postgres_url;
pub use inbox::PgInbox;
pub use log::{PgLog, PgOptions, PgTraffic};
pub use read::Reads;
pub use reader::PgReader;
