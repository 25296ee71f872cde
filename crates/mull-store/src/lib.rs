//! The event log of mull: an append-only SQLite database that is the source of truth for
//! every session, turn and stream part.
//!
//! What you use: [`Log::open`] for the one writer of a file (hand it to a session, which appends
//! every event through it), [`LogReader::open`] for readers in any process, [`check`] and
//! [`recover`] for a damaged file, [`export_jsonl`] / [`import_jsonl`] to move logs around, and
//! the folds views read ([`SessionState`], [`SessionOverview`], [`TurnPacing`], the cost
//! [`ledger`], [`diff`]). Another backend implements the two contracts every caller takes:
//! [`EventLog`] (writing) and [`ReadLog`] (reading); [`MemoryLog`] implements both in memory.
//!
//! ```
//! use mull_core::Event;
//! use mull_store::{Log, LogReader, ReadLog};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("chat.db");
//! // The one writer of the file; a session appends through it. Here one event, by hand.
//! let log = Log::open(&path)?;
//! let appended = log.append("chat-1", None, chrono::Utc::now(), Event::StepStarted { step: 0 })?;
//! // What an output gate waits for before something leaves the process.
//! futures_executor::block_on(log.durable(appended.seq))?;
//! log.close()?;
//!
//! // Readers: any number, from any process, while a writer runs.
//! let reader = LogReader::open(&path)?;
//! assert_eq!(reader.sessions()?[0].session_id, "chat-1");
//! # Ok(())
//! # }
//! ```
//!
//! # One writer
//! A database has exactly one writer: [`Log`]. Opening it takes an exclusive lock on a sidecar
//! file (`<db>.lock`), so a second writer — in this process or another — gets
//! [`StoreError::Locked`]. `Log` is a cheap `Clone + Send + Sync` handle; all clones feed one
//! queue, drained by a writer thread or by a barrier's caller (below).
//!
//! # Group commit
//! [`Log::append`] assigns the event's `seq` at once (strictly increasing, contiguous), queues
//! the row and returns the full [`Envelope`](mull_core::Envelope) without waiting. Rows go into
//! an open transaction, which is committed when it holds [`LogOptions::batch_max_events`] rows
//! (512), when [`LogOptions::batch_max_delay`] (5 ms) has passed since its first row, or when a
//! barrier arrives. One commit per batch is what makes a per-chunk log affordable: SQLite
//! commits cost far more than inserts. The writer thread is woken when a batch begins and once
//! a few rows wait (so it inserts them while the producer goes on), not once per row.
//!
//! A barrier ([`Log::flush`]) commits on its caller's own thread (after the writer thread's
//! batch, if one is being inserted): a commit in WAL mode with `synchronous=NORMAL` is a few
//! page writes without fsync, cheaper than two thread hand-offs. An output gate
//! ([`Log::durable`], below) does not commit at all. SQLite's automatic checkpoint is replaced by one the writer thread
//! runs (at [`LogOptions::checkpoint_pages`]): it copies the WAL back on a connection of its
//! own while commits go on, and only the last few frames, with their two fsyncs, with the
//! write connection held.
//!
//! # The output gate and what a crash can lose
//! Durable means a killed process (SIGKILL, panic, OOM) keeps it: committed (a commit is in the
//! WAL), or written to the log's record file `<db>-records` ([`records_path`]). Both are
//! written in seq order, so an event is durable once any later one is.
//!
//! The record file is what makes a gate cheap. A gate whose event is not committed writes the
//! queued rows to it in one `write` — no B-tree insert, no commit — and the writer thread,
//! which records the rows it takes the same way, commits them behind it with its batch (at
//! most [`LogOptions::batch_max_delay`] later). When a writer opens the log, the rows of the
//! file the database lacks are inserted before anything else; once the database holds all of
//! it, the file is emptied, and a clean close removes it. Readers read the database, and see
//! what a gate let out as follows:
//! - a reader opened in the writer's own process has the writer commit first, so it sees
//!   everything reported before it opened (a reader kept open sees new commits as they land);
//! - a reader in another process sees it once the writer commits it, within `batch_max_delay`;
//! - a reader that finds the writer gone (its lock free) and its record file not empty inserts
//!   the file's rows before it opens, taking the writer's lock for that moment: so no reader
//!   shows less than the last writer let out. With the lock held it also reads the WAL the way
//!   SQLite will, before SQLite does, to find damage SQLite would hide.
//!
//! The engine follows one rule (Durable Objects' output gate): **nothing leaves the process
//! before the events it depends on are durable**. What leaves is a tool run (after its
//! `tool_decided`), a turn's end reported to its caller (after its `turn_finished`; a client
//! tool request or an approval request reaches a caller that is not streaming this way), an
//! acknowledged submission (after its `submission_accepted`). [`Log::append_event`] hands back
//! the event's seq, a durability ticket, and the gate awaits [`Log::durable`]`(seq)`
//! ([`EventLog::durable`]) just before the thing leaves; it costs nothing when that seq is
//! durable already, and one `write` when it is not. A new way out of the process goes through the same gate. Work that leaves nothing — starting a model call,
//! folding, running the next step — does not wait: the events commit with the batch
//! ([`LogOptions::batch_max_delay`] at most) or with the next gate, whichever comes first.
//! [`Log::flush`] is the barrier over everything appended, for callers that want all of it.
//!
//! So a killed process loses exactly the events appended after the last durable one: at most
//! [`LogOptions::batch_max_delay`] (5 ms) of them, and **only events whose effects nobody
//! outside saw** — a turn's start and user message, streamed chunks, a finished step, a
//! blocked or substituted decision, whatever followed the last gate. One exception, on
//! purpose: parts streamed to a live client (and to `on_chunk` subscribers) are not gated, so
//! a client may have seen a few milliseconds of a turn a crash then loses; its stream is cut,
//! and the turn is either in the log (recovered as interrupted, with what was committed of its
//! message) or absent as a whole. Never lost: a decision whose tool ran, a reported turn end,
//! an acknowledged submission, anything before a completed [`Log::flush`]. The seqs in the log
//! stay contiguous either way.
//! - With [`Durability::Process`] (the default) the log runs in WAL mode with
//!   `synchronous=NORMAL`: a commit is written to the WAL but not fsynced, and the record file
//!   is not fsynced either. A process crash loses nothing durable; a power loss or OS crash may
//!   lose the last commits before the next checkpoint (never corrupting the file) and the record
//!   file's last writes, the gate's included. [`Durability::Power`]
//!   ([`LogOptions::durability`]) makes a power cut lose nothing durable either:
//!   `synchronous=FULL`, and `fdatasync` after every record-file write, at the cost of an fsync
//!   per gate.
//! - Damage beside the database is never silent and never deleted (see [`gate`]): a record file
//!   with a bad frame followed by good ones, rows that skip seqs, unreadable, or a directory in
//!   its place; a WAL with a bad frame followed by commits that verify (SQLite would drop them
//!   silently). Each is set aside with a name that says why (`<db>-records.damaged-<time>`, …);
//!   while one is there, writers refuse the log and readers report it
//!   ([`LogReader::side_damage`]). Only a torn last frame is not damage: a `write` a kill cut
//!   short never returned, so nothing depended on it.
//! - If a commit or a record write fails (disk full …), that batch is not committed; the writer
//!   stops and every later `append`, `durable` and `flush` returns [`StoreError::WriterFailed`],
//!   so nothing that depends on the lost batch leaves. What is durable stays: reopening the log
//!   inserts the rows its record file holds, and goes on.
//!
//! Dropping the last `Log` handle (or [`Log::close`]) commits what is queued and joins the
//! writer thread.
//!
//! # Readers and tail
//! [`LogReader`] is an independent read-only connection; open any number, from any process,
//! while the writer runs. Each query is a short read transaction (long reads go page by page)
//! so readers never hold back WAL checkpoints. [`LogReader::tail`] turns a reader into a
//! [`Tail`] that returns new events as soon as any process commits them, polling SQLite's
//! `data_version` every 5 ms.
//!
//! # Facts and projections
//! [`Facts`] is the one fold that reads what events say happened — each turn attempt, its
//! steps, each tool call with the seq and time of every stage — pushed one envelope at a time
//! (see [`facts`]); views read facts rather than matching events. State is a fold: [`SessionState::apply`] takes one envelope at a time. The engine keeps a
//! state current as it appends; [`LogReader::load_session`] rebuilds the same state from the
//! log; [`LogReader::turns`] folds only the lifecycle events (a partial index leaves the chunk
//! rows out), so listing turns stays cheap however long the streams were.
//! [`LogReader::session_overviews`] folds six lifecycle kinds of every session into a
//! [`SessionOverview`] (agent, first prompt, status mix, tokens, fork origin) for session lists;
//! [`TurnPacing`] folds one turn's events into its first-chunk time, chunk gaps and stalls.
//!
//! # Storage
//! Table `events(seq, session_id, turn_id, at, v, kind, payload)`: `at` is microseconds since
//! the Unix epoch (an integer, so its order is time order; JSONL exports write it as RFC 3339
//! text), `payload` is exactly
//! [`Event::encode`](mull_core::Event::encode). The schema is versioned by `PRAGMA user_version`
//! and recognised by `PRAGMA application_id`; see [`schema`].
//!
//! The table's rowid is the seq, so the whole log reads in order without an index. One partial
//! index, on `(session_id, seq)` for every row that is not a chunk, finds a session's lifecycle
//! events. Chunks, the bulk of the log, are in no index: each would cost a second B-tree insert
//! and each commit another page (a fifth of a short turn's time). A session's chunks are found
//! through its turns instead — they lie between a `turn_started` of the session and that
//! turn's `turn_finished` — by walking those stretches of the table
//! ([`LogReader::session_page`]).
//!
//! # Damage
//! A writer refuses a log whose pages are damaged ([`StoreError::Damaged`]), after a bounded
//! check at open, or whose side files are (above); reads that meet damage name the seqs they
//! cannot get past. [`check`] reports every unreadable stretch of seqs, the sessions it costs,
//! and every damaged file beside the database; [`recover`] copies every readable event of the
//! database, its WAL and its record files into a new log. See [`integrity`].
//!
//! # JSONL
//! [`export_jsonl`] and [`import_jsonl`] move logs in and out as one envelope per line,
//! byte-for-byte round-trippable; see [`jsonl`]. An import streams its file into one
//! transaction (all of it or nothing), holding one batch of rows in memory at a time; appends
//! wait until it is done.

