//! Reading the PostgreSQL log, and the lease rows: one connection, requests pipelined.
//!
//! Every read is one statement, so it sees one consistent snapshot. Rows decode exactly as in
//! the SQLite log (same payload encoding, same decoder).

use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use mull_core::{Envelope, Event};
use mull_store::{
    timestamp, ChangeCursor, Changes, SessionChange, SessionKey, SessionState, SessionSummary,
    StoreError,
};
use tokio_postgres::{Config, Row};

use crate::conn::Conn;
use crate::error::{parse, server_error, Target};
use crate::schema;

/// The columns every event read selects, in [`envelope`]'s order.
const COLUMNS: &str = "seq, session_id, turn_id, at, v, payload";

/// The columns a session summary selects, in [`summary`]'s order.
const SESSION_COLUMNS: &str = "session_id, first_seq, last_seq, first_at, last_at";

/// How many rows a long read takes per statement.
const PAGE: i64 = 4096;

/// The longest chain of forks a log may hold (as in the SQLite log).
const MAX_FORK_DEPTH: usize = 256;

/// Reads of one PostgreSQL log (and the lease changes a writer makes next to them). The
/// connection is made again when the database restarted (see `conn`).
pub struct Reads {
    client: Conn,
    target: Target,
}

impl std::fmt::Debug for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reads")
            .field("database", &self.target.to_string())
            .finish_non_exhaustive()
    }
}

mod open;

pub(crate) use open::OpenedLease;

/// A lease found taken over: (the epoch it was held at, the current epoch, the current owner).
pub(crate) type Lost = (String, (i64, i64, String));

/// How a lease renewal treats a lease row another statement holds locked right now (a batch's
/// commit holds its sessions' rows `FOR SHARE` while it runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lock {
    /// Leaves the row for a later statement: one busy session never holds up the renewal of
    /// every other lease of the node.
    Skip,
    /// Waits for the row, up to the connection's lock timeout.
    Wait,
}

/// What one renewal statement found.
#[derive(Debug, Default)]
pub(crate) struct Renewal {
    /// Leases another node took over (or that were given back): their sessions are fenced.
    pub(crate) lost: Vec<Lost>,
    /// Leases still this node's whose rows were locked, so not renewed: (session, epoch).
    pub(crate) busy: Vec<(String, i64)>,
}

impl Reads {
    pub(crate) async fn connect(config: &Config, target: &Target) -> Result<Reads, StoreError> {
        Ok(Reads {
            client: Conn::connect(config, target)
                .await
                .map_err(server_error(format!("{target}: cannot connect")))?,
            target: target.clone(),
        })
    }

    /// Bounds how long a statement on this connection waits for a row lock. The lease
    /// connection uses it: a lease row can stay locked by a node that was paused halfway
    /// through a transaction, and a take-over or renewal stuck behind it would stall every
    /// lease change of this node (one connection runs them in turn). A statement that waits
    /// longer fails, and the sweep or renewal tries again on its next round.
    pub(crate) async fn limit_lock_waits(&self, limit: Duration) -> Result<(), StoreError> {
        let ms = limit.as_millis().max(1);
        self.client
            .set(&format!("SET lock_timeout = {ms}"))
            .await
            .map_err(server_error(self.ctx("limiting lock waits")))
    }

