//! Cluster-wide connection caps and rates in the queue (issue 23): before
//! a destination gets another connection, the cluster ([`Cluster`]) says
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

use super::core::Destination;
use crate::cluster::Cluster;

/// The connections `dest` may hold now under the cluster's cap for `key`
/// (`None`: no cap), having told the cluster what it would like.
pub(super) fn allowance(
    cluster: Option<&Cluster>,
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

/// Closes idle connections of `dest` while it holds more than `allowed`.
pub(super) fn shed(dest: &mut Destination, allowed: usize) {
    while dest.held() > allowed {
        let Some(worker) = dest.idle.pop() else {
            return;
        };
        dest.close(worker);
    }
}

/// A sending slot under the cluster-wide rate for `key`, if it has one:
/// `Err` with when to try again, or `None` when the cluster pumps `key`
/// once slots come.
pub(super) fn take_slot(
    cluster: Option<&Cluster>,
    key: &Arc<str>,
) -> Result<(), Option<tokio::time::Instant>> {
    let Some(cluster) = cluster else {
        return Ok(());
    };
    match cluster.rate_for(key) {
        0 => Ok(()),
        per_minute => cluster.take_slot(key, per_minute),
    }
}
