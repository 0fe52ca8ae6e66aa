//! The scheduler: one task owns the in-memory queue.
//!
//! Messages and destinations are referred to by ID (queue ID, destination
//! key), never by pointer. Each message's open recipients are grouped by
//! next hop into jobs and queued on their destination (`destination.rs`).
//!
//! Outcomes: delivered and bounced recipients are recorded in the spool
//! (group commit) and the message is forgotten when all are final;
//! deferred recipients are retried with backoff (`retry.rs`) until the
//! maximum queue lifetime, then bounced. Bounces are stored in the spool
//! before the bounced recipients are marked final, and a message from the
//! null sender never gets a bounce (it is logged instead).
//!
//! The state lives in sub-states that own their fields and counters
//! (`core/`): `Messages`, `Admission`, `Destinations`, `Notices`,
//! `AdminState`; this struct ties them to the spool, the agents and the
//! event channel.
//!
//! Invariants that keep the spool safe (checked after every step by the
//! simulation, `core/sim.rs`):
//! - `complete` is recorded exactly once per message, immediately before
//!   it is removed from `messages`;
//! - `Message::in_flight` is the number of its jobs not yet reported;
//! - a message with a bounce being stored is active, not in the retry
//!   queue;
//! - a message waiting for a retry is parked on disk (`admission.rs`): no
//!   envelope or body of it is held in memory.

use std::sync::Arc;

use sluice_spool::Spool;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::agent::DeliveryAgent;
use super::compact::Spot;
use super::core::{AdminState, Admission, Destinations, Messages, Notices, Parked, RcptState};
use super::job::{Job, JobReport, WorkerId};
use super::lines;
use super::retry::backoff;
use super::{DrainReport, Event, QueueHandle, QueuedMessage};
use crate::config::hop::NextHop;
use crate::config::Config;
use crate::event;
use crate::log::{qid, Logger};
use crate::message::flags;
use crate::message::status::{Enhanced, Relay, Reply};
use crate::routing::Router;

/// Why a recipient without a route waits: `4.4.0 no route …`.
fn no_route() -> Reply {
    let text = "no route to destination (an address without a domain)";
    Reply::own(451, Enhanced::new(4, 4, 0), text)
}

/// Events handled in one go before timers (retries, drain deadline) are
/// looked at again: sustained input must not starve retries.
const MAX_BURST: usize = 256;

/// A drain in progress (shutdown).
pub(super) struct Drain {
    deadline: Instant,
    done: oneshot::Sender<DrainReport>,
    finished_jobs: usize,
}

pub struct Scheduler {
    pub(super) config: Arc<Config>,
    pub(super) router: Router,
    pub(super) spool: Spool,
    pub(super) logger: Logger,
    pub(super) agent: Arc<dyn DeliveryAgent>,
    pub(super) events: mpsc::Sender<Event>,
    /// The active messages and their jobs out.
    pub(super) messages: Messages,
    /// Messages waiting on disk, for room or a retry (`admission.rs`).
    pub(super) admission: Admission,
    pub(super) dests: Destinations,
    /// Bounces being stored.
    pub(super) notices: Notices,
    pub(super) next_worker: WorkerId,
    draining: Option<Drain>,
    pub(super) rollup: super::core::Rollup,
    /// Held messages and pending admin deletions/bounces (`admin.rs`).
    pub(super) admin: AdminState,
    /// Workers numbered below this were started before the last reload:
    /// they end after their current job (`reconfig.rs`).
    pub(super) retire_below: WorkerId,
    /// Where notices (bounces, delay warnings) go in, as all mail does.
    pub(super) intake: Arc<crate::intake::Intake>,
    /// Local delivery's backlog, published after every round of events.
    pub(super) flow: Arc<crate::intake::flow::InFlow>,
    /// Cluster-wide connection caps, when a node of a cluster (`leases.rs`).
    pub(super) cluster: Option<Arc<crate::cluster::Cluster>>,
}

