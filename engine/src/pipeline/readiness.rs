//! Role 0's full-chain readiness probe (ARCHITECTURE.md §3.2): a `Ping` every `EVERY` until the
//! last role's `Pong` for a ping sent since the chain was last (re)linked comes back; only then does
//! role 0 admit requests. Any such pong will do, not only the latest: on a loaded machine a round
//! trip through every role can take longer than `EVERY`, and waiting for the latest nonce would
//! then never end. Its nonces are its own (profiles count theirs apart).

use std::time::{Duration, Instant};

/// Time between pings while the chain is not yet ready.
pub const EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
pub struct Readiness {
    ready: bool,
    nonce: u64,
    /// The first nonce sent since the chain was last linked: older pongs prove nothing.
    floor: u64,
    last: Option<Instant>,
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Ready without a probe (a one-role fleet has no chain to cross).
    pub fn set_ready(&mut self) {
        self.ready = true;
    }

    /// Not ready any more (the fleet failed or is stopping).
    pub fn lost(&mut self) {
        self.ready = false;
        self.floor = self.nonce + 1;
    }

    /// Ping at the next chance (the chain was just linked again); pongs of earlier pings no
    /// longer count.
    pub fn probe_now(&mut self) {
        self.last = None;
        self.floor = self.nonce + 1;
    }

    /// The nonce to ping with now, when a ping is due.
    pub fn due(&mut self, now: Instant) -> Option<u64> {
        if self.ready || self.last.is_some_and(|t| now.duration_since(t) < EVERY) {
            return None;
        }
        self.nonce += 1;
        self.last = Some(now);
        Some(self.nonce)
    }

    /// A `Pong` came back; true when it answers a ping of the current chain and so made the chain
    /// ready.
    pub fn pong(&mut self, nonce: u64) -> bool {
        if !self.ready && self.last.is_some() && (self.floor..=self.nonce).contains(&nonce) {
            self.ready = true;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_until_the_latest_nonce_returns() {
        let mut r = Readiness::default();
        let t0 = Instant::now();
        let a = r.due(t0).unwrap();
        assert_eq!(r.due(t0 + Duration::from_millis(100)), None);
        let b = r.due(t0 + EVERY).unwrap();
        assert!(!r.pong(b + 1), "a nonce never sent does not count");
        assert!(
            r.pong(a),
            "a slow round trip of an earlier ping of this chain counts"
        );
        assert!(r.is_ready());
        assert_eq!(r.due(t0 + 10 * EVERY), None);
        r.lost();
        assert!(!r.is_ready());
        // after a relink, pongs of pings sent through the old chain prove nothing
        r.probe_now();
        let c = r.due(t0 + 11 * EVERY).unwrap();
        assert!(!r.pong(b), "a pong from before the relink does not count");
        assert!(r.pong(c) && r.is_ready());
    }
}
