//! The writer task: group commit on one connection, and that connection made again when the
//! database goes away.
//!
//! # Invariants
//! 1. **Group commit.** Appends assign the session's next seq at once and queue the row; this
//!    task commits the queue in batches (up to `batch_max_events` rows, or `batch_max_delay`
//!    after the first, or at once for a barrier): one statement per batch
//!    ([`commit_batch_sql`]) locks the lease rows and inserts every row with a multi-row
//!    `INSERT … SELECT FROM unnest(…)` — one round trip, one implicit transaction, which a node
//!    paused halfway through sending can never leave open. No `NOTIFY` is sent: a transaction
//!    that notifies takes a database-wide lock at commit, which would serialize every commit of
//!    every node; readers on other nodes poll `seq > N` instead.
//! 2. **A database that goes away.** A restart or failover closes the connection. The task
//!    connects again with capped, jittered exponential backoff ([`backon`]) for as long as it
//!    takes, and the log reports itself unavailable meanwhile; appends keep queueing.
//! 3. **A batch in doubt.** The batch whose commit the loss interrupted may or may not be in:
//!    once connected, the task looks which of its rows the database holds (a batch is one
//!    statement, so all or none of a session's rows) and commits the rest under the same epoch
//!    check, so nothing is lost or written twice.
//! 4. A commit refused for any other reason stops the writer for good: every later append gets
//!    the same error.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use mull_core::EVENT_VERSION;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use super::state::{lock, Failure, Fence, Inner, Row, SPENT_ROWS, SPENT_ROW_BYTES};
use crate::error::{conflict_key, connect_driver, describe, is_conflict, is_connection_loss};
use crate::schema;

/// The first and the longest pause between attempts to connect again after a loss.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Commits one batch in one statement (so in one implicit transaction): locks the batch's
/// lease rows in `session_id` order — the order lease renewal takes them in too, so a batch and
/// a renewal of the same node never wait for each other in a circle — inserts the rows whose
/// epoch is still their session's lease epoch, brings their sessions' rows of `mull_sessions`
/// up to date (the same statement: the session list never lags the events), and returns the
/// leases as locked. The session rows are brought up to date from each session's span in the
/// batch (its least and greatest seq and time, under the same lease check), not from the rows
/// inserted: reading every inserted row back cost the server about 14 % of its time per row.
///
/// The rows are unnested in the select list, where the arrays are walked in step row by row,
/// rather than by `unnest(…)` in `FROM`, which first copies every row into a tuple store: about
/// 10 % less of the server's time per row in a `psql` test (512-row batches).
///
/// One statement, not `BEGIN` … `COMMIT`: the server runs it only once the whole request has
/// arrived and commits before answering, so a node paused or cut off halfway through sending
/// never leaves a transaction open holding lease rows, or uncommitted keys, that another node
/// must take over. (This is also why rows do not go in by `COPY`, which would halve the
/// server's time per row: a `COPY` streams inside an open transaction.)
pub(super) fn commit_batch_sql() -> String {
    format!(
        "WITH locked AS (
             SELECT session_id, epoch, owner FROM mull_leases
             WHERE session_id = ANY($9) ORDER BY session_id FOR SHARE
         ), inserted AS (
             INSERT INTO mull_events (session_id, seq, turn_id, at, v, kind, payload, epoch)
             SELECT u.session_id, u.seq, u.turn_id, u.at, $5, u.kind, u.payload, u.epoch
             FROM (SELECT unnest($1::text[]) AS session_id, unnest($2::int8[]) AS seq,
                          unnest($3::text[]) AS turn_id, unnest($4::int8[]) AS at,
                          unnest($6::text[]) AS kind, unnest($7::text[]) AS payload,
                          unnest($8::int8[]) AS epoch) u
             JOIN locked l
               ON l.session_id = u.session_id AND l.epoch = u.epoch AND l.owner = $10
         ), spans AS (
             SELECT t.session_id, t.seq, t.at
             FROM unnest($11::text[], $12::int8[], $13::int8[], $14::int8[])
                  AS t(session_id, epoch, seq, at)
             JOIN locked l
               ON l.session_id = t.session_id AND l.epoch = t.epoch AND l.owner = $10
         ), touched AS ({touch})
         SELECT session_id, epoch, owner FROM locked",
        touch = schema::touch_sessions("spans")
    )
}

