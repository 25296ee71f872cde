//! Taking a session to write it: its lease and its history in one round trip.
//!
//! The lease statement and the read of the session's first page are sent together on one
//! connection (pipelined): the server runs them in the order sent, each in a transaction of its
//! own, so the read's snapshot is taken after the lease is committed. That is what makes the
//! history sound: every writer writes under the lease, and a writer holding an earlier lease
//! either committed before the take (its rows are in the snapshot) or is refused by the epoch
//! from then on. An import, which writes without a lease, commits before any node opens its
//! sessions. A session whose history fits in one page and is no fork opens in one round trip;
//! a new one finds its first page empty.

use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use mull_core::Envelope;
use mull_store::StoreError;
use tokio_postgres::types::ToSql;

use super::{envelope, Reads, COLUMNS, PAGE};
use crate::error::server_error;

/// Takes the lease when it is given back, expired or the owner's own; the epoch goes up by one.
///
/// The take commits without waiting for the disk (`synchronous_commit` off for its own
/// transaction alone): nothing that leaves the
/// node rests on it alone. Every row written under the lease commits in a statement that checks
/// the lease's epoch *and* owner and waits for the disk, and PostgreSQL's log is flushed in
/// order, so once any such row is durable the take is too. A take a database crash loses
/// before that leaves the node writing under a lease the database does not have: its rows are
/// refused (the row is missing, or another node has taken the session since, perhaps at the
/// same epoch, which the owner tells apart) and the session is fenced, as after any take-over.
const TAKE_LEASE: &str = "INSERT INTO mull_leases AS l (session_id, owner, epoch, expires_at)
     SELECT $1, $2, 1, now() + make_interval(secs => $3)
     FROM (SELECT set_config('synchronous_commit', 'off', true)) AS no_flush_wait
     ON CONFLICT (session_id) DO UPDATE
         SET owner = EXCLUDED.owner, epoch = l.epoch + 1,
             expires_at = EXCLUDED.expires_at, released = false
         WHERE l.expires_at <= now() OR l.released OR l.owner = EXCLUDED.owner
     RETURNING epoch";

/// A lease just taken: its epoch, and the session's first page of events as of just after it
/// was taken (empty for a new session).
#[derive(Debug)]
pub(crate) struct OpenedLease {
    pub(crate) epoch: i64,
    pub(crate) first_page: Vec<Envelope>,
}

impl Reads {
    /// Takes a session's lease for `owner` and reads its first page of events after it, in one
    /// round trip (see the module docs); or says who holds the lease.
    pub(crate) async fn open_lease(
        &self,
        session_id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<OpenedLease, StoreError> {
        let ttl = ttl.as_secs_f64();
        let ctx = || self.ctx(&format!("taking the lease of session {session_id}"));
        // Read only when the lease is this node's: a request waiting for a session another
        // node holds asks again and again, and would otherwise read the history each time.
        let first_page = format!(
            "SELECT {COLUMNS} FROM mull_events WHERE session_id = $1 AND seq > $2 \
               AND EXISTS (SELECT 1 FROM mull_leases \
                           WHERE session_id = $1 AND owner = $4 AND NOT released) \
             ORDER BY seq LIMIT $3"
        );
        let (client, st) = self
            .client
            .prepare_all(&[TAKE_LEASE, &first_page])
            .await
            .map_err(server_error(ctx()))?;
        self.client.pipelined();
        let (lease_params, read_params): ([&(dyn ToSql + Sync); 3], [&(dyn ToSql + Sync); 4]) = (
            [&session_id, &owner, &ttl],
            [&session_id, &0i64, &PAGE, &owner],
        );
        let mut lease = pin!(client.query_opt(&st[0], &lease_params));
        // Polled once before the read is made: that sends the lease statement first.
        let early = futures::poll!(lease.as_mut());
        let read = client.query(&st[1], &read_params);
        let (taken, page) = match early {
            Poll::Ready(taken) => (taken, read.await),
            Poll::Pending => futures::join!(lease, read),
        };
        let taken = taken.map_err(server_error(ctx()))?;
        let page = page.map_err(server_error(
            self.ctx(&format!("reading session {session_id}")),
        ))?;
        match taken {
            Some(row) => Ok(OpenedLease {
                epoch: row.get(0),
                first_page: page.iter().map(envelope).collect::<Result<_, _>>()?,
            }),
            None => Err(self.lease_held(session_id).await),
        }
    }

    /// Who holds a lease this node could not take, as the error that says so.
    async fn lease_held(&self, session_id: &str) -> StoreError {
        let row = self
            .client
            .query_one(
                "SELECT owner, epoch, (extract(epoch FROM expires_at - now()) * 1000)::int8
                 FROM mull_leases WHERE session_id = $1",
                &[&session_id],
            )
            .await;
        match row {
            Ok(row) => StoreError::LeaseHeld {
                session_id: session_id.to_owned(),
                owner: row.get(0),
                epoch: row.get(1),
                expires_in_ms: row.get::<_, i64>(2).max(0),
            },
            Err(e) => {
                server_error(self.ctx(&format!("reading the lease of session {session_id}")))(e)
            }
        }
    }
}
