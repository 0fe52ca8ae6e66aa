//! The state the nodes of a cluster share, kept in Redis (issue 23):
//! which nodes are alive (heartbeats), connection leases, so that at most
//! K connections go to one destination from the whole cluster, sending
//! slots under cluster-wide rates (`rate.rs`) and dead-host marks
//! (`dead.rs`).
//!
//! The queue asks [`Cluster::allowance`] synchronously, on every pump: how
//! many connections to this destination this node may hold now. A
//! background task (`sync.rs`) turns the demand it saw into claims on
//! Redis every heartbeat, or at once when demand grows, and calls back
//! when a grant grew so the queue pumps again.
//!
//! When Redis cannot be reached, a node never stops delivering: it falls
//! back to its share of each cap (the cap divided among the nodes last
//! seen alive, or among itself and its configured peers if they are more,
//! rounded down, so the shares add up to at most the cap, but at least
//! one). Until its first round with Redis has ended, a node holds nothing.
//! The fallback is exact when every node loses Redis; a node cut off
//! alone keeps its share while the others may claim the whole cap after
//! its lease lapses (over by that share, at most, until it is back). While its last grants may still be held for it in
//! Redis (until half a lease has passed) it uses the smaller of grant and
//! share, so that a node switching early and one switching late never
//! add up to more than the cap.
//!
//! Trusts: Redis for the counts (see `config/cluster.rs`).
//! Invariants: a node claims at least what it holds (`want >= held`), so
//! Redis always counts its real connections; a grant is never more than
//! the cap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::cluster::ClusterConfig;

mod dead;
pub mod limits;
pub mod owner;
mod rate;
pub mod shadow;
mod sync;

pub use sync::{away_key, start};

/// Called with a destination whose grant grew.
pub type OnGrant = Box<dyn Fn(Arc<str>) + Send + Sync>;

/// One node's view of the cluster; shared by the queue and the task that
/// talks to Redis.
pub struct Cluster {
    node: Arc<str>,
    config: ClusterConfig,
    /// How long a dead-host mark lasts (`delivery.dead_host_secs`).
    dead_ttl: Duration,
    state: Mutex<State>,
    /// Demand grew beyond a grant: claim now, not at the next heartbeat.
    wake: Notify,
    /// The daemon stops: give back leases and leave the node set
    /// (`sync.rs`), then say so on `released`.
    stop: Notify,
    released: Notify,
    /// This process's claim on its node name in Redis (`owner.rs`).
    token: u64,
    /// Logged that another process holds this node's name.
    name_taken: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    leases: HashMap<Arc<str>, Lease>,
    /// Sending slots under cluster-wide rates (`rate.rs`).
    slots: HashMap<Arc<str>, rate::Slots>,
    /// Dead-host marks shared with the other nodes (`dead.rs`).
    dead: dead::DeadMarks,
    /// Nodes alive at the last heartbeat that reached Redis, sorted; never
    /// empty (this node counts itself until it has heard otherwise).
    live: Vec<Arc<str>>,
    /// When Redis last answered a whole round.
    last_ok: Option<Instant>,
    /// A round has ended, well or not: until then a node holds nothing
    /// (the others may hold the whole cap).
    first_round: bool,
    on_grant: Option<OnGrant>,
}

/// This node's connections to one destination, as agreed with Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lease {
    pub cap: usize,
    /// Connections the queue would like (at least those it holds).
    pub want: usize,
    /// Connections the queue holds now.
    pub held: usize,
    /// What Redis granted at the last claim.
    pub granted: usize,
}

impl Cluster {
    pub fn new(config: ClusterConfig, hostname: &str, dead_ttl: Duration) -> Arc<Cluster> {
        let node: Arc<str> = config.node.as_deref().unwrap_or(hostname).into();
        // Until Redis answers, this node and its configured peers (counted
        // in `share_of`).
        let state = State {
            live: vec![node.clone()],
            ..State::default()
        };
        Arc::new(Cluster {
            node,
            config,
            dead_ttl,
            state: Mutex::new(state),
            wake: Notify::new(),
            stop: Notify::new(),
            released: Notify::new(),
            token: {
                use ring::rand::SecureRandom;
                let mut b = [0u8; 8];
                let _ = ring::rand::SystemRandom::new().fill(&mut b);
                u64::from_be_bytes(b)
            },
            name_taken: Default::default(),
        })
    }

