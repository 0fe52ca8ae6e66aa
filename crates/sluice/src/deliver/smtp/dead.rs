//! The dead-host cache: an address that refused or failed to connect is
//! not tried again for `delivery.dead_host_secs`, so one dead MX does not
//! cost a connect timeout for every message (Postfix keeps such state
//! per destination in qmgr; here it is per address, shared by all
//! workers of the agent).
//!
//! Invariants: bounded — at most [`MAX_ENTRIES`] addresses, expired ones
//! dropped first; a successful connection clears the mark at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const MAX_ENTRIES: usize = 10_000;

pub struct DeadHosts {
    ttl: Duration,
    until: Mutex<HashMap<SocketAddr, Instant>>,
}

impl DeadHosts {
    pub fn new(ttl: Duration) -> DeadHosts {
        DeadHosts {
            ttl,
            until: Mutex::new(HashMap::new()),
        }
    }

    pub fn is_dead(&self, addr: SocketAddr) -> bool {
        let map = self.until.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&addr).is_some_and(|t| *t > Instant::now())
    }

    pub fn mark(&self, addr: SocketAddr) {
        if self.ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut map = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, t| *t > now);
            if map.len() >= MAX_ENTRIES {
                return;
            }
        }
        map.insert(addr, now + self.ttl);
    }

    pub fn alive(&self, addr: SocketAddr) {
        let mut map = self.until.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&addr);
    }

    /// Forgets every mark (a queue flush).
    pub fn clear(&self) {
        self.until.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_expire_and_clear() {
        let a: SocketAddr = "192.0.2.1:25".parse().unwrap();
        let d = DeadHosts::new(Duration::from_secs(60));
        assert!(!d.is_dead(a));
        d.mark(a);
        assert!(d.is_dead(a));
        d.alive(a);
        assert!(!d.is_dead(a));
        let off = DeadHosts::new(Duration::ZERO);
        off.mark(a);
        assert!(!off.is_dead(a), "a TTL of 0 turns the cache off");
    }
}