/// Each session's span in `batch`, per lease epoch, as two rows of `(session, epoch, seq,
/// at)`: its least seq and time, then its greatest — all `mull_sessions` takes from the rows.
fn session_spans(batch: &[Row]) -> Vec<(&str, i64, i64, i64)> {
    let mut bounds: BTreeMap<(&str, i64), [i64; 4]> = BTreeMap::new();
    for row in batch {
        bounds
            .entry((&*row.session_id, row.epoch))
            .and_modify(|[lo_seq, hi_seq, lo_at, hi_at]| {
                *lo_seq = (*lo_seq).min(row.seq);
                *hi_seq = (*hi_seq).max(row.seq);
                *lo_at = (*lo_at).min(row.at);
                *hi_at = (*hi_at).max(row.at);
            })
            .or_insert([row.seq, row.seq, row.at, row.at]);
    }
    bounds
        .into_iter()
        .flat_map(|((session, epoch), [lo_seq, hi_seq, lo_at, hi_at])| {
            [
                (session, epoch, lo_seq, lo_at),
                (session, epoch, hi_seq, hi_at),
            ]
        })
        .collect()
}

/// The writer task: takes batches off the queue and commits them until every handle is gone or
/// a commit is refused. A lost connection is made again (invariants 2 and 3).
pub(super) async fn run_writer(weak: Weak<Inner>, client: Client, st: Statement) {
    let mut conn = Some((client, st));
    // A batch whose commit was cut off by a lost connection: it may or may not be in.
    let mut in_doubt: Option<Vec<Row>> = None;
    loop {
        let (client, st) = match conn.take() {
            Some(c) if !c.0.is_closed() => c,
            lost => {
                if let (Some(inner), Some(_)) = (weak.upgrade(), &lost) {
                    // Found closed while idle (a commit that fails says so itself).
                    tracing::warn!(
                        "{}: the writer's connection was lost; connecting again",
                        inner.target
                    );
                    mark_down(&inner, Some("the connection to the server was lost".into()));
                }
                match reconnect(&weak).await {
                    Some(c) => c,
                    None => return,
                }
            }
        };
        let Some(strong) = weak.upgrade() else {
            return;
        };
        let doubtful = in_doubt.is_some();
        let batch = match in_doubt.take() {
            Some(batch) => batch,
            None => match next_batch(&strong).await {
                Some(batch) => batch,
                None => {
                    // Only this task's reference is left: every handle is gone and nothing is
                    // queued.
                    drop(strong);
                    if weak.strong_count() == 0 {
                        return;
                    }
                    conn = Some((client, st));
                    continue;
                }
            },
        };
        strong
            .commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let committed = if doubtful {
            resolve(&client, &st, &batch, &strong.options.node).await
        } else {
            commit(&client, &st, &batch, &strong.options.node).await
        };
        match committed {
            Ok(fences) => {
                lock(&strong.state).down = None;
                settle(&strong, batch, fences);
                conn = Some((client, st));
            }
            Err(e) if is_connection_loss(&e) => {
                tracing::warn!(
                    "{}: committing {} event(s): {}; connecting again",
                    strong.target,
                    batch.len(),
                    describe(&e)
                );
                mark_down(&strong, Some(describe(&e)));
                in_doubt = Some(batch);
            }
            Err(e) => {
                let failure = if is_conflict(&e) {
                    match conflict_key(&e) {
                        Some((session_id, seq)) => Failure::Conflict { session_id, seq },
                        None => Failure::Other(describe(&e)),
                    }
                } else {
                    Failure::Other(format!(
                        "{}: committing {} event(s): {}",
                        strong.target,
                        batch.len(),
                        describe(&e)
                    ))
                };
                tracing::error!("the PostgreSQL log writer stopped");
                lock(&strong.state).failure = Some(failure);
                strong.progress.send_modify(|p| p.stopped = true);
                return;
            }
        }
    }
}

/// Records why the writer cannot commit (keeping the first reason given).
fn mark_down(inner: &Inner, why: Option<String>) {
    let mut state = lock(&inner.state);
    if state.down.is_none() {
        state.down = Some(why.unwrap_or_else(|| "connecting".to_owned()));
    }
}

/// Why connecting again stopped.
enum Gone {
    /// Every handle of the log is gone: nobody needs the writer any more.
    Unused,
    /// The attempt failed; it is tried again after the backoff.
    Failed(String),
}