impl Scheduler {
    pub fn new(
        config: Arc<Config>,
        router: Router,
        spool: Spool,
        logger: Logger,
        agent: Arc<dyn DeliveryAgent>,
        queue: &QueueHandle,
        intake: Arc<crate::intake::Intake>,
    ) -> Scheduler {
        let body_cache_limit = config.spool.body_cache_mib << 20;
        let active_limit = config.queue.active_limit;
        let admin = AdminState::load(&config.data_dir);
        let flow = queue.flow();
        let q = &config.queue;
        flow.configure(q.in_flow_limit, q.in_flow_delay_ms);
        Scheduler {
            config,
            router,
            spool,
            logger,
            agent,
            events: queue.sender(),
            messages: Messages::new(body_cache_limit),
            admission: Admission::new(active_limit),
            dests: Destinations::default(),
            notices: Notices::default(),
            next_worker: 1,
            draining: None,
            rollup: Default::default(),
            admin,
            retire_below: 0,
            intake,
            flow,
            cluster: None,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::Receiver<Event>) {
        loop {
            // Timers first: a due retry never waits behind queued events.
            self.run_due_retries();
            let wake = self.next_wakeup();
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => self.handle(ev),
                    None => return,
                },
                _ = sleep_until(wake) => {}
            }
            for _ in 0..MAX_BURST {
                match rx.try_recv() {
                    Ok(ev) => self.handle(ev),
                    Err(_) => break,
                }
            }
            self.after_events();
            if self.drain_over() {
                return;
            }
        }
    }

    /// What follows a round of events: due timers, admission, the
    /// published backlog, idle destinations pruned.
    fn after_events(&mut self) {
        self.run_due_retries();
        self.run_due_pacing();
        self.admit();
        self.publish_flow();
        self.dests.prune_idle(Instant::now());
    }

    fn next_wakeup(&self) -> Option<Instant> {
        let paced = self.dests.next_wake();
        match (&self.draining, self.admission.next_retry()) {
            (Some(d), _) => Some(d.deadline),
            (None, due) => [due, paced].into_iter().flatten().min(),
        }
    }

    /// Pumps rate-limited destinations whose next job is due.
    fn run_due_pacing(&mut self) {
        let now = Instant::now();
        while let Some(key) = self.dests.pop_due_wake(now) {
            self.pump(&key);
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Queued(msg) => self.queued(msg),
            Event::Recovered(batch) => self.recovered(batch),
            Event::Leased(key) => self.pump(&key),
            Event::Loaded(loaded) => self.loaded(loaded),
            Event::Report(JobReport::Done {
                dest,
                worker,
                msg,
                results,
                feedback,
                wants_more,
            }) => {
                self.drain_counts_job();
                self.job_done(dest, worker, msg, results, feedback, wants_more)
            }
            Event::Report(JobReport::Exit {
                dest,
                worker,
                returned,
            }) => self.worker_exit(dest, worker, returned),
            Event::Resolved { dest, group } => self.resolved(dest, group),
            Event::Admin(request, reply) => self.admin(request, reply),
            Event::BounceStored { msg, recipients } => self.bounce_stored(msg, recipients),
            Event::Reconfigure(r) => self.reconfigure(*r),
            Event::Drain { deadline, done } => self.start_drain(deadline, done),
        }
    }

    /// Stops new deliveries; jobs not yet started stay in the spool.
    fn start_drain(&mut self, deadline: Instant, done: oneshot::Sender<DrainReport>) {
        for dest in self.dests.values_mut() {
            // Not started: these recipients stay open in the spool.
            self.messages.jobs_abandoned(dest.queue.len());
            dest.queue.clear();
            for worker in std::mem::take(&mut dest.idle) {
                dest.close(worker);
            }
        }
        event!(
            self.logger,
            "qmgr",
            "draining",
            { in_flight: self.messages.jobs_out(), bounces: self.notices.out() },
            "draining: {} deliveries in flight, {} bounces being stored",
            self.messages.jobs_out(),
            self.notices.out()
        );
        self.draining = Some(Drain {
            deadline,
            done,
            finished_jobs: 0,
        });
    }

    /// True once a drain has finished (or timed out) and been reported.
    fn drain_over(&mut self) -> bool {
        let Some(d) = &self.draining else {
            return false;
        };
        let idle = self.messages.jobs_out() == 0 && self.notices.out() == 0;
        if !idle && Instant::now() < d.deadline {
            return false;
        }
        let d = self.draining.take().expect("checked above");
        let _ = d.done.send(DrainReport {
            finished_jobs: d.finished_jobs,
            abandoned_jobs: self.messages.jobs_out(),
        });
        true
    }

    fn queued(&mut self, inc: QueuedMessage) {
        if inc.envelope.flags & flags::QUARANTINE != 0 {
            // Quarantined by a content filter: held from the start.
            self.admin.hold(inc.envelope.id);
        }
        let active = self.messages.len();
        if self.admission.has_room(active) && !self.admin.is_held(inc.envelope.id) {
            self.activate(inc, 0, false);
            return;
        }
        let parked = Parked {
            spot: Spot::of(inc.body_ref),
            done: inc.done.into(),
            attempts: 0,
            warned: false,
            reason: None,
            last_at: 0,
            next_at: 0,
        };
        self.park(inc.envelope.id, parked, None);
    }

    /// Puts a message into the active queue and dispatches it.
    pub(super) fn activate(&mut self, inc: QueuedMessage, attempts: u32, warned: bool) {
        let id = inc.envelope.id;
        let (body_ref, body) = (inc.body_ref, inc.body);
        let state = (attempts, warned);
        self.messages
            .insert(inc.envelope, body_ref, body, &inc.done, state);
        if self.admin.is_doomed(id) {
            self.finish_round(id);
        } else if self.draining.is_none() {
            self.dispatch(id);
        }
    }

    /// How long a message waits before attempt `attempts + 1`.
    pub(super) fn retry_wait(&self, attempts: u32, id: u64) -> std::time::Duration {
        let q = &self.config.queue;
        backoff(attempts, q.minimal_backoff_secs, q.maximal_backoff_secs, id)
    }

    /// Turns a message's open recipients into jobs, one per next hop.
    fn dispatch(&mut self, id: u64) {
        self.dispatch_where(id, |_, state| {
            matches!(state, RcptState::Pending | RcptState::Deferred { .. })
        });
    }

    /// Turns the recipients of message `id` that `pick` chooses into jobs
    /// (a reload routes a queued job's recipients again this way).
    pub(super) fn dispatch_where(&mut self, id: u64, pick: impl Fn(usize, &RcptState) -> bool) {
        let Some(msg) = self.messages.get_mut(id) else {
            return;
        };
        let per_job = self.config.delivery.recipients_per_transaction.max(1);
        let mut groups: Vec<(Arc<NextHop>, Vec<u16>)> = Vec::new();
        let (mut discarded, mut unroutable) = (Vec::new(), Vec::new());
        let envelope = msg.envelope.clone();
        for (i, state) in msg.rcpts.iter_mut().enumerate() {
            if !pick(i, state) {
                continue;
            }
            match self.router.route(&envelope.recipients[i]) {
                None => {
                    *state = RcptState::Deferred {
                        relay: Relay::None,
                        reply: no_route(),
                        dest: None,
                    };
                    unroutable.push(i);
                }
                Some(hop) if *hop == NextHop::Discard => {
                    *state = RcptState::Delivered;
                    discarded.push(i as u16);
                }
                Some(hop) => {
                    *state = RcptState::InFlight;
                    match groups
                        .iter_mut()
                        .find(|(h, r)| *h == hop && r.len() < per_job)
                    {
                        Some((_, list)) => list.push(i as u16),
                        None => groups.push((hop, vec![i as u16])),
                    }
                }
            }
        }
        let (body, body_ref) = (msg.body().cloned(), msg.body_ref);
        for &i in &discarded {
            lines::discarded(&self.logger, &envelope, i as usize);
        }
        for &i in &unroutable {
            lines::unroutable(&self.logger, &envelope, i, &no_route());
        }
        if !discarded.is_empty() {
            // The "complete" record, if due, is written by finish_round.
            self.spool.record_outcome(id, discarded, false);
        }
        self.messages.jobs_sent(id, groups.len());
        let idle = self.messages.get(id).is_some_and(|m| m.in_flight() == 0);
        if groups.is_empty() && idle {
            self.finish_round(id);
            return;
        }
        for (hop, rcpts) in groups {
            let job = Job {
                msg: id,
                envelope: envelope.clone(),
                body: body.clone(),
                body_ref,
                rcpts,
            };
            self.enqueue(hop, job);
        }
    }

    /// Forgets an active message (its "complete" is recorded already).
    pub(super) fn remove(&mut self, id: u64) {
        if self.messages.remove(id).is_some() {
            // Held while it was being delivered: gone, so off the list.
            self.forget_hold(id);
            event!(
                self.logger,
                "qmgr",
                "removed",
                { queue_id: qid(id), by: "queue" },
                "{}: removed",
                qid(id)
            );
        }
    }

    /// Messages in memory, messages waiting on disk, and body bytes
    /// cached (for tests and stats).
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.messages.len(),
            self.admission.len(),
            self.messages.body_bytes(),
        )
    }

    /// Lets the scheduler look up MX hosts for rollup.
    pub fn set_resolver(
        &mut self,
        dns: Arc<crate::routing::dns::Dns>,
        secure_mx: Option<super::SecureMx>,
    ) {
        self.rollup.dns = Some(dns);
        self.rollup.secure_mx = secure_mx;
    }

    /// Joins a cluster: its caps apply from now on, and a grown grant
    /// pumps the destination again (`leases.rs`).
    pub fn set_cluster(&mut self, cluster: Arc<crate::cluster::Cluster>) {
        let events = self.events.clone();
        cluster.on_grant(Box::new(move |key| {
            // Never dropped for a full queue of events: the destination
            // would wait for its next mail.
            let events = events.clone();
            tokio::spawn(async move {
                let _ = events.send(Event::Leased(key)).await;
            });
        }));
        self.cluster = Some(cluster);
    }

    /// True once a drain has started (nothing new is dispatched).
    pub(super) fn draining(&self) -> bool {
        self.draining.is_some()
    }

    /// Counts a job reported during a drain.
    fn drain_counts_job(&mut self) {
        if let Some(d) = self.draining.as_mut() {
            d.finished_jobs += 1;
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
