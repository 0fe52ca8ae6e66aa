//! The dead-host cache: an address that refused or failed to connect is
//! not tried again for `delivery.dead_host_secs`, so one dead MX does not
//! cost a connect timeout for every message (Postfix keeps such state
//! per destination in qmgr; here it is per address, shared by all
//! workers of the agent).
//!
//! In a cluster the marks are shared through Redis (`cluster/dead.rs`):
//! an address another node found dead is skipped here too, and a
//! connection made here clears it for all.
//!
//! Invariants: bounded — at most [`MAX_ENTRIES`] addresses (a moka
//! cache: expired marks go first, then those least worth keeping); a
//! successful connection clears the mark at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;

pub const MAX_ENTRIES: u64 = 10_000;

pub struct DeadHosts {
    ttl: Duration,
    until: moka::sync::Cache<SocketAddr, ()>,
    shared: Option<Arc<Cluster>>,
}

impl DeadHosts {
    pub fn new(ttl: Duration, shared: Option<Arc<Cluster>>) -> DeadHosts {
        let until = moka::sync::Cache::builder()
            .max_capacity(MAX_ENTRIES)
            .time_to_live(ttl.max(Duration::from_millis(1)))
            .build();
        DeadHosts { ttl, until, shared }
    }

    pub fn is_dead(&self, addr: SocketAddr) -> bool {
        self.until.contains_key(&addr)
            || (self.shared.as_ref()).is_some_and(|c| !self.ttl.is_zero() && c.known_dead(addr))
    }

    pub fn mark(&self, addr: SocketAddr) {
        if !self.ttl.is_zero() {
            self.until.insert(addr, ());
            if let Some(cluster) = &self.shared {
                cluster.mark_dead(addr, self.ttl);
            }
        }
    }

    pub fn alive(&self, addr: SocketAddr) {
        self.until.invalidate(&addr);
        if let Some(cluster) = &self.shared {
            cluster.mark_alive(addr);
        }
    }

    /// Forgets every mark (a queue flush).
    pub fn clear(&self) {
        self.until.invalidate_all();
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
        let d = DeadHosts::new(Duration::from_secs(60), None);
        assert!(!d.is_dead(a));
        d.mark(a);
        assert!(d.is_dead(a));
        d.alive(a);
        assert!(!d.is_dead(a));
        let off = DeadHosts::new(Duration::ZERO, None);
        off.mark(a);
        assert!(!off.is_dead(a), "a TTL of 0 turns the cache off");
    }
}
