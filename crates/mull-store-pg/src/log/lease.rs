//! Leases: one writer per session, and how a node keeps the sessions it holds.
//!
//! # Invariants
//! 1. **One writer per session.** `PgLog::open_session` takes the session's lease row (free,
//!    expired, or this node's own): the epoch goes up by one, and every event this node appends
//!    for the session is stamped with that epoch.
//! 2. **Fencing.** A batch's statement first locks the lease rows of its sessions
//!    (`FOR SHARE`, so no take-over can commit until it does) and inserts only the rows whose
//!    epoch is still the lease's: a node that was paused or cut off while another took the
//!    session over has its late writes refused in the very transaction that tried them, and the
//!    session is fenced here (`StoreError::Fenced` from then on).
//! 3. **Renewal off the turn's path.** While held, a lease is renewed every third of its time to
//!    live by a task of its own ([`run_renewal`]), on a connection of its own: a renewal never
//!    waits behind a turn's commits, a node's reads or the leases of many chats opening at
//!    once, and no turn waits for a renewal. A node
//!    that stops renewing loses its leases after the time to live.
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

use std::collections::HashMap;
use std::sync::Weak;
use std::time::{Duration, Instant};

use super::state::{lock, Fence, Inner};

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

/// Renews this node's leases every third of their time to live; a lease found taken over
/// fences its session.
pub(super) async fn run_renewal(inner: Weak<Inner>) {
    let period = match inner.upgrade() {
        Some(i) => i.options.lease_ttl / 3,
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
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
        if held.is_empty() {
            continue;
        }
        let sent = Instant::now();
        match inner
            .renewals
            .renew_leases(&held, &inner.options.node, inner.options.lease_ttl)
            .await
        {
            Ok(lost) => {
                let mut state = lock(&inner.state);
                let lost: HashMap<String, (i64, i64, String)> = lost.into_iter().collect();
                for (session, epoch) in &held {
                    let Some(h) = state.sessions.get_mut(session) else {
                        continue;
                    };
                    if h.epoch != *epoch || h.fenced.is_some() {
                        continue;
                    }
                    match lost.get(session) {
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
            }
            Err(e) => {
                let now = Instant::now();
                let lapsed = lock(&inner.state)
                    .sessions
                    .values()
                    .filter(|h| h.is_live() && !h.is_valid(now))
                    .count();
                if lapsed > 0 {
                    tracing::warn!(
                        "renewing leases: {e}; {lapsed} lease(s) past their expiry by this \
                         node's clock: their clients follow the log"
                    );
                } else {
                    tracing::warn!("renewing leases: {e}");
                }
            }
        }
    }
}
