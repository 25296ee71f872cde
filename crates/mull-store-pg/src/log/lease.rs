//! Leases: one writer per session, and how a node keeps the sessions it holds.
//!
//! # Invariants
//! 1. **One writer per session.** `PgLog::open_session` takes the session's lease row (free,
//!    expired, or this node's own): the epoch goes up by one, and every event this node appends
//!    for the session is stamped with that epoch. Takes and give-backs commit without waiting
//!    for the disk; the rows written under a lease are what wait (see `TAKE_LEASE`).
//! 2. **Fencing.** A batch's statement first locks the lease rows of its sessions
//!    (`FOR SHARE`, so no take-over can commit until it does) and inserts only the rows whose
//!    epoch and owner are still the lease's: a node that was paused or cut off while another took the
//!    session over has its late writes refused in the very transaction that tried them, and the
//!    session is fenced here (`StoreError::Fenced` from then on).
//! 3. **Renewal off the turn's path.** While held, a lease is renewed every third of its time to
//!    live by a task of its own ([`run_renewal`]), on a connection of its own: a renewal never
//!    waits behind a node's reads or the leases of many chats opening at once (their own
//!    renewals run on their lease connection), and no turn waits for a renewal. A lease row a
//!    commit holds right then is skipped and renewed alone afterwards, so one busy session
//!    never makes the renewal of every other lease wait or time out; leases a round left
//!    un-renewed are tried again after a tenth of the time to live. A node that stops renewing
//!    loses its leases after the time to live.
//! 4. A lease that expired while the database was unreachable is taken back by the next renewal
//!    if no other node took it (its epoch is still this node's); one another node took over
//!    fences the session here, at the first commit or renewal that finds it.
//! 5. **The node's own clock.** A node knows until when each lease is surely its own without
//!    asking the database (`valid_until`): the instant it *sent* the statement that took or
//!    last renewed the lease (the database's expiry is counted from a later instant), plus the
//!    time to live, less a margin. Past that instant `holds` is false — a node paused past its
//!    lease, or whose renewals are stuck behind a dead connection or a locked row, knows it may
//!    have lost the session before any commit or renewal says so — and its followers stop
//!    passing on its own output and follow the log. A renewal that gets through later takes the
//!    lease back (4) and `holds` is true again.

use std::collections::{HashMap, HashSet};
use std::sync::Weak;
use std::time::{Duration, Instant};

use mull_store::StoreError;

use super::state::{lock, Fence, Inner};
use crate::read::Lock;

/// The longest a lease statement waits for a row lock (see `Reads::limit_lock_waits`).
pub(super) const LEASE_LOCK_WAIT: Duration = Duration::from_secs(1);

/// The share of a lease's time to live a node does not count on by its own clock: room for
/// clocks that run at slightly different rates, and for the instant a statement was sent
/// standing in for the one the database ran it at.
const CLOCK_MARGIN_DIVISOR: u32 = 10;

/// Until when a lease taken or renewed by a statement sent at `sent` is surely this node's,
/// by its own monotonic clock (invariant 5).
pub(super) fn valid_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl - ttl / CLOCK_MARGIN_DIVISOR
}

/// How soon a renewal that left leases un-renewed (a statement failed, or a row was held) is
/// tried again, as a share of the time to live: well before the lease runs out, without
/// hammering a database that is down.
const RETRY_DIVISOR: u32 = 10;

/// Renews this node's leases every third of their time to live, counted from when the last
/// renewal was sent (so a slow renewal does not push the next one late); a lease found taken
/// over fences its session.
///
/// Each round first renews every lease whose row is free (`Lock::Skip`): a batch's commit holds
/// its sessions' rows while it runs, and waiting for each of them in turn could take longer than
/// the lock timeout and fail the renewal of every lease of the node. The few rows skipped are
/// then renewed waiting for them (`Lock::Wait`), about one commit long. Leases left un-renewed
/// by a failed statement are tried again after a tenth of the time to live, not a third.
pub(super) async fn run_renewal(inner: Weak<Inner>) {
    let (period, retry) = match inner.upgrade() {
        Some(i) => (i.options.lease_ttl / 3, i.options.lease_ttl / RETRY_DIVISOR),
        None => return,
    };
    let mut next = tokio::time::Instant::now() + period;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.progress.borrow().stopped {
            // Nothing more can be written here: let the leases lapse, so other nodes take the
            // sessions over after their time to live.
            return;
        }
        let held: Vec<(String, i64)> = lock(&inner.state)
            .sessions
            .iter()
            .filter(|(_, h)| h.is_live())
            .map(|(s, h)| (s.clone(), h.epoch))
            .collect();
        let started = tokio::time::Instant::now();
        next = started + period;
        if held.is_empty() {
            continue;
        }
        let first = renew(&inner, &held, Lock::Skip).await;
        let left = match first {
            Ok(busy) if !busy.is_empty() => renew(&inner, &busy, Lock::Wait).await,
            other => other,
        };
        let failed = match left {
            Ok(busy) if busy.is_empty() => continue,
            Ok(busy) => format!("{} lease row(s) stayed locked", busy.len()),
            Err(e) => e.to_string(),
        };
        next = next.min(tokio::time::Instant::now() + retry);
        let now = Instant::now();
        let lapsed = lock(&inner.state)
            .sessions
            .values()
            .filter(|h| h.is_live() && !h.is_valid(now))
            .count();
        if lapsed > 0 {
            tracing::warn!(
                "renewing leases: {failed}; {lapsed} lease(s) past their expiry by this \
                 node's clock: their clients follow the log"
            );
        } else {
            tracing::warn!("renewing leases: {failed}");
        }
    }
}

/// One renewal statement over `held`: renewed leases count as this node's for another time to
/// live from when it was sent, lost ones fence their sessions. Returns the leases left as they
/// were because their rows were locked.
async fn renew(
    inner: &Inner,
    held: &[(String, i64)],
    mode: Lock,
) -> Result<Vec<(String, i64)>, StoreError> {
    let sent = Instant::now();
    let renewal = inner
        .renewals
        .renew_leases(held, &inner.options.node, inner.options.lease_ttl, mode)
        .await?;
    let mut state = lock(&inner.state);
    let lost: HashMap<&str, &(i64, i64, String)> =
        renewal.lost.iter().map(|(s, l)| (s.as_str(), l)).collect();
    let busy: HashSet<&str> = renewal.busy.iter().map(|(s, _)| s.as_str()).collect();
    for (session, epoch) in held {
        let Some(h) = state.sessions.get_mut(session) else {
            continue;
        };
        if h.epoch != *epoch || h.fenced.is_some() || busy.contains(session.as_str()) {
            continue;
        }
        match lost.get(session.as_str()) {
            None => h.valid_until = valid_until(sent, inner.options.lease_ttl),
            Some((held_at, current, owner)) => {
                tracing::warn!(
                    "session {session}: fenced (its lease at epoch {held_at} was \
                     taken over by {owner} at epoch {current})"
                );
                h.fenced = Some(Fence::TakenOver {
                    epoch: *held_at,
                    current: *current,
                    owner: owner.clone(),
                });
            }
        }
    }
    Ok(renewal.busy)
}
