//! Cluster-wide connection caps and rates in the queue (issue 23): before
//! a destination gets another connection, the cluster ([`Caps`], which
//! [`Cluster`] is; the simulation's are its own) says
//! how many this node may hold; a node over its allowance (its share
//! shrank when Redis went away) closes idle connections until it is not.
//! Before a job goes out under a cluster-wide rate, it takes a sending
//! slot (`cluster/rate.rs`).
//!
//! A connection counts from its worker's start until the worker has
//! exited, closing ones included (`Destination::closing`), since that is
//! what the receiving server sees.
//!
//! Invariant: with a cap, a destination never starts a worker while
//! `held() >= allowance`.

use std::sync::Arc;
use std::time::Instant;

use super::core::Destination;
use super::job::WorkerId;
use crate::cluster::Cluster;

/// What the queue asks of the cluster: synchronous looks at counters the
/// cluster keeps up to date on its own tasks (it never waits on Redis
/// here).
pub trait Caps: Send + Sync {
    /// The cluster-wide connection cap for `key` (0: none).
    fn cap_for(&self, key: &str) -> usize;
    /// The connections this node may hold for `key` now, having asked for
    /// `want` while holding `held`.
    fn allowance(&self, key: &Arc<str>, cap: usize, want: usize, held: usize) -> usize;
    /// The cluster-wide rate for `key`, per minute (0: none).
    fn rate_for(&self, key: &str) -> u32;
    /// A sending slot under that rate: `Err` with when to try again, or
    /// `None` when the cluster pumps `key` (`Input::Leased`) once slots
    /// come.
    fn take_slot(&self, key: &Arc<str>, per_minute: u32) -> Result<(), Option<Instant>>;
}

impl Caps for Cluster {
    fn cap_for(&self, key: &str) -> usize {
        Cluster::cap_for(self, key)
    }

    fn allowance(&self, key: &Arc<str>, cap: usize, want: usize, held: usize) -> usize {
        Cluster::allowance(self, key, cap, want, held)
    }

    fn rate_for(&self, key: &str) -> u32 {
        Cluster::rate_for(self, key)
    }

    fn take_slot(&self, key: &Arc<str>, per_minute: u32) -> Result<(), Option<Instant>> {
        Cluster::take_slot(self, key, per_minute).map_err(|at| at.map(|at| at.into_std()))
    }
}

/// The connections `dest` may hold now under the cluster's cap for `key`
/// (`None`: no cap), having told the cluster what it would like.
pub(super) fn allowance(
    cluster: Option<&dyn Caps>,
    key: &Arc<str>,
    dest: &Destination,
) -> Option<usize> {
    let cluster = cluster?;
    let cap = cluster.cap_for(key);
    if cap == 0 {
        return None;
    }
    let busy = dest.workers.len() - dest.idle.len();
    let want = dest.window.min(busy + dest.queue.len());
    Some(cluster.allowance(key, cap, want, dest.held()))
}

/// Closes idle connections of `dest` while it holds more than `allowed`;
/// returns the workers closed (the driver drops their senders).
pub(super) fn shed(dest: &mut Destination, allowed: usize) -> Vec<WorkerId> {
    let mut closed = Vec::new();
    while dest.held() > allowed {
        let Some(worker) = dest.idle.pop() else {
            break;
        };
        dest.close(worker);
        closed.push(worker);
    }
    closed
}

/// A sending slot under the cluster-wide rate for `key`, if it has one:
/// `Err` with when to try again, or `None` when the cluster pumps `key`
/// once slots come.
pub(super) fn take_slot(cluster: Option<&dyn Caps>, key: &Arc<str>) -> Result<(), Option<Instant>> {
    let Some(cluster) = cluster else {
        return Ok(());
    };
    match cluster.rate_for(key) {
        0 => Ok(()),
        per_minute => cluster.take_slot(key, per_minute),
    }
}