/// Connects the writer again, with capped, jittered exponential backoff, for as long as it
/// takes; `None` once the log itself is gone.
async fn reconnect(weak: &Weak<Inner>) -> Option<(Client, Statement)> {
    let attempt = || async {
        let (config, target) = match weak.upgrade() {
            Some(inner) => (inner.config.clone(), inner.target.clone()),
            None => return Err(Gone::Unused),
        };
        let client = connect_driver(&config)
            .await
            .map_err(|e| Gone::Failed(format!("{target}: cannot connect: {}", describe(&e))))?;
        let st = client.prepare(&commit_batch_sql()).await.map_err(|e| {
            Gone::Failed(format!(
                "{target}: preparing the writer's statement: {}",
                describe(&e)
            ))
        })?;
        Ok((client, st))
    };
    let backoff = ExponentialBuilder::default()
        .with_min_delay(RECONNECT_MIN)
        .with_max_delay(RECONNECT_MAX)
        .with_jitter()
        .without_max_times();
    let connected = attempt
        .retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e| matches!(e, Gone::Failed(_)))
        .notify(|e, after| {
            if let Gone::Failed(why) = e {
                tracing::warn!("{why}; trying again in {after:?}");
                if let Some(inner) = weak.upgrade() {
                    lock(&inner.state).down = Some(why.clone());
                }
            }
        })
        .await;
    match connected {
        Ok(c) => {
            if let Some(inner) = weak.upgrade() {
                tracing::info!("{}: the log's writer is connected again", inner.target);
                lock(&inner.state).down = None;
            }
            Some(c)
        }
        Err(_) => None,
    }
}

/// Takes a committed batch's outcome into the state: the fenced sessions, each live session's
/// committed seq, the committed ticket.
fn settle(inner: &Inner, mut batch: Vec<Row>, fences: Vec<(Arc<str>, Fence)>) {
    let last = batch.last().map_or(0, |r| r.ticket);
    let mut state = lock(&inner.state);
    let refused: HashSet<&str> = fences.iter().map(|(s, _)| &**s).collect();
    for row in &batch {
        if refused.contains(&*row.session_id) {
            continue;
        }
        if let Some(held) = state.sessions.get_mut(&*row.session_id) {
            if held.epoch == row.epoch {
                held.committed_seq = held.committed_seq.max(row.seq as u64);
            }
        }
    }
    for (session, fence) in fences {
        if let Some(held) = state.sessions.get_mut(&*session) {
            let Fence::TakenOver {
                epoch,
                current,
                owner,
            } = &fence;
            tracing::warn!(
                "session {session}: fenced (epoch {epoch} taken over by {owner} at epoch \
                 {current})"
            );
            held.fenced = Some(fence);
        }
    }
    drop(state);
    // Handed back to the appending threads to be freed (see `State::spent`) before the commit
    // is announced; large rows, and those past the bound, are freed here, outside the lock.
    batch.retain(|row| row.payload.capacity() <= SPENT_ROW_BYTES);
    {
        let mut state = lock(&inner.state);
        let room = SPENT_ROWS.saturating_sub(state.spent.len());
        let handed = batch.len().min(room);
        state.spent.extend(batch.drain(..handed));
    }
    drop(batch);
    inner
        .progress
        .send_modify(|p| p.committed = p.committed.max(last));
}

/// Commits a batch whose first commit was cut off: the rows the database holds (under their
/// epoch) were committed then; the others are committed now, fenced as any batch is.
async fn resolve(
    client: &Client,
    st: &Statement,
    batch: &[Row],
    node: &str,
) -> Result<Vec<(Arc<str>, Fence)>, tokio_postgres::Error> {
    let session_ids: Vec<&str> = batch.iter().map(|r| &*r.session_id).collect();
    let seqs: Vec<i64> = batch.iter().map(|r| r.seq).collect();
    let epochs: Vec<i64> = batch.iter().map(|r| r.epoch).collect();
    let found = client
        .query(
            "SELECT u.session_id, u.seq
             FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(session_id, seq, epoch)
             JOIN mull_events e
               ON e.session_id = u.session_id AND e.seq = u.seq AND e.epoch = u.epoch",
            &[&session_ids, &seqs, &epochs],
        )
        .await?;
    let found: HashSet<(String, i64)> = found.iter().map(|r| (r.get(0), r.get(1))).collect();
    let rest: Vec<Row> = batch
        .iter()
        .filter(|r| !found.contains(&(r.session_id.to_string(), r.seq)))
        .map(Row::clone)
        .collect();
    tracing::info!(
        "a batch cut off by the lost connection: {} of {} event(s) were committed, the rest \
         are committed now",
        batch.len() - rest.len(),
        batch.len()
    );
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    commit(client, st, &rest, node).await
}

