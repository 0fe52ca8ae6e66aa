//! Dead-host marks shared by the nodes: an address one node failed to
//! connect to is spared by the others too, for the same time
//! (`delivery.dead_host_secs`), so that each node does not pay a connect
//! timeout to find out. A successful connection clears the mark for all.
//!
//! Marks go to Redis with the next round (a sorted set: address -> expiry
//! by Redis's clock, at most [`MAX_MARKS`], the soonest to expire dropped
//! first); every round brings back those not yet expired.
//!
//! Trusts: Redis (a forged mark makes the nodes skip an address for at
//! most the time it says, bounded by ours; an entry that is not an
//! address is ignored).
//! Invariant: a mark learned lasts no longer than `dead_host_secs` from
//! when it was learned, whatever Redis says.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::Cluster;

/// Marks kept in Redis and learned from it, at most.
pub const MAX_MARKS: usize = 10_000;

/// Publishes ARGV (address, ms to live, ...) pairs as marks, clears ARGV
/// addresses after the pairs (from ARGV[1] = number of pairs), and returns
/// the live marks as {address, ms left, ...}. KEYS[1]: the set.
pub(super) const SYNC_DEAD: &str = include_str!("lua/dead.lua");

/// Marks this node made or cleared, waiting for the next round.
#[derive(Default)]
pub(super) struct DeadMarks {
    /// Learned from Redis (or made here): address -> until.
    pub known: HashMap<SocketAddr, Instant>,
    pub to_mark: Vec<(SocketAddr, Duration)>,
    pub to_clear: Vec<SocketAddr>,
}

impl Cluster {
    /// Whether another node (or this one) marked `addr` dead.
    pub fn known_dead(&self, addr: SocketAddr) -> bool {
        let state = self.state();
        (state.dead.known.get(&addr)).is_some_and(|until| *until > Instant::now())
    }

    /// This node found `addr` dead for `ttl`: tell the others.
    pub fn mark_dead(&self, addr: SocketAddr, ttl: Duration) {
        let mut state = self.state();
        if state.dead.to_mark.len() < MAX_MARKS {
            state.dead.to_mark.push((addr, ttl));
        }
        if state.dead.known.len() < MAX_MARKS {
            state.dead.known.insert(addr, Instant::now() + ttl);
        }
        drop(state);
        self.wake.notify_one();
    }

    /// This node connected to `addr`: it is dead for nobody.
    pub fn mark_alive(&self, addr: SocketAddr) {
        let mut state = self.state();
        if state.dead.known.remove(&addr).is_some() && state.dead.to_clear.len() < MAX_MARKS {
            state.dead.to_clear.push(addr);
        }
    }

    /// The marks and clears to send.
    pub(super) fn dead_outbox(&self) -> (Vec<(SocketAddr, Duration)>, Vec<SocketAddr>) {
        let mut state = self.state();
        let d = &mut state.dead;
        (
            std::mem::take(&mut d.to_mark),
            std::mem::take(&mut d.to_clear),
        )
    }

    /// The marks Redis holds now (address, ms left): they replace what
    /// this node knew; those new to it are returned, for the log. A mark
    /// lasts at most `dead_host_secs` from now.
    pub(super) fn dead_learned(&self, marks: Vec<(String, i64)>) -> Vec<(SocketAddr, Duration)> {
        let now = Instant::now();
        let mut state = self.state();
        let mut known = HashMap::new();
        let mut new = Vec::new();
        for (addr, left_ms) in marks.into_iter().take(MAX_MARKS) {
            let Ok(addr) = addr.parse::<SocketAddr>() else {
                continue;
            };
            let left = Duration::from_millis(left_ms.max(0) as u64).min(self.dead_ttl);
            if !state.dead.known.contains_key(&addr) {
                new.push((addr, left));
            }
            known.insert(addr, now + left);
        }
        state.dead.known = known;
        new
    }
}
