//! The log's inbox: inputs for a session from a process that cannot write the log.
//!
//! A log has one writer ([`Log`](crate::Log) holds `<db>.lock`), and that writer may be another
//! process (`mull serve`, `mull demo`). A reader such as the dashboard that wants to answer a
//! pending approval cannot append the answer itself; it posts it to the inbox instead: a table
//! of its own, `mull_inbox`, in the same SQLite file, which any process may insert into through
//! its own connection (SQLite's locking serializes the writes; the log runs in WAL mode). The
//! process that writes the session takes each message and turns it into the one input it
//! stands for (`Session::command`), so the answer enters the log as an input event like any
//! other; the inbox row is then marked taken, with what came of it.
//!
//! Who takes: the process that writes the log. `mull serve` looks every [`INBOX_SWEEP_PERIOD`]
//! and opens the sessions messages wait for; the demo takes its session's messages when it
//! opens it and while its booking waits for a person; when no writer runs, `mull approve` takes
//! the session's messages when it opens it. A library application calls
//! `Session::take_inbox` where it suits it (after opening a session, on a timer). A message is *claimed* before it is
//! acted on (an update only one process can win), so two takers never both act on it; a crash
//! between the claim and the input's event loses that message, and the approval it answered
//! stays pending in the log, answerable again.
//!
//! The events table is untouched: the inbox is created on first use (`CREATE TABLE IF NOT
//! EXISTS`) and is not part of the log's schema version, exports or imports. The PostgreSQL
//! backend keeps its cross-node cancellations the same way (`mull_cancels`).
//!
//! On PostgreSQL the inbox is a table of the schema (`mull_inbox`, in `mull-store-pg`), with
//! the same columns and claim rule; both backends implement [`InboxStore`], which every taker
//! and poster goes through. There each node takes the messages of the chats it holds, and a
//! message for a chat no node holds is taken by the node that opens it (taking its lease).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mull_core::Input;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::backend::LogFuture;
use crate::error::StoreError;
use crate::schema;
use crate::timestamp;

/// How often a process that writes sessions looks in the inbox for them.
pub const INBOX_SWEEP_PERIOD: Duration = Duration::from_millis(500);

const CREATE: &str = "CREATE TABLE IF NOT EXISTS mull_inbox (
         id         INTEGER PRIMARY KEY,
         session_id TEXT    NOT NULL,
         kind       TEXT    NOT NULL,
         body       TEXT    NOT NULL,
         at         TEXT    NOT NULL,
         taken      TEXT,
         outcome    TEXT
     );
     CREATE INDEX IF NOT EXISTS mull_inbox_waiting ON mull_inbox (session_id, id)
         WHERE taken IS NULL;";

/// What a message asks of the session's writer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InboxMessage {
    /// A person's answer to approval request `approval_id` ([`Input::ApprovalAnswer`]).
    ApprovalAnswer {
        approval_id: String,
        approved: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Who answered (`mull dash`, `mull approve` …): recorded with the answer. Rows
        /// posted before it existed have none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
}

impl InboxMessage {
    /// The `kind` column the message is stored under.
    pub fn kind(&self) -> &'static str {
        match self {
            InboxMessage::ApprovalAnswer { .. } => "approval_answer",
        }
    }

    /// The kinds this build can act on; rows of other kinds (a newer build's) are left alone.
    pub const KINDS: [&'static str; 1] = ["approval_answer"];

    /// The input the session's writer records for the message.
    pub fn to_input(&self) -> Input {
        match self {
            InboxMessage::ApprovalAnswer {
                approval_id,
                approved,
                reason,
                by,
            } => Input::ApprovalAnswer {
                approval_id: approval_id.clone(),
                approved: *approved,
                reason: reason.clone(),
                by: by.clone(),
            },
        }
    }

    /// The `body` column: the message's fields as JSON, without its kind. Every backend
    /// stores a message this way.
    pub fn body(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.remove("kind");
        }
        value.to_string()
    }

    /// The message a row's `kind` and `body` hold, or why they hold none.
    pub fn decode(kind: &str, body: &str) -> Result<InboxMessage, String> {
        let mut value: serde_json::Value =
            serde_json::from_str(body).map_err(|e| format!("body is not JSON: {e}"))?;
        let map = value
            .as_object_mut()
            .ok_or_else(|| "body is not a JSON object".to_owned())?;
        map.insert("kind".to_owned(), kind.into());
        serde_json::from_value(value).map_err(|e| format!("not a {kind} message: {e}"))
    }
}

