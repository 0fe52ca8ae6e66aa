//! A reload reaching the queue: new settings, routes, delivery agents and
//! resolver, applied between two events so no job sees half of them.
//!
//! Nothing in flight is dropped or redone: a job already handed to a
//! worker finishes with the agent (and connection) that took it, then that
//! worker ends instead of taking more; idle workers (connections opened
//! under the old settings) are closed now. Mail not yet handed out is
//! routed with the new table when it is dispatched or retried.
//! Destinations with nothing queued or running are forgotten, so they are
//! made again with the new next hop and limits; busy ones get the new
//! limits now (a smaller window takes effect as workers end).

use std::sync::Arc;

use super::agent::DeliveryAgent;
use super::scheduler::Scheduler;
use crate::config::Config;
use crate::routing::dns::Dns;
use crate::routing::Router;

/// Everything of a reloaded configuration the queue uses.
pub struct Reconfig {
    pub config: Arc<Config>,
    pub router: Router,
    pub agent: Arc<dyn DeliveryAgent>,
    pub resolver: Arc<Dns>,
}

impl Scheduler {
    pub(super) fn reconfigure(&mut self, r: Reconfig) {
        self.active_limit = r.config.queue.active_limit.max(1);
        self.body_cache_limit = r.config.spool.body_cache_mib << 20;
        self.config = r.config;
        self.router = r.router;
        self.agent = r.agent;
        self.rollup.dns = Some(r.resolver);
        // MX groups are looked up again under the new settings.
        self.rollup.aliases.clear();
        self.retire_below = self.next_worker;
        self.dests
            .retain(|_, d| !d.queue.is_empty() || !d.workers.is_empty() || d.resolving);
        let keys: Vec<Arc<str>> = self.dests.keys().cloned().collect();
        for key in &keys {
            let (limit, interval) = self.limits_for(key);
            let Some(d) = self.dests.get_mut(key) else {
                continue;
            };
            for worker in d.idle.drain(..) {
                // Dropping its sender ends the worker.
                d.workers.remove(&worker);
            }
            d.limit = limit.max(1);
            d.window = d.window.clamp(1, d.limit);
            d.interval = interval;
        }
        for key in &keys {
            self.pump(key);
        }
        self.admit();
    }
}
