//! The one error type of the log: every variant says what was wrong and where.

use std::path::{Path, PathBuf};

use mull_core::EventDecodeError;

/// Everything that can go wrong opening, writing, reading, exporting or importing a log.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A SQLite call failed; `context` says which operation on which file.
    #[error("{context}: {source}")]
    Sqlite {
        context: String,
        #[source]
        source: rusqlite::Error,
    },
    /// The file exists but is not a SQLite database at all.
    #[error("{path}: not a SQLite database, so not a mull log")]
    NotADatabase { path: PathBuf },
    /// The path is a directory: a log is one file.
    #[error("{path}: a directory, not a log file (a log is one file, such as {path}/mull.db)")]
    IsADirectory { path: PathBuf },
    /// The file is a JSONL export, given where a database is expected.
    #[error("{path}: a JSONL export, not a database; `mull import {path} NEW.db` loads it into one (`mull replay {path}` reads it as it is)")]
    JsonlNotDatabase { path: PathBuf },
    /// The file is a SQLite database that some other program made.
    #[error("{path}: a SQLite database but not a mull log (application_id {application_id:#x}, {tables} table(s))")]
    NotAMullLog {
        path: PathBuf,
        application_id: i64,
        tables: i64,
    },
    /// The log was written by a newer mull whose schema this build does not know.
    #[error("{path}: schema version {found} is newer than this build supports ({supported}); upgrade mull to open it")]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    /// A read-only open found a schema older than this build reads; a writer migrates it.
    #[error("{path}: schema version {found} is older than this build reads ({supported}); open it once with a writer to migrate it")]
    OlderSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    /// The file's pages are damaged: `what` says where (SQLite's complaints, or the seqs that
    /// cannot be read).
    #[error("{path}: the log is damaged: {what}")]
    Damaged { path: PathBuf, what: String },
    /// A read-only open of a file that does not exist.
    #[error("{path}: no such log")]
    Missing { path: PathBuf },
    /// Another writer (in this or another process) holds the log.
    #[error("{path}: the log is locked by another writer")]
    Locked { path: PathBuf },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A stored payload does not decode.
    #[error("event seq {seq}: {source}")]
    Decode {
        seq: u64,
        #[source]
        source: EventDecodeError,
    },
    /// A stored timestamp is not the fixed-width RFC 3339 form the log writes.
    #[error("event seq {seq}: bad timestamp {text:?}")]
    BadTimestamp { seq: u64, text: String },
    /// A commit failed; the events of that batch are not in the log and the writer stopped.
    #[error("the log writer stopped: {message}")]
    WriterFailed { message: String },
    /// The writer thread is gone (it panicked, or the log was closed).
    #[error("the log writer thread is gone")]
    WriterGone,
    /// A JSONL line is malformed or does not fit the log.
    #[error("{source_name}:{line}: {message}")]
    Jsonl {
        source_name: String,
        line: u64,
        message: String,
    },
    /// Another node took the session over (its lease has a newer epoch): the events appended
    /// here under the old epoch were refused, in the transaction that tried to write them.
    #[error("session {session_id}: fenced: written under lease epoch {epoch}, but {owner} holds epoch {current} now; the events were not written")]
    Fenced {
        session_id: String,
        epoch: i64,
        current: i64,
        owner: String,
    },
    /// Another node holds the session's lease and it has not expired.
    #[error("session {session_id}: held by node {owner} (lease epoch {epoch}) for {expires_in_ms} ms more")]
    LeaseHeld {
        session_id: String,
        owner: String,
        epoch: i64,
        expires_in_ms: i64,
    },
    /// An append at a seq the session already has: another writer appended there.
    #[error("session {session_id}: seq {seq} is already in the log (another writer appended it)")]
    Conflict { session_id: String, seq: u64 },
    /// An event of a session this log handle has not opened for writing.
    #[error("session {session_id}: not open for writing on this log (open the session first)")]
    NotOpen { session_id: String },
    /// A PostgreSQL database with tables of some other program in it and no mull schema.
    #[error("{database}: a PostgreSQL database of another program ({tables} table(s), none of them mull's); give mull a database of its own")]
    ForeignDatabase { database: String, tables: i64 },
    /// A database server refused or failed an operation; `context` says which, on which database.
    #[error("{context}: {message}")]
    Server { context: String, message: String },
    /// A fork's origin chain loops or runs deeper than any real chain of forks.
    #[error("session {session_id}: its chain of fork origins {why}")]
    ForkChain { session_id: String, why: String },
    /// Writing an export failed.
    #[error("writing the export: {0}")]
    Export(#[source] std::io::Error),
}

impl StoreError {
    /// Wraps a SQLite error with the operation and file it happened in.
    pub(crate) fn sqlite(context: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> StoreError {
        let context = context.into();
        move |source| StoreError::Sqlite { context, source }
    }
}

/// Damage that [`check`](crate::check) and [`recover`](crate::recover) can measure and get around: the error says so.
pub(crate) fn damaged(path: &Path, what: String) -> StoreError {
    StoreError::Damaged {
        path: path.to_owned(),
        what: format!(
            "{what}. `mull check {0}` lists what it costs; `mull recover {0} NEW.db` copies \
             every readable event into a new log",
            path.display()
        ),
    }
}