/// One message in the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// The row id: increasing, in the order messages were posted.
    pub id: i64,
    pub session_id: String,
    /// The message, or why its row does not decode.
    pub message: Result<InboxMessage, String>,
    /// When it was posted.
    pub at: DateTime<Utc>,
    /// When a writer claimed it (`None`: still waiting).
    pub taken: Option<DateTime<Utc>>,
    /// What came of it, once acted on (`answered`, or the refusal).
    pub outcome: Option<String>,
}

/// A log's inbox, whichever backend holds it: the SQLite [`Inbox`] or PostgreSQL's. Takers
/// and posters (`Session::take_inbox`, the server's sweep, `mull approve`, the dashboard) go
/// through this, so the claim rule is written once, in the taker.
pub trait InboxStore: Send + Sync + std::fmt::Debug {
    /// Posts `message` for the writer of `session_id`; returns its id. Committed when done.
    fn post<'a>(
        &'a self,
        session_id: &'a str,
        message: &'a InboxMessage,
        at: DateTime<Utc>,
    ) -> LogFuture<'a, i64>;

    /// The messages for `session_id` (every session's with `None`) no writer has taken,
    /// oldest first; rows of kinds this build does not know are left out.
    fn waiting<'a>(&'a self, session_id: Option<&'a str>) -> LogFuture<'a, Vec<InboxEntry>>;

    /// One message by id.
    fn get(&self, id: i64) -> LogFuture<'_, Option<InboxEntry>>;

    /// Claims message `id`: true for the one caller that wins, false when it was taken already.
    fn claim(&self, id: i64, at: DateTime<Utc>) -> LogFuture<'_, bool>;

    /// Gives a claimed message back, so the next sweep tries again.
    fn release(&self, id: i64) -> LogFuture<'_, ()>;

    /// Records what came of a claimed message.
    fn finish<'a>(&'a self, id: i64, outcome: &'a str) -> LogFuture<'a, ()>;
}

impl InboxStore for Inbox {
    fn post<'a>(
        &'a self,
        session_id: &'a str,
        message: &'a InboxMessage,
        at: DateTime<Utc>,
    ) -> LogFuture<'a, i64> {
        Box::pin(async move { Inbox::post(self, session_id, message, at) })
    }

    fn waiting<'a>(&'a self, session_id: Option<&'a str>) -> LogFuture<'a, Vec<InboxEntry>> {
        Box::pin(async move { Inbox::waiting(self, session_id) })
    }

    fn get(&self, id: i64) -> LogFuture<'_, Option<InboxEntry>> {
        Box::pin(async move { Inbox::get(self, id) })
    }

    fn claim(&self, id: i64, at: DateTime<Utc>) -> LogFuture<'_, bool> {
        Box::pin(async move { Inbox::claim(self, id, at) })
    }

    fn release(&self, id: i64) -> LogFuture<'_, ()> {
        Box::pin(async move { Inbox::release(self, id) })
    }

    fn finish<'a>(&'a self, id: i64, outcome: &'a str) -> LogFuture<'a, ()> {
        Box::pin(async move { Inbox::finish(self, id, outcome) })
    }
}

