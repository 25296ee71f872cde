//! Each client address's share of the server's work: how many turns it runs at once, and how
//! many bytes of requests it has in flight — bodies and WebSocket messages being read and
//! decoded, and the requests whose turns run. A turn's cost grows with its request (every step
//! sends, hashes and logs the whole conversation), so one client that opens many sockets and
//! starts large turns on all of them, or floods them with large frames, would otherwise keep
//! every core busy and make the other clients' turns wait behind its work. Past its share a
//! client gets a JSON 429 (an error frame on a WebSocket) at once, before its request is
//! decoded; the other clients are not affected.
//!
//! A turn holds its [`TurnPermit`] until it ends, whether or not its client still listens (a
//! client that starts a turn and hangs up cannot start another in its place). A client with
//! nothing in flight is always let in, so one request as large as the body limit still runs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::error::ApiError;

/// The default most turns one client address runs at once.
pub const DEFAULT_MAX_TURNS_PER_CLIENT: usize = 128;

/// The default most request bytes one client address has in flight (1 MiB). A client with
/// nothing in flight may still send one request up to the body limit.
pub const DEFAULT_MAX_BYTES_PER_CLIENT: usize = 1024 * 1024;

/// The address a request came from, put on each request by the accept loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// What one client address has in flight.
#[derive(Debug, Default)]
struct Usage {
    turns: usize,
    bytes: usize,
}

/// Turns running and request bytes in flight, per client address.
#[derive(Debug)]
pub struct ClientTurns {
    cap: usize,
    max_bytes: usize,
    running: Mutex<HashMap<IpAddr, Usage>>,
}

/// One running turn, counted against its client until dropped, with the bytes of the request
/// that started it.
#[derive(Debug)]
pub struct TurnPermit {
    turns: Arc<ClientTurns>,
    ip: IpAddr,
    bytes: Option<BytesPermit>,
}

/// Request bytes counted against their client until dropped.
#[derive(Debug)]
pub struct BytesPermit {
    turns: Arc<ClientTurns>,
    ip: IpAddr,
    bytes: usize,
}

impl ClientTurns {
    /// At most `cap` turns per client address, and no bound on their bytes.
    pub fn new(cap: usize) -> Arc<ClientTurns> {
        ClientTurns::with_max_bytes(cap, usize::MAX)
    }

    /// At most `cap` turns and `max_bytes` request bytes in flight per client address.
    pub fn with_max_bytes(cap: usize, max_bytes: usize) -> Arc<ClientTurns> {
        Arc::new(ClientTurns {
            cap: cap.max(1),
            max_bytes: max_bytes.max(1),
            running: Mutex::default(),
        })
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Usage>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A permit for one more turn of `ip`, or the refusal once it runs its share.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<TurnPermit, ApiError> {
        let mut running = self.usage();
        let usage = running.entry(ip).or_default();
        if usage.turns >= self.cap {
            return Err(ApiError::TooManyTurns { turns: self.cap });
        }
        usage.turns += 1;
        Ok(TurnPermit {
            turns: Arc::clone(self),
            ip,
            bytes: None,
        })
    }

    /// A permit for `bytes` more request bytes of `ip`, or the refusal once they would take
    /// it past its share. A client with nothing in flight always gets one.
    pub fn take_bytes(self: &Arc<Self>, ip: IpAddr, bytes: usize) -> Result<BytesPermit, ApiError> {
        let mut running = self.usage();
        let usage = running.entry(ip).or_default();
        if usage.bytes > 0 && usage.bytes.saturating_add(bytes) > self.max_bytes {
            let held = usage.bytes;
            if usage.turns == 0 {
                running.remove(&ip);
            }
            return Err(ApiError::TooManyBytes {
                held,
                limit: self.max_bytes,
            });
        }
        usage.bytes = usage.bytes.saturating_add(bytes);
        Ok(BytesPermit {
            turns: Arc::clone(self),
            ip,
            bytes,
        })
    }

    fn release(&self, ip: IpAddr, turns: usize, bytes: usize) {
        let mut running = self.usage();
        if let Some(usage) = running.get_mut(&ip) {
            usage.turns = usage.turns.saturating_sub(turns);
            usage.bytes = usage.bytes.saturating_sub(bytes);
            if usage.turns == 0 && usage.bytes == 0 {
                running.remove(&ip);
            }
        }
    }
}

impl TurnPermit {
    /// The permit, holding the bytes of the request that started the turn until it ends.
    pub fn holding(mut self, bytes: Option<BytesPermit>) -> TurnPermit {
        self.bytes = bytes;
        self
    }
}

impl Drop for TurnPermit {
    fn drop(&mut self) {
        self.turns.release(self.ip, 1, 0);
    }
}

impl Drop for BytesPermit {
    fn drop(&mut self) {
        self.turns.release(self.ip, 0, self.bytes);
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

/// Takes a permit for `bytes` of a request, as [`permit`] does for a turn.
pub(crate) fn bytes(
    turns: Option<&Arc<ClientTurns>>,
    client: Option<ClientAddr>,
    bytes: usize,
) -> Result<Option<BytesPermit>, ApiError> {
    match (turns, client) {
        (Some(turns), Some(ClientAddr(ip))) => turns.take_bytes(ip, bytes).map(Some),
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

    #[test]
    fn a_client_has_its_share_of_bytes_in_flight_and_one_request_always_fits() {
        let turns = ClientTurns::with_max_bytes(100, 1000);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        // Alone, a request larger than the share is let in …
        let large = turns.take_bytes(a, 5000).unwrap();
        // … but nothing more beside it, from that client only.
        let refused = turns.take_bytes(a, 1).unwrap_err();
        assert_eq!(refused.status().as_u16(), 429);
        assert_eq!(refused.code(), "too_many_request_bytes");
        assert!(
            turns.take_bytes(b, 600).is_ok(),
            "another client is not affected"
        );
        drop(large);
        // A turn holds its request's bytes until it ends.
        let turn = turns
            .take(a)
            .unwrap()
            .holding(Some(turns.take_bytes(a, 600).unwrap()));
        let _small = turns.take_bytes(a, 400).unwrap();
        assert!(turns.take_bytes(a, 1).is_err());
        drop(turn);
        assert!(turns.take_bytes(a, 600).is_ok());
    }
}
