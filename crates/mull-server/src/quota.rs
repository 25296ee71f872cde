//! Running turns per client address: one client may run at most a share of them at once, so a
//! client that opens many sockets and starts turns on all of them cannot take the server's
//! time from the rest. A turn holds its [`TurnPermit`] until it ends, whether or not its client
//! still listens (a client that starts a turn and hangs up cannot start another in its place).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::error::ApiError;

/// The default most turns one client address runs at once.
pub const DEFAULT_MAX_TURNS_PER_CLIENT: usize = 128;

/// The address a request came from, put on each request by the accept loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// Turns running per client address.
#[derive(Debug)]
pub struct ClientTurns {
    cap: usize,
    running: Mutex<HashMap<IpAddr, usize>>,
}

/// One running turn, counted against its client until dropped.
#[derive(Debug)]
pub struct TurnPermit {
    turns: Arc<ClientTurns>,
    ip: IpAddr,
}

impl ClientTurns {
    /// At most `cap` turns per client address.
    pub fn new(cap: usize) -> Arc<ClientTurns> {
        Arc::new(ClientTurns {
            cap: cap.max(1),
            running: Mutex::default(),
        })
    }

    /// A permit for one more turn of `ip`, or the refusal once it runs its share.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<TurnPermit, ApiError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let count = running.entry(ip).or_insert(0);
        if *count >= self.cap {
            return Err(ApiError::TooManyTurns { turns: self.cap });
        }
        *count += 1;
        Ok(TurnPermit {
            turns: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for TurnPermit {
    fn drop(&mut self) {
        let mut running = self.turns.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = running.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                running.remove(&self.ip);
            }
        }
    }
}

/// Takes a permit when both the client's address and the quota are known (a router mounted
/// without `bind` has neither, and no quota).
pub(crate) fn permit(
    turns: Option<&Arc<ClientTurns>>,
    client: Option<ClientAddr>,
) -> Result<Option<TurnPermit>, ApiError> {
    match (turns, client) {
        (Some(turns), Some(ClientAddr(ip))) => turns.take(ip).map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_runs_its_share_and_a_finished_turn_frees_a_slot() {
        let turns = ClientTurns::new(2);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let first = turns.take(a).unwrap();
        let _second = turns.take(a).unwrap();
        let refused = turns.take(a).unwrap_err();
        assert_eq!(refused.status().as_u16(), 429);
        assert!(turns.take(b).is_ok(), "another client is not affected");
        drop(first);
        assert!(turns.take(a).is_ok());
    }
}