/// A connection to a log's inbox. Any process may open one, while a writer runs or not.
#[derive(Debug)]
pub struct Inbox {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl Inbox {
    /// Opens the inbox of the existing log at `path` (refusing a file that is not a mull log
    /// of this schema, as a reader does), creating its table on first use.
    pub fn open(path: impl AsRef<Path>) -> Result<Inbox, StoreError> {
        let path = path.as_ref().to_owned();
        let conn = schema::open_reader(&path)?;
        let ctx = |what: &str| format!("{}: {what}", path.display());
        conn.pragma_update(None, "query_only", false)
            .map_err(StoreError::sqlite(ctx("opening the inbox for writing")))?;
        conn.execute_batch(CREATE)
            .map_err(StoreError::sqlite(ctx("creating the inbox")))?;
        Ok(Inbox {
            conn: Mutex::new(conn),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn ctx(&self, what: &str) -> String {
        format!("{}: inbox: {what}", self.path.display())
    }

    fn with<R>(
        &self,
        f: impl FnOnce(&Connection) -> Result<R, rusqlite::Error>,
        what: &str,
    ) -> Result<R, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&conn).map_err(StoreError::sqlite(self.ctx(what)))
    }

    /// Posts `message` for the writer of `session_id`; returns its row id. Committed when this
    /// returns.
    pub fn post(
        &self,
        session_id: &str,
        message: &InboxMessage,
        at: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        self.with(
            |c| {
                c.execute(
                    "INSERT INTO mull_inbox (session_id, kind, body, at) VALUES (?1, ?2, ?3, ?4)",
                    params![
                        session_id,
                        message.kind(),
                        message.body(),
                        timestamp::format(at)
                    ],
                )?;
                Ok(c.last_insert_rowid())
            },
            &format!("posting a message for session {session_id}"),
        )
    }

    /// The messages for `session_id` (every session's with `None`) that no writer has taken,
    /// oldest first. Rows of kinds this build does not know are left out.
    pub fn waiting(&self, session_id: Option<&str>) -> Result<Vec<InboxEntry>, StoreError> {
        let kinds = InboxMessage::KINDS
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT id, session_id, kind, body, at, taken, outcome FROM mull_inbox
             WHERE taken IS NULL AND (?1 IS NULL OR session_id = ?1) AND kind IN ({kinds})
             ORDER BY id"
        );
        self.with(
            |c| {
                let mut stmt = c.prepare_cached(&sql)?;
                let rows = stmt.query_map(params![session_id], entry)?;
                rows.collect()
            },
            "reading waiting messages",
        )
    }

    /// One message by row id.
    pub fn get(&self, id: i64) -> Result<Option<InboxEntry>, StoreError> {
        self.with(
            |c| {
                c.query_row(
                    "SELECT id, session_id, kind, body, at, taken, outcome FROM mull_inbox
                     WHERE id = ?1",
                    params![id],
                    entry,
                )
                .optional()
            },
            &format!("reading message {id}"),
        )
    }

    /// Claims message `id` for acting on it: true for the one caller that wins, false when a
    /// writer took it already.
    pub fn claim(&self, id: i64, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.with(
            |c| {
                c.execute(
                    "UPDATE mull_inbox SET taken = ?2 WHERE id = ?1 AND taken IS NULL",
                    params![id, timestamp::format(at)],
                )
            },
            &format!("claiming message {id}"),
        )
        .map(|n| n == 1)
    }

    /// Gives a claimed message back (acting on it failed before anything was recorded), so the
    /// next sweep tries again.
    pub fn release(&self, id: i64) -> Result<(), StoreError> {
        self.with(
            |c| {
                c.execute(
                    "UPDATE mull_inbox SET taken = NULL, outcome = NULL WHERE id = ?1",
                    params![id],
                )
            },
            &format!("giving message {id} back"),
        )
        .map(|_| ())
    }

