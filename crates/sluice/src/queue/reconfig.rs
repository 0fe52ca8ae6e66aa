//! A reload reaching the queue: new settings, routes, delivery agents and
//! resolver, applied between two events so no job sees half of them.
//!
//! Nothing in flight is dropped or redone: a job already handed to a
//! worker finishes with the agent (and connection) that took it. When the
//! agents or the routing changed:
//! - that worker then ends instead of taking more, and idle workers
//!   (connections opened under the old settings) are closed now;
//! - jobs queued but not handed out are routed again with the new table
//!   (a reload that moves a domain moves its backlog too);
//! - destinations left with nothing queued or running are forgotten, so
//!   they are made again with the new next hop and limits, and MX groups
//!   are looked up again.
//!
//! Otherwise (a reload for a certificate, or a limit) connections, dead
//! marks and MX groups are kept. Either way every destination gets the
//! limits of the new settings now (a smaller window takes effect as
//! workers end).

use std::sync::Arc;

use super::agent::DeliveryAgent;
use super::core::RcptState;
use super::dispatch::QueueCore;
use super::job::Job;
use super::step::Action;
use crate::config::hop::NextHop;
use crate::config::Config;
use crate::routing::dns::Dns;
use crate::routing::Router;

/// Everything of a reloaded configuration the queue uses.
pub struct Reconfig {
    pub config: Arc<Config>,
    pub router: Router,
    pub agent: Arc<dyn DeliveryAgent>,
    pub resolver: Arc<Dns>,
    /// DANE's "is this domain's MX RRset signed" (None: DANE off).
    pub secure_mx: Option<super::SecureMx>,
    /// The intake built from the same configuration (for notices).
    pub intake: Arc<crate::intake::Intake>,
}

/// The settings that decide where mail goes and how it is sent.
pub(super) fn routing(c: &Config) -> String {
    format!(
        "{:?}{:?}{:?}{:?}{:?}{:?}{:?}",
        c.transport, c.transports, c.delivery, c.local, c.tables, c.dns, c.recipient_delimiter
    )
}

impl QueueCore {
    /// New settings and routes; `fresh_agents`: the delivery agents were
    /// replaced (the driver compared them); `resolves`: MX lookups for
    /// rollup are possible.
    pub(super) fn reconfigure(
        &mut self,
        config: Arc<Config>,
        router: Router,
        fresh_agents: bool,
        resolves: bool,
    ) {
        let fresh = fresh_agents || routing(&self.config) != routing(&config);
        self.admission.set_limit(config.queue.active_limit);
        let q = &config.queue;
        let (limit, delay_ms) = (q.in_flow_limit, q.in_flow_delay_ms);
        self.out.push(Action::FlowLimits { limit, delay_ms });
        self.messages
            .set_body_limit(config.spool.body_cache_mib << 20);
        self.config = config;
        self.router = router;
        self.rollup.resolves = resolves;
        if fresh {
            self.start_afresh();
        }
        let keys: Vec<Arc<str>> = self.dests.keys().cloned().collect();
        for key in &keys {
            let (limit, interval) = self.limits_for(key);
            if let Some(d) = self.dests.get_mut(key) {
                d.limit = limit.max(1);
                d.window = d.window.clamp(1, d.limit);
                if matches!(*d.hop, NextHop::Maildir) {
                    // Local delivery has no slow start (`destination_for`).
                    d.window = d.limit;
                }
                d.interval = interval;
            }
        }
        for key in &keys {
            self.pump(key);
        }
        self.admit();
    }

    /// New agents or routes: old workers end, queued jobs are routed
    /// again, idle destinations and MX groups are forgotten.
    fn start_afresh(&mut self) {
        self.retire_below = self.next_worker;
        self.rollup.aliases.clear();
        let mut queued: Vec<Job> = Vec::new();
        for d in self.dests.values_mut() {
            for worker in std::mem::take(&mut d.idle) {
                // Dropping its sender ends the worker.
                d.close(worker);
                self.out.push(Action::Close(worker));
            }
            if !d.resolving {
                queued.extend(d.queue.drain(..));
            }
        }
        // A destination whose connections are still closing stays, so
        // that they count against its limits until they are gone.
        self.dests.retain(|d| {
            !d.queue.is_empty() || !d.workers.is_empty() || !d.closing.is_empty() || d.resolving
        });
        for job in queued {
            self.reroute(job);
        }
    }

    /// Takes back a job nobody started and routes its recipients again.
    fn reroute(&mut self, job: Job) {
        if !self.messages.contains(job.msg) {
            return;
        }
        self.messages.job_back(job.msg);
        let Some(msg) = self.messages.get_mut(job.msg) else {
            return;
        };
        for &r in &job.rcpts {
            if let Some(state) = msg.rcpts.get_mut(r as usize) {
                *state = RcptState::Pending;
            }
        }
        let rcpts = job.rcpts;
        self.dispatch_where(job.msg, |i, state| {
            *state == RcptState::Pending && rcpts.contains(&(i as u16))
        });
    }
}