    /// Round trips made on this connection so far, and statements prepared among them.
    pub(crate) fn round_trips(&self) -> (u64, u64) {
        let t = self.client.traffic();
        (
            t.round_trips.load(std::sync::atomic::Ordering::Relaxed),
            t.prepares.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Opens the log at `url` for reading only: checks it is a mull database of this schema and
    /// changes nothing.
    pub async fn open(url: &str) -> Result<Reads, StoreError> {
        let (config, target) = parse(url)?;
        Reads::open_with(&config, &target).await
    }

    /// [`Reads::open`] with the connection settings already parsed.
    pub(crate) async fn open_with(config: &Config, target: &Target) -> Result<Reads, StoreError> {
        let (config, target) = (config.clone(), target.clone());
        let reads = Reads::connect(&config, &target).await?;
        let client = reads
            .client
            .client()
            .await
            .map_err(server_error(format!("{target}: cannot connect")))?;
        schema::check_readable(&client, &target).await?;
        Ok(reads)
    }

    /// The database, as errors name it (never with a password).
    pub fn database(&self) -> String {
        self.target.to_string()
    }

    fn ctx(&self, what: &str) -> String {
        format!("{}: {what}", self.target)
    }

    async fn envelopes(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        what: &str,
    ) -> Result<Vec<Envelope>, StoreError> {
        let rows = self
            .client
            .query(sql, params)
            .await
            .map_err(server_error(self.ctx(what)))?;
        rows.iter().map(envelope).collect()
    }

    /// Rebuilds a session's state by folding all its events; also gives its last seq. A fork
    /// folds its origin's events up to the fork point first (recursively, as the SQLite log
    /// resolves forks), then its own.
    ///
    /// The session's first page is read first: it is the fold's first page, and its seq 1
    /// says whether the session is a fork ([`Reads::fork_origin`] asks the same row). Most
    /// sessions are none, and then opening one costs one round trip less.
    pub async fn load_session(&self, session_id: &str) -> Result<(SessionState, u64), StoreError> {
        let first = self.session_page(session_id, 0, PAGE as usize).await?;
        self.fold_session(session_id, first).await
    }

    /// [`Reads::load_session`] with the session's first page already read.
    pub(crate) async fn fold_session(
        &self,
        session_id: &str,
        first: Vec<Envelope>,
    ) -> Result<(SessionState, u64), StoreError> {
        let forked = first
            .first()
            .is_some_and(|e| e.seq == 1 && matches!(e.event, Event::SessionForked { .. }));
        if forked {
            return self.load_fork(session_id).await;
        }
        let mut state = SessionState::new(session_id);
        let mut last_seq = 0;
        let mut page = first;
        loop {
            let full = page.len() == PAGE as usize;
            for env in &page {
                state.apply_own(mull_core::EventRef::of(env));
                last_seq = env.seq;
            }
            if !full {
                return Ok((state, last_seq));
            }
            page = self
                .session_page(session_id, last_seq, PAGE as usize)
                .await?;
        }
    }

    /// [`Reads::load_session`] of a fork: its origins' events up to each fork point, then its
    /// own.
    async fn load_fork(&self, session_id: &str) -> Result<(SessionState, u64), StoreError> {
        let mut state = SessionState::new(session_id);
        let mut last_seq = 0;
        for (session, upto) in self.fork_chain(session_id).await? {
            let own = session == session_id;
            let mut after = 0u64;
            loop {
                let page = self.session_page(&session, after, PAGE as usize).await?;
                let full = page.len() == PAGE as usize;
                let past = page.last().is_some_and(|e| e.seq > upto);
                for env in page.iter().take_while(|e| e.seq <= upto) {
                    state.apply_own(mull_core::EventRef::of(env));
                    after = env.seq;
                }
                if own {
                    last_seq = after;
                }
                if !full || past {
                    break;
                }
            }
        }
        Ok((state, last_seq))
    }

    /// The session a fork was made from and the seq its history ends at there (a seq of the
    /// origin session: seqs count per session here), or `None` for a session that is no fork.
    pub async fn fork_origin(&self, session_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        let first = self
            .envelopes(
                &format!(
                    "SELECT {COLUMNS} FROM mull_events WHERE session_id = $1 AND seq = 1 \
                     AND kind = 'session_forked'"
                ),
                &[&session_id],
                "reading a fork origin",
            )
            .await?;
        Ok(first.into_iter().find_map(|env| match env.event {
            Event::SessionForked {
                origin, origin_seq, ..
            } => Some((origin, origin_seq)),
            _ => None,
        }))
    }

    /// (session, last seq of its part of the history), from the root origin to `session_id`.
    async fn fork_chain(&self, session_id: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let mut chain = vec![(session_id.to_owned(), u64::MAX)];
        let mut current = session_id.to_owned();
        while let Some((origin, seq)) = self.fork_origin(&current).await? {
            let broken = |why: String| StoreError::ForkChain {
                session_id: session_id.to_owned(),
                why,
            };
            if chain.iter().any(|(s, _)| *s == origin) {
                return Err(broken(format!("loops back to {origin}")));
            }
            if chain.len() > MAX_FORK_DEPTH {
                return Err(broken(format!("is deeper than {MAX_FORK_DEPTH}")));
            }
            chain.push((origin.clone(), seq));
            current = origin;
        }
        chain.reverse();
        Ok(chain)
    }

    /// Every session with its last seq, oldest first: what a reader catching up compares with
    /// what it has read (the session table; no event is read).
    pub async fn heads(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT session_id, last_seq FROM mull_sessions ORDER BY first_at, session_id",
                &[],
            )
            .await
            .map_err(server_error(self.ctx("listing sessions")))?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get::<_, i64>(1).max(0) as u64))
            .collect())
    }

    /// Up to `limit` events of a session after `after_seq`, in seq order: what a node that
    /// does not own the session streams from.
    pub async fn session_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Envelope>, StoreError> {
        let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.envelopes(
            &format!(
                "SELECT {COLUMNS} FROM mull_events WHERE session_id = $1 AND seq > $2 \
                 ORDER BY seq LIMIT $3"
            ),
            &[&session_id, &after, &limit],
            "reading a session",
        )
        .await
    }

    /// The events of one turn of a session, in order.
    pub async fn turn_events(
        &self,
        session_id: &str,
        turn_id: &str,
    ) -> Result<Vec<Envelope>, StoreError> {
        self.envelopes(
            &format!(
                "SELECT {COLUMNS} FROM mull_events WHERE session_id = $1 AND turn_id = $2 \
                 ORDER BY seq"
            ),
            &[&session_id, &turn_id],
            "reading a turn",
        )
        .await
    }

    /// The last seq of a session (0 for none).
    pub async fn last_seq(&self, session_id: &str) -> Result<u64, StoreError> {
        let row = self
            .client
            .query_one(
                "SELECT coalesce(max(seq), 0) FROM mull_events WHERE session_id = $1",
                &[&session_id],
            )
            .await
            .map_err(server_error(self.ctx("reading a session's last seq")))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// Every session, oldest first (the session table; no event is read).
    pub async fn sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM mull_sessions ORDER BY first_at, session_id"
                ),
                &[],
            )
            .await
            .map_err(server_error(self.ctx("listing sessions")))?;
        rows.iter().map(summary).collect()
    }

    /// Up to `limit` sessions, newest first by their last event, after `before`: one range of
    /// the session table's `(last_at, session_id)` index.
    pub async fn newest_sessions(
        &self,
        before: Option<&SessionKey>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match before {
            None => {
                self.client
                    .query(
                        &format!(
                            "SELECT {SESSION_COLUMNS} FROM mull_sessions \
                             ORDER BY last_at DESC, session_id DESC LIMIT $1"
                        ),
                        &[&limit],
                    )
                    .await
            }
            Some(key) => {
                let at = timestamp::to_stored(key.last_at);
                self.client
                    .query(
                        &format!(
                            "SELECT {SESSION_COLUMNS} FROM mull_sessions \
                             WHERE (last_at, session_id) < ($1, $2) \
                             ORDER BY last_at DESC, session_id DESC LIMIT $3"
                        ),
                        &[&at, &key.session_id, &limit],
                    )
                    .await
            }
        }
        .map_err(server_error(self.ctx("listing the newest sessions")))?;
        rows.iter().map(summary).collect()
    }

    /// Where the log's changes stand: the oldest transaction that may still be running (its
    /// rows, and every later one's, are not seen yet).
    pub async fn cursor(&self) -> Result<ChangeCursor, StoreError> {
        let row = self
            .client
            .query_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", &[])
            .await
            .map_err(server_error(self.ctx("reading the change cursor")))?;
        let text: &str = row.get(0);
        text.parse()
            .map(ChangeCursor)
            .map_err(|_| StoreError::Server {
                context: self.ctx("reading the change cursor"),
                message: format!("{text:?} is not a transaction id"),
            })
    }

    /// The sessions changed by transactions at or after `since` (a cursor: every transaction
    /// that could commit after it was taken is one of them), and the cursor to ask from next.
    /// One index range of the session table: nothing when nothing changed.
    pub async fn changes(&self, since: ChangeCursor) -> Result<Changes, StoreError> {
        // Taken first: whatever commits after this is at or after it.
        let cursor = self.cursor().await?;
        let rows = self
            .client
            .query(
                "SELECT session_id, last_seq, last_at FROM mull_sessions \
                 WHERE changed >= $1::text::xid8 ORDER BY changed",
                &[&since.0.to_string()],
            )
            .await
            .map_err(server_error(self.ctx("reading what changed")))?;
        let sessions = rows
            .iter()
            .map(|r| {
                let last_seq = r.get::<_, i64>(1).max(0) as u64;
                Ok(SessionChange {
                    session_id: r.get(0),
                    last_seq,
                    last_at: stored_at(last_seq, r.get(2))?,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Changes { sessions, cursor })
    }

    /// How many events the log holds: the sum of the sessions' last seqs (each session's
    /// seqs run from 1 without a gap).
    pub async fn event_count(&self) -> Result<u64, StoreError> {
        let row = self
            .client
            .query_one(
                "SELECT coalesce(sum(last_seq), 0)::int8 FROM mull_sessions",
                &[],
            )
            .await
            .map_err(server_error(self.ctx("counting events")))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// The event named by `session_id` and `seq`.
    pub async fn event_at(
        &self,
        session_id: &str,
        seq: u64,
    ) -> Result<Option<Envelope>, StoreError> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        let found = self
            .envelopes(
                &format!("SELECT {COLUMNS} FROM mull_events WHERE session_id = $1 AND seq = $2"),
                &[&session_id, &seq],
                "reading an event",
            )
            .await?;
        Ok(found.into_iter().next())
    }

    /// The lifecycle events (every kind but chunks) of the given sessions whose kind is one of
    /// `kinds` (all when empty), by session then seq, from the lifecycle index, each handed to
    /// `each` as its row arrives: folding the overviews of thousands of sessions holds one
    /// event at a time, not all of them.
    pub async fn lifecycle(
        &self,
        sessions: &[String],
        kinds: &[&str],
        mut each: impl FnMut(Envelope),
    ) -> Result<(), StoreError> {
        let kinds: Vec<&str> = kinds.to_vec();
        let sql = format!(
            "SELECT {COLUMNS} FROM mull_events WHERE session_id = ANY($1) AND kind <> 'chunk' \
             AND (cardinality($2::text[]) = 0 OR kind = ANY($2)) ORDER BY session_id, seq"
        );
        let what = "reading lifecycle events";
        let rows = self
            .client
            .query_stream(&sql, &[&sessions, &kinds])
            .await
            .map_err(server_error(self.ctx(what)))?;
        futures::pin_mut!(rows);
        while let Some(row) = rows
            .try_next()
            .await
            .map_err(server_error(self.ctx(what)))?
        {
            each(envelope(&row)?);
        }
        Ok(())
    }

    /// How many events the log holds.
    pub async fn count(&self) -> Result<u64, StoreError> {
        let row = self
            .client
            .query_one("SELECT count(*) FROM mull_events", &[])
            .await
            .map_err(server_error(self.ctx("counting events")))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// Writes the log (or one session of it) as JSONL, one envelope per line in the SQLite
    /// log's line format, sessions one after another; returns the number of lines.
    pub async fn export_jsonl(
        &self,
        session: Option<&str>,
        mut out: impl Write,
    ) -> Result<u64, StoreError> {
        let sessions = match session {
            Some(s) => vec![s.to_owned()],
            None => self
                .sessions()
                .await?
                .into_iter()
                .map(|s| s.session_id)
                .collect(),
        };
        let mut total = 0;
        let mut line = Vec::with_capacity(512);
        for session_id in sessions {
            let mut after = 0;
            loop {
                let rows = self
                    .client
                    .query(
                        "SELECT seq, turn_id, at, v, payload FROM mull_events \
                         WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                        &[&session_id, &after, &PAGE],
                    )
                    .await
                    .map_err(server_error(self.ctx("exporting")))?;
                for r in &rows {
                    let seq: i64 = r.get(0);
                    after = seq;
                    let at: i64 = r.get(2);
                    let at = stored_at(seq as u64, at)?;
                    line.clear();
                    mull_store::jsonl::write_envelope_line(
                        &mut line,
                        seq as u64,
                        &session_id,
                        r.get(1),
                        at,
                        r.get::<_, i16>(3) as u16,
                        r.get(4),
                    )
                    .map_err(StoreError::Export)?;
                    out.write_all(&line).map_err(StoreError::Export)?;
                    total += 1;
                }
                if (rows.len() as i64) < PAGE {
                    break;
                }
            }
        }
        out.flush().map_err(StoreError::Export)?;
        Ok(total)
    }

    /// Extends `owner`'s leases; returns the ones found taken over, and the ones left as they
    /// were because a statement of this node held their row just then (see [`Lock`]).
    pub(crate) async fn renew_leases(
        &self,
        held: &[(String, i64)],
        owner: &str,
        ttl: Duration,
        lock: Lock,
    ) -> Result<Renewal, StoreError> {
        let sessions: Vec<&str> = held.iter().map(|(s, _)| s.as_str()).collect();
        let epochs: Vec<i64> = held.iter().map(|(_, e)| *e).collect();
        let ttl = ttl.as_secs_f64();
        let rows = self
            .client
            .query(
                // The rows are locked first in `session_id` order, as a batch's commit
                // locks them, so the two never deadlock.
                &format!(
                    "WITH mine AS (
                         SELECT l.session_id FROM mull_leases l
                         JOIN unnest($1::text[], $2::int8[]) AS u(session_id, epoch)
                           ON l.session_id = u.session_id AND l.epoch = u.epoch
                         WHERE l.owner = $3 AND NOT l.released
                         ORDER BY l.session_id
                         FOR UPDATE OF l{skip}
                     )
                     UPDATE mull_leases l SET expires_at = now() + make_interval(secs => $4)
                     FROM mine WHERE l.session_id = mine.session_id
                     RETURNING l.session_id",
                    skip = match lock {
                        Lock::Skip => " SKIP LOCKED",
                        Lock::Wait => "",
                    }
                ),
                &[&sessions, &epochs, &owner, &ttl],
            )
            .await
            .map_err(server_error(self.ctx("renewing leases")))?;
        let renewed: std::collections::HashSet<&str> = rows.iter().map(|r| r.get(0)).collect();
        let mut out = Renewal::default();
        for (session, epoch) in held {
            if renewed.contains(session.as_str()) {
                continue;
            }
            let now = self
                .client
                .query_opt(
                    "SELECT epoch, owner, released FROM mull_leases WHERE session_id = $1",
                    &[session],
                )
                .await
                .map_err(server_error(self.ctx("reading a lost lease")))?;
            let (current, by, released) = now.map_or((-1, "nobody".to_owned(), true), |r| {
                (r.get(0), r.get(1), r.get(2))
            });
            if current == *epoch && by == owner && !released {
                // Still this node's: its row was locked (only possible when skipping).
                out.busy.push((session.clone(), *epoch));
            } else {
                out.lost.push((session.clone(), (*epoch, current, by)));
            }
        }
        Ok(out)
    }

    /// Gives a lease back: it expires now, so any node may take the session at once.
    ///
    /// Without waiting for the disk (`synchronous_commit` off for this transaction): a give-back
    /// a database crash loses only leaves the lease to expire by its time, and waiting would
    /// cost every session that ends a flush of the server's log of its own.
    pub(crate) async fn release_lease(
        &self,
        session_id: &str,
        epoch: i64,
    ) -> Result<(), StoreError> {
        self.client
            .execute(
                "UPDATE mull_leases SET expires_at = now(), released = true
                 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS no_flush_wait
                 WHERE session_id = $1 AND epoch = $2",
                &[&session_id, &epoch],
            )
            .await
            .map_err(server_error(
                self.ctx(&format!("releasing the lease of session {session_id}")),
            ))?;
        Ok(())
    }

    /// The node other than `me` holding a live lease on the session, if any.
    pub async fn holder(&self, session_id: &str, me: &str) -> Result<Option<String>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT owner FROM mull_leases
                 WHERE session_id = $1 AND expires_at > now() AND owner <> $2",
                &[&session_id, &me],
            )
            .await
            .map_err(server_error(self.ctx("reading a lease")))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Up to `limit` sessions whose lease expired without being given back, longest expired
    /// first: their node stopped mid-work, and a turn of theirs may wait to be recovered. A
    /// lease row locked at this moment (its node is committing) is skipped, so a sweep taking
    /// these over never waits on one and the ones after it are not starved.
    pub async fn abandoned(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .client
            .query(
                "SELECT session_id FROM mull_leases
                 WHERE NOT released AND expires_at <= now() ORDER BY expires_at LIMIT $1
                 FOR NO KEY UPDATE SKIP LOCKED",
                &[&limit],
            )
            .await
            .map_err(server_error(self.ctx("looking for abandoned sessions")))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Who holds a session's lease: (owner, epoch, whether it is still live).
    pub async fn lease(&self, session_id: &str) -> Result<Option<(String, i64, bool)>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT owner, epoch, expires_at > now() FROM mull_leases WHERE session_id = $1",
                &[&session_id],
            )
            .await
            .map_err(server_error(self.ctx("reading a lease")))?;
        Ok(row.map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    /// Records that `by` asks the holder of `session_id` to cancel its running turn.
    pub async fn request_cancel(&self, session_id: &str, by: &str) -> Result<bool, StoreError> {
        self.client
            .execute(
                "INSERT INTO mull_cancels (session_id, requested_by) VALUES ($1, $2)
                 ON CONFLICT (session_id) DO UPDATE
                     SET requested_by = EXCLUDED.requested_by, requested_at = now()",
                &[&session_id, &by],
            )
            .await
            .map_err(server_error(self.ctx(&format!(
                "requesting the cancellation of session {session_id}"
            ))))?;
        Ok(true)
    }

    /// Takes (deletes) the cancellation requests of `held` sessions; returns their sessions.
    pub(crate) async fn take_cancels(&self, held: &[&str]) -> Result<Vec<String>, StoreError> {
        let rows = self
            .client
            .query(
                "DELETE FROM mull_cancels WHERE session_id = ANY($1::text[]) RETURNING session_id",
                &[&held],
            )
            .await
            .map_err(server_error(self.ctx("taking cancellation requests")))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The epoch each event of a session was written under, in seq order.
    pub async fn epochs(&self, session_id: &str) -> Result<Vec<(u64, i64)>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT seq, epoch FROM mull_events WHERE session_id = $1 ORDER BY seq",
                &[&session_id],
            )
            .await
            .map_err(server_error(self.ctx("reading epochs")))?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, i64>(0) as u64, r.get(1)))
            .collect())
    }
}