    /// At stop, once deliveries are over: this node's leases go back and
    /// it leaves the node set at once, so the others need not wait for
    /// them to lapse. Waits at most `within` (Redis may be away).
    pub async fn release(&self, within: Duration) {
        self.stop.notify_one();
        let _ = tokio::time::timeout(within, self.released.notified()).await;
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets what is called when a grant grows (the queue pumps then).
    pub fn on_grant(&self, f: OnGrant) {
        self.state().on_grant = Some(f);
    }

    /// The cluster-wide cap for a destination (0: none).
    pub fn cap_for(&self, key: &str) -> usize {
        self.config.concurrency_for(key)
    }

    /// The cluster-wide rate for a destination, per minute (0: none).
    pub fn rate_for(&self, key: &str) -> u32 {
        self.config.rate_for(key)
    }

    /// How many connections to `key` this node may hold now, given the
    /// cap, what it `held`s and what it would like (`want`; raised to
    /// `held` if lower). Records the demand for the next claim.
    pub fn allowance(&self, key: &Arc<str>, cap: usize, want: usize, held: usize) -> usize {
        let now = Instant::now();
        let lease_ms = self.config.lease_secs * 1000;
        let mut state = self.state();
        let share = share_of(&state.live, self.config.peers.len() + 1, cap);
        let since_ok = state.last_ok.map(|t| now.saturating_duration_since(t));
        let first_round = state.first_round;
        let lease = state.leases.entry(key.clone()).or_default();
        let wants_more = want.max(held) > lease.want.max(lease.granted);
        lease.cap = cap;
        lease.want = want.max(held);
        lease.held = held;
        let allowed = match since_ok {
            _ if !first_round => 0,
            Some(d) if d < Duration::from_millis(lease_ms / 2) => lease.granted,
            Some(d) if d < Duration::from_millis(lease_ms) => lease.granted.min(share),
            _ => share,
        };
        drop(state);
        if wants_more {
            self.wake.notify_one();
        }
        allowed.min(cap)
    }

    /// Whether Redis answered within half a lease (for the metrics and the
    /// log).
    pub fn shared(&self) -> bool {
        let half = Duration::from_millis(self.config.lease_secs * 500);
        (self.state().last_ok).is_some_and(|t| t.elapsed() < half)
    }

    /// Whether `node` was alive at the last heartbeat; `None` while Redis
    /// has not answered lately (death cannot be told from a partition).
    pub fn is_live(&self, node: &str) -> Option<bool> {
        if !self.shared() {
            return None;
        }
        Some(self.state().live.iter().any(|n| &**n == node))
    }

    /// Nodes counted alive.
    pub fn live_nodes(&self) -> usize {
        self.state().live.len()
    }

    /// The nodes a cap or rate is divided among without Redis: those last
    /// seen alive, or this node and its configured peers if more.
    fn node_count(&self) -> usize {
        self.live_nodes().max(self.config.peers.len() + 1)
    }

    /// The claims to make: destination, cap, want, held. A claim sets
    /// this node's holding in Redis to at most what it wants, so from now
    /// on the queue may not use more than that of its last grant (demand
    /// that grows meanwhile wakes another claim).
    fn claims(&self) -> Vec<(Arc<str>, Lease)> {
        let mut state = self.state();
        // A destination nobody wants and nothing is granted for is done.
        state.leases.retain(|_, l| l.want > 0 || l.granted > 0);
        for lease in state.leases.values_mut() {
            lease.granted = lease.granted.min(lease.want);
        }
        (state.leases.iter())
            .map(|(k, l)| (k.clone(), *l))
            .collect()
    }

    /// Records a round that reached Redis: who is alive and what was
    /// granted; calls back for grants that grew.
    fn round_ok(&self, live: Vec<Arc<str>>, grants: Vec<(Arc<str>, usize)>) {
        let mut grew = Vec::new();
        let mut state = self.state();
        state.live = if live.is_empty() {
            vec![self.node.clone()]
        } else {
            live
        };
        state.last_ok = Some(Instant::now());
        state.first_round = true;
        for (key, granted) in grants {
            if let Some(lease) = state.leases.get_mut(&key) {
                if granted > lease.granted {
                    grew.push(key.clone());
                }
                lease.granted = granted;
            }
        }
        if let Some(f) = &state.on_grant {
            grew.into_iter().for_each(f);
        }
    }
}

impl Cluster {
    /// A round that did not reach Redis: allowances now grow with time
    /// alone (grants fall back to shares), so every destination that
    /// wants more than it was granted is pumped again.
    fn round_failed(&self) {
        let mut state = self.state();
        state.first_round = true;
        let Some(f) = &state.on_grant else {
            return;
        };
        (state.leases.iter())
            .filter(|(_, l)| l.want > l.held)
            .for_each(|(k, _)| f(k.clone()));
        // Waiting for sending slots that will not come from Redis now.
        (state.slots.iter())
            .filter(|(_, s)| s.waiting())
            .for_each(|(k, _)| f(k.clone()));
    }
}

/// A node's share of `cap` among the `live` nodes, or among `nodes` if
/// that is more (the configured size of the cluster: a node's last view
/// may predate another's joining): an equal part, rounded down, so that
/// shares never add up to more than the cap whatever each node's view;
/// but at least one connection, so that no node stops delivering (with a
/// cap below the number of nodes, a Redis outage lets each node keep one).
fn share_of(live: &[Arc<str>], nodes: usize, cap: usize) -> usize {
    let n = live.len().max(nodes).max(1);
    (cap / n).max(usize::from(cap > 0))
}

#[cfg(test)]
mod tests;
