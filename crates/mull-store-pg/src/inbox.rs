//! The log's inbox on PostgreSQL (see [`mull_store::inbox`]): messages for a session from a
//! process that does not hold it — the dashboard, `mull approve`, another node.
//!
//! Table `mull_inbox`, the SQLite inbox's columns with times as microseconds since the Unix
//! epoch (as `mull_events.at`). A claim is one `UPDATE … WHERE taken IS NULL`, so of any
//! number of nodes exactly one wins it. Who takes: each node takes the messages of the chats it
//! holds, at its inbox sweep; a message for a chat no node holds is taken by the node that
//! opens the chat (taking its lease); the acting on a message is the taker's
//! ([`mull_store::InboxStore`]), written once for both backends.

use chrono::{DateTime, TimeZone, Utc};
use mull_store::{InboxEntry, InboxMessage, InboxStore, LogFuture, StoreError};
use tokio_postgres::Row;

use crate::conn::Conn;
use crate::error::{parse, server_error, Target};
use crate::schema;

/// The columns every inbox read selects, in [`entry`]'s order.
const COLUMNS: &str = "id, session_id, kind, body, at, taken, outcome";

/// A connection to a PostgreSQL log's inbox. Any process may open one, node or not; it is made
/// again when the database restarted.
pub struct PgInbox {
    client: Conn,
    target: Target,
}

impl std::fmt::Debug for PgInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgInbox")
            .field("database", &self.target.to_string())
            .finish_non_exhaustive()
    }
}

impl PgInbox {
    /// Opens the inbox of the mull database at `url` (refusing a database that is not a mull
    /// log of this schema, as a reader does).
    pub async fn open(url: &str) -> Result<PgInbox, StoreError> {
        let (config, target) = parse(url)?;
        let cannot = || server_error(format!("{target}: cannot connect"));
        let client = Conn::connect(&config, &target).await.map_err(cannot())?;
        schema::check_readable(&*client.client().await.map_err(cannot())?, &target).await?;
        Ok(PgInbox { client, target })
    }

    fn ctx(&self, what: &str) -> String {
        format!("{}: inbox: {what}", self.target)
    }

    async fn post_message(
        &self,
        session_id: &str,
        message: &InboxMessage,
        at: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        let row = self
            .client
            .query_one(
                "INSERT INTO mull_inbox (session_id, kind, body, at) VALUES ($1, $2, $3, $4)
                 RETURNING id",
                &[
                    &session_id,
                    &message.kind(),
                    &message.body(),
                    &at.timestamp_micros(),
                ],
            )
            .await
            .map_err(server_error(
                self.ctx(&format!("posting a message for session {session_id}")),
            ))?;
        Ok(row.get(0))
    }

    async fn waiting_for(&self, session_id: Option<&str>) -> Result<Vec<InboxEntry>, StoreError> {
        let kinds: Vec<&str> = InboxMessage::KINDS.to_vec();
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM mull_inbox
                     WHERE taken IS NULL AND ($1::text IS NULL OR session_id = $1)
                       AND kind = ANY($2::text[])
                     ORDER BY id"
                ),
                &[&session_id, &kinds],
            )
            .await
            .map_err(server_error(self.ctx("reading waiting messages")))?;
        Ok(rows.iter().map(entry).collect())
    }

    async fn get_one(&self, id: i64) -> Result<Option<InboxEntry>, StoreError> {
        let row = self
            .client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM mull_inbox WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(server_error(self.ctx(&format!("reading message {id}"))))?;
        Ok(row.as_ref().map(entry))
    }

    async fn update(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        what: String,
    ) -> Result<u64, StoreError> {
        self.client
            .execute(sql, params)
            .await
            .map_err(server_error(self.ctx(&what)))
    }
}

impl InboxStore for PgInbox {
    fn post<'a>(
        &'a self,
        session_id: &'a str,
        message: &'a InboxMessage,
        at: DateTime<Utc>,
    ) -> LogFuture<'a, i64> {
        Box::pin(self.post_message(session_id, message, at))
    }

    fn waiting<'a>(&'a self, session_id: Option<&'a str>) -> LogFuture<'a, Vec<InboxEntry>> {
        Box::pin(self.waiting_for(session_id))
    }

    fn get(&self, id: i64) -> LogFuture<'_, Option<InboxEntry>> {
        Box::pin(self.get_one(id))
    }

    fn claim(&self, id: i64, at: DateTime<Utc>) -> LogFuture<'_, bool> {
        Box::pin(async move {
            let n = self
                .update(
                    "UPDATE mull_inbox SET taken = $2 WHERE id = $1 AND taken IS NULL",
                    &[&id, &at.timestamp_micros()],
                    format!("claiming message {id}"),
                )
                .await?;
            Ok(n == 1)
        })
    }

    fn release(&self, id: i64) -> LogFuture<'_, ()> {
        Box::pin(async move {
            self.update(
                "UPDATE mull_inbox SET taken = NULL, outcome = NULL WHERE id = $1",
                &[&id],
                format!("giving message {id} back"),
            )
            .await
            .map(|_| ())
        })
    }

    fn finish<'a>(&'a self, id: i64, outcome: &'a str) -> LogFuture<'a, ()> {
        Box::pin(async move {
            self.update(
                "UPDATE mull_inbox SET outcome = $2 WHERE id = $1",
                &[&id, &outcome],
                format!("recording the outcome of message {id}"),
            )
            .await
            .map(|_| ())
        })
    }
}

fn micros(at: i64) -> DateTime<Utc> {
    Utc.timestamp_micros(at).single().unwrap_or_default()
}

fn entry(row: &Row) -> InboxEntry {
    let kind: &str = row.get(2);
    let body: &str = row.get(3);
    InboxEntry {
        id: row.get(0),
        session_id: row.get(1),
        message: InboxMessage::decode(kind, body),
        at: micros(row.get(4)),
        taken: row.get::<_, Option<i64>>(5).map(micros),
        outcome: row.get(6),
    }
}