pub mod approvals;
pub mod backend;
pub mod budget;
mod damage;
pub mod decode;
pub mod diff;
mod durability;
pub mod error;
pub mod facts;
pub mod fork;
pub mod gate;
pub mod inbox;
pub mod integrity;
pub mod jsonl;
pub mod ledger;
pub mod memory;
mod open_check;
mod open_turns;
pub mod overview;
pub mod pacing;
pub mod projection;
pub mod read;
#[doc(hidden)]
pub mod read_conformance;
mod read_sqlite;
pub mod reader;
pub mod recovery;
pub mod request;
mod row;
mod salvage;
pub mod schema;
pub mod tail;
pub mod timestamp;
pub mod tool_usage;
pub mod writer;

pub use approvals::{ApprovalAnswer, PendingApproval};
pub use backend::{EventLog, LogFuture};
pub use budget::{BudgetDecision, BudgetFold};
pub use error::StoreError;
pub use facts::{CallStage, FactChange, Facts, Stamp, StepFact, ToolCallFact, TurnFact};
pub use fork::{ForkError, ForkPoint, ResolvedFork, TurnRef};
pub use gate::{Durability, SideDamage};
pub use inbox::{Inbox, InboxEntry, InboxMessage, InboxStore, INBOX_SWEEP_PERIOD};
pub use integrity::{check, recover, DamagedRange, IntegrityReport, RecoverReport};
pub use jsonl::{export_jsonl, import_jsonl};
pub use ledger::{Amount, CostLedger, CostTotals};
pub use memory::MemoryLog;
pub use overview::{SessionOverview, SessionOverviews, StatusMix, OVERVIEW_KINDS};
pub use pacing::TurnPacing;
pub use projection::{
    PendingClientCall, SessionState, SessionToolCalls, SubagentParent, SubagentRun, Submission,
    SubmissionPhase, ToolCallRecord, ToolStats, TurnSummary,
};
pub use read::{ChangeCursor, Changes, ReadLog, SessionChange, SessionKey};
pub use reader::{LogReader, SessionSummary};
pub use recovery::RecoveredTurn;
pub use request::{RequestFold, RequestPhase, Verdict};
pub use tail::{Tail, TAIL_POLL_INTERVAL};
pub use writer::{records_path, Appended, Log, LogOptions};