/// Waits until a batch is due and takes it; `None` when woken with nothing to do (so the task
/// can see whether the log is gone).
async fn next_batch(inner: &Inner) -> Option<Vec<Row>> {
    loop {
        let deadline = {
            let mut state = lock(&inner.state);
            let due = state.first_at.map(|t| t + inner.options.batch_max_delay);
            let now = Instant::now();
            if !state.rows.is_empty()
                && (state.urgent
                    || state.rows.len() >= inner.options.batch_max_events
                    || due.is_some_and(|d| d <= now))
            {
                let take = state.rows.len().min(inner.options.batch_max_events);
                let rest = state.rows.split_off(take);
                let batch = std::mem::replace(&mut state.rows, rest);
                state.first_at = (!state.rows.is_empty()).then_some(now);
                state.urgent = !state.rows.is_empty() && state.urgent;
                return Some(batch);
            }
            state.urgent = false;
            due
        };
        match deadline {
            Some(d) => {
                tokio::select! {
                    () = inner.wake.notified() => {}
                    () = tokio::time::sleep_until(d.into()) => {}
                }
            }
            None => {
                // Woken by an append, a barrier, or a periodic look at whether the log is gone.
                let woke =
                    tokio::time::timeout(Duration::from_millis(200), inner.wake.notified()).await;
                if woke.is_err() {
                    return None;
                }
            }
        }
    }
}

/// Commits one batch ([`commit_batch_sql`]) of `node`'s rows. Returns the sessions whose rows
/// were refused: their lease is at another epoch, or held by another node.
async fn commit(
    client: &Client,
    st: &Statement,
    batch: &[Row],
    node: &str,
) -> Result<Vec<(Arc<str>, Fence)>, tokio_postgres::Error> {
    let mut sessions: Vec<&str> = batch.iter().map(|r| &*r.session_id).collect();
    sessions.sort_unstable();
    sessions.dedup();
    let session_ids: Vec<&str> = batch.iter().map(|r| &*r.session_id).collect();
    let seqs: Vec<i64> = batch.iter().map(|r| r.seq).collect();
    let turns: Vec<Option<&str>> = batch.iter().map(|r| r.turn_id.as_deref()).collect();
    let ats: Vec<i64> = batch.iter().map(|r| r.at).collect();
    let kinds: Vec<&str> = batch.iter().map(|r| r.kind.as_str()).collect();
    let payloads: Vec<&str> = batch.iter().map(|r| r.payload.as_str()).collect();
    let epochs: Vec<i64> = batch.iter().map(|r| r.epoch).collect();
    let v = EVENT_VERSION as i16;
    let spans = session_spans(batch);
    let span_sessions: Vec<&str> = spans.iter().map(|s| s.0).collect();
    let span_epochs: Vec<i64> = spans.iter().map(|s| s.1).collect();
    let span_seqs: Vec<i64> = spans.iter().map(|s| s.2).collect();
    let span_ats: Vec<i64> = spans.iter().map(|s| s.3).collect();
    let params: [&(dyn ToSql + Sync); 14] = [
        &session_ids,
        &seqs,
        &turns,
        &ats,
        &v,
        &kinds,
        &payloads,
        &epochs,
        &sessions,
        &node,
        &span_sessions,
        &span_epochs,
        &span_seqs,
        &span_ats,
    ];
    let leases = client.query(st, &params).await?;
    let current: HashMap<&str, (i64, &str)> = leases
        .iter()
        .map(|r| {
            (
                r.get::<_, &str>(0),
                (r.get::<_, i64>(1), r.get::<_, &str>(2)),
            )
        })
        .collect();
    let mut fences = Vec::new();
    for row in batch {
        if fences
            .iter()
            .any(|(s, _): &(Arc<str>, Fence)| *s == row.session_id)
        {
            continue;
        }
        let (epoch, owner) = current
            .get(&*row.session_id)
            .copied()
            .unwrap_or((-1, "nobody"));
        if epoch != row.epoch || owner != node {
            fences.push((
                Arc::clone(&row.session_id),
                Fence::TakenOver {
                    epoch: row.epoch,
                    current: epoch,
                    owner: owner.to_owned(),
                },
            ));
        }
    }
    Ok(fences)
}