fn stored_at(seq: u64, micros: i64) -> Result<DateTime<Utc>, StoreError> {
    timestamp::from_stored(micros).ok_or_else(|| StoreError::BadTimestamp {
        seq,
        text: micros.to_string(),
    })
}

/// One row of [`SESSION_COLUMNS`] as a summary.
fn summary(r: &Row) -> Result<SessionSummary, StoreError> {
    let first_seq = r.get::<_, i64>(1).max(0) as u64;
    let last_seq = r.get::<_, i64>(2).max(0) as u64;
    Ok(SessionSummary {
        session_id: r.get(0),
        first_seq,
        last_seq,
        first_at: stored_at(first_seq, r.get(3))?,
        last_at: stored_at(last_seq, r.get(4))?,
    })
}

/// One row of [`COLUMNS`] as an envelope.
fn envelope(r: &Row) -> Result<Envelope, StoreError> {
    let seq = r.get::<_, i64>(0) as u64;
    let v = r.get::<_, i16>(4) as u16;
    let payload: &str = r.get(5);
    Ok(Envelope {
        seq,
        session_id: r.get(1),
        turn_id: r.get(2),
        at: stored_at(seq, r.get(3))?,
        v,
        event: mull_store::decode::decode(v, payload)
            .map_err(|source| StoreError::Decode { seq, source })?,
    })
}