    /// Records what came of a claimed message.
    pub fn finish(&self, id: i64, outcome: &str) -> Result<(), StoreError> {
        self.with(
            |c| {
                c.execute(
                    "UPDATE mull_inbox SET outcome = ?2 WHERE id = ?1",
                    params![id, outcome],
                )
            },
            &format!("recording the outcome of message {id}"),
        )
        .map(|_| ())
    }
}

fn entry(row: &rusqlite::Row<'_>) -> Result<InboxEntry, rusqlite::Error> {
    let kind: String = row.get(2)?;
    let body: String = row.get(3)?;
    let at: String = row.get(4)?;
    let taken: Option<String> = row.get(5)?;
    Ok(InboxEntry {
        id: row.get(0)?,
        session_id: row.get(1)?,
        message: InboxMessage::decode(&kind, &body),
        at: timestamp::parse(&at).unwrap_or_default(),
        taken: taken.and_then(|t| timestamp::parse(&t)),
        outcome: row.get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::Log;

    fn answer(id: &str) -> InboxMessage {
        InboxMessage::ApprovalAnswer {
            approval_id: id.to_owned(),
            approved: true,
            reason: None,
            by: Some("a test".into()),
        }
    }

    #[test]
    fn a_reader_posts_while_the_writer_runs_and_one_taker_wins_the_claim() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        let log = Log::open(&path).expect("writer");
        // Another connection (as another process would have) posts while the writer holds the lock.
        let poster = Inbox::open(&path).expect("inbox");
        let now = Utc::now();
        let id = poster.post("s1", &answer("apr_1"), now).expect("posts");
        poster.post("s2", &answer("apr_2"), now).expect("posts");

        let taker = Inbox::open(log.path()).expect("inbox");
        let waiting = taker.waiting(Some("s1")).expect("reads");
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].id, id);
        assert_eq!(waiting[0].message, Ok(answer("apr_1")));
        assert_eq!(
            waiting[0].message.clone().map(|m| m.to_input()),
            Ok(Input::ApprovalAnswer {
                approval_id: "apr_1".into(),
                approved: true,
                reason: None,
                by: Some("a test".into()),
            })
        );
        assert_eq!(taker.waiting(None).expect("reads").len(), 2);

        assert!(taker.claim(id, now).expect("claims"));
        assert!(!poster.claim(id, now).expect("claims"), "one winner");
        taker.finish(id, "answered").expect("finishes");
        assert!(taker.waiting(Some("s1")).expect("reads").is_empty());
        let done = poster.get(id).expect("reads").expect("row");
        assert_eq!(done.outcome.as_deref(), Some("answered"));
        assert!(done.taken.is_some());

        // Appends go on beside the inbox's writes.
        log.append(
            "s1",
            None,
            now,
            mull_core::Event::SessionOpened {
                agent: "a".into(),
                metadata: serde_json::Value::Null,
            },
        )
        .expect("appends");
        log.close().expect("closes");
    }

    #[test]
    fn a_claim_given_back_waits_again_and_unknown_kinds_are_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.db");
        Log::open(&path).expect("writer").close().expect("closes");
        let inbox = Inbox::open(&path).expect("inbox");
        let id = inbox.post("s", &answer("a"), Utc::now()).expect("posts");
        assert!(inbox.claim(id, Utc::now()).expect("claims"));
        inbox.release(id).expect("releases");
        assert_eq!(inbox.waiting(Some("s")).expect("reads").len(), 1);
        inbox
            .with(
                |c| {
                    c.execute(
                        "INSERT INTO mull_inbox (session_id, kind, body, at) VALUES ('s', 'later_kind', '{}', '2025-01-01T00:00:00.000000Z')",
                        [],
                    )
                },
                "test row",
            )
            .expect("inserts");
        assert_eq!(inbox.waiting(Some("s")).expect("reads").len(), 1);
        assert!(
            InboxMessage::decode("approval_answer", "{\"approved\": 1}").is_err(),
            "a malformed body says so"
        );
    }

    #[test]
    fn a_file_that_is_not_a_log_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = Inbox::open(dir.path().join("none.db")).expect_err("missing");
        assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    }
}
