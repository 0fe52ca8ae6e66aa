//! The queue's core: a synchronous state machine that decides and does
//! no I/O (no tokio, no spool, no sockets): [`QueueCore::handle`] takes
//! an input at a given time and returns the actions the driver
//! (`scheduler.rs`) carries out, in order (`step.rs`).
//!
//! Messages and destinations are referred to by ID (queue ID, destination
//! key), never by pointer. Each message's open recipients are grouped by
//! next hop into jobs and queued on their destination (`destination.rs`);
//! a message with an after-queue content filter (`Envelope::filter`,
//! Postfix's `content_filter`) has every recipient go to the filter's hop
//! instead, whatever its own route.
//!
//! Outcomes: delivered and bounced recipients are recorded in the spool
//! (an `Action::Record`) and the message is forgotten when all are final;
//! deferred recipients are retried with backoff (`retry.rs`) until the
//! maximum queue lifetime, then bounced. Bounces are stored before the
//! bounced recipients are recorded final, and a message from the null
//! sender never gets a bounce (it is logged instead).
//!
//! The state lives in sub-states that own their fields and counters
//! (`core/`): `Messages`, `Admission`, `Destinations`, `Notices`,
//! `AdminState`; the decisions are `impl QueueCore` in this folder, one
//! file per concern (admission, destinations, results, failures, rollup,
//! reload, administration).
//!
//! What the core still reaches without the driver: the mail log and the
//! metrics counters (write-only sinks, as Postfix's qmgr logs itself),
//! and the cluster's connection caps (`leases.rs`, a synchronous look at
//! shared counters).
//!
//! Invariants that keep the spool safe (checked after every step by the
//! simulation, `scheduler/tests/sim/`):
//! - `complete` is recorded exactly once per message, immediately before
//!   it is removed from `messages`;
//! - `Message::in_flight` is the number of its jobs not yet reported;
//! - a message with a bounce being stored is active, not in the retry
//!   queue;
//! - a message waiting for a retry is parked on disk (`admission.rs`): no
//!   envelope or body of it is held in memory.

use std::sync::Arc;
use std::time::Instant;

use super::compact::Spot;
use super::core::{
    AdminState, Admission, Destinations, Messages, Notices, Parked, RcptState, Rollup,
};
use super::job::{Job, JobReport, WorkerId};
use super::leases::Caps;
use super::lines;
use super::retry::backoff;
use super::step::{Action, Clock, Input};
use super::{DrainReport, QueuedMessage};
use crate::config::content_filter::ContentFilter;
use crate::config::hop::NextHop;
use crate::config::Config;
use crate::log::{Event, Logger, Qid};
use crate::message::flags;
use crate::message::status::{Enhanced, Relay, Reply};
use crate::routing::Router;

/// Why a recipient without a route waits: `4.4.0 no route …`.
fn no_route(why: &crate::routing::NoRoute) -> Reply {
    let status = match why {
        crate::routing::NoRoute::NoDomain => Enhanced::new(4, 4, 0),
        _ => Enhanced::new(4, 3, 0),
    };
    Reply::own(451, status, why.to_string())
}

/// Where every recipient of `envelope` goes when it has an after-queue
/// content filter (`Envelope::filter`, Postfix's `content_filter`): that
/// hop, whatever the recipients' own routes; `None` routes each as usual.
/// A filter that does not read as one (a spool from a newer Sluice) holds
/// the mail (`4.3.5`) rather than send it unfiltered.
fn filter_hop(envelope: &sluice_spool::Envelope) -> Option<Result<Arc<NextHop>, Reply>> {
    if envelope.filter.is_empty() {
        return None;
    }
    let filter = ContentFilter::parse(&envelope.filter);
    Some(match filter.as_ref().map(ContentFilter::hop) {
        Ok(Some(hop)) => Ok(Arc::new(hop.clone())),
        _ => {
            let text = format!("content filter {:?} is not a next hop", envelope.filter);
            Err(Reply::own(451, Enhanced::new(4, 3, 5), text))
        }
    })
}

/// A drain in progress (shutdown).
pub(super) struct Drain {
    deadline: Instant,
    finished_jobs: usize,
}

pub struct QueueCore {
    pub(super) config: Arc<Config>,
    pub(super) router: Router,
    pub(super) logger: Logger,
    /// The active messages and their jobs out.
    pub(super) messages: Messages,
    /// Messages waiting on disk, for room or a retry (`admission.rs`).
    pub(super) admission: Admission,
    pub(super) dests: Destinations,
    /// Bounces being stored.
    pub(super) notices: Notices,
    pub(super) next_worker: WorkerId,
    draining: Option<Drain>,
    pub(super) rollup: Rollup,
    /// Held messages and pending admin deletions/bounces (`admin.rs`).
    pub(super) admin: AdminState,
    /// Workers numbered below this were started before the last reload:
    /// they end after their current job (`reconfig.rs`).
    pub(super) retire_below: WorkerId,
    /// Cluster-wide connection caps, when a node of a cluster (`leases.rs`).
    pub(super) caps: Option<Arc<dyn Caps>>,
    /// The time of the input being handled.
    pub(super) clock: Clock,
    /// The actions decided while handling it, in order.
    pub(super) out: Vec<Action>,
}

impl QueueCore {
    /// A core starting at `clock`, with the hold list `admin` loaded.
    pub fn new(
        config: Arc<Config>,
        router: Router,
        logger: Logger,
        admin: AdminState,
        clock: Clock,
    ) -> QueueCore {
        let body_cache_limit = config.spool.body_cache_mib << 20;
        let active_limit = config.queue.active_limit;
        QueueCore {
            config,
            router,
            logger,
            messages: Messages::new(body_cache_limit),
            admission: Admission::new(active_limit, clock.at),
            dests: Destinations::default(),
            notices: Notices::default(),
            next_worker: 1,
            draining: None,
            rollup: Rollup::default(),
            admin,
            retire_below: 0,
            caps: None,
            clock,
            out: Vec::new(),
        }
    }

    /// Handles one input at `clock`; returns what the driver is to do, in
    /// order.
    pub fn handle(&mut self, clock: Clock, input: Input) -> Vec<Action> {
        self.clock = clock;
        match input {
            Input::Queued(msg) => self.queued(msg),
            Input::Recovered(batch) => self.recovered(batch),
            Input::Leased(key) => self.pump(&key),
            Input::Loaded(loaded) => self.loaded(loaded),
            Input::Report(report) => self.report(report),
            Input::Resolved { dest, group } => self.resolved(dest, group),
            Input::Admin { ticket, request } => self.admin(ticket, request),
            Input::BounceStored { msg, recipients } => self.bounce_stored(msg, recipients),
            Input::Reconfigure {
                config,
                router,
                fresh_agents,
                resolves,
            } => self.reconfigure(config, router, fresh_agents, resolves),
            Input::Drain { deadline } => self.start_drain(deadline),
            Input::Unsent { dest, job } => self.unsent(dest, job),
            Input::Timers => self.run_due_retries(),
            Input::RoundEnd => self.round_end(),
        }
        std::mem::take(&mut self.out)
    }

    /// When the core next wants an input though nothing happens: a due
    /// retry or pacing slot, or the drain's deadline.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let paced = self.dests.next_wake();
        match (&self.draining, self.admission.next_retry()) {
            (Some(d), _) => Some(d.deadline),
            (None, due) => [due, paced].into_iter().flatten().min(),
        }
    }

    /// Joins a cluster: its caps apply from now on.
    pub fn set_caps(&mut self, caps: Arc<dyn Caps>) {
        self.caps = Some(caps);
    }

    /// Whether MX lookups for rollup are possible (a resolver is set).
    pub fn set_resolves(&mut self, resolves: bool) {
        self.rollup.resolves = resolves;
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

    /// What follows a round of inputs: due timers, admission, the
    /// published backlog, idle destinations pruned, a drain's end.
    fn round_end(&mut self) {
        self.run_due_retries();
        self.run_due_pacing();
        self.admit();
        self.out.push(Action::Backlog(self.dests.local_backlog()));
        self.dests.prune_idle(self.clock.at);
        self.drain_over();
    }

    /// Pumps rate-limited destinations whose next job is due.
    fn run_due_pacing(&mut self) {
        while let Some(key) = self.dests.pop_due_wake(self.clock.at) {
            self.pump(&key);
        }
    }

    fn report(&mut self, report: JobReport) {
        match report {
            JobReport::Done {
                dest,
                worker,
                msg,
                results,
                feedback,
                wants_more,
            } => {
                if let Some(d) = self.draining.as_mut() {
                    d.finished_jobs += 1;
                }
                self.job_done(dest, worker, msg, results, feedback, wants_more)
            }
            JobReport::Exit {
                dest,
                worker,
                returned,
            } => self.worker_exit(dest, worker, returned),
        }
    }

    /// Stops new deliveries; jobs not yet started stay in the spool.
    fn start_drain(&mut self, deadline: Instant) {
        for dest in self.dests.values_mut() {
            // Not started: these recipients stay open in the spool.
            self.messages.jobs_abandoned(dest.queue.len());
            dest.queue.clear();
            for worker in std::mem::take(&mut dest.idle) {
                dest.close(worker);
                self.out.push(Action::Close(worker));
            }
        }
        self.logger.emit(&Event::Draining {
            in_flight: self.messages.jobs_out() as u64,
            bounces: self.notices.out() as u64,
        });
        self.draining = Some(Drain {
            deadline,
            finished_jobs: 0,
        });
    }

    /// Once a drain has finished (or timed out): `Action::Drained`.
    fn drain_over(&mut self) {
        let Some(d) = &self.draining else {
            return;
        };
        let idle = self.messages.jobs_out() == 0 && self.notices.out() == 0;
        if !idle && self.clock.at < d.deadline {
            return;
        }
        let d = self.draining.take().expect("checked above");
        self.out.push(Action::Drained(DrainReport {
            finished_jobs: d.finished_jobs,
            abandoned_jobs: self.messages.jobs_out(),
        }));
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
        let filter = filter_hop(&envelope);
        for (i, state) in msg.rcpts.iter_mut().enumerate() {
            if !pick(i, state) {
                continue;
            }
            // A content filter takes every recipient; else each is routed.
            let route = match &filter {
                None => self
                    .router
                    .route_why(&envelope.sender, &envelope.recipients[i])
                    .map_err(|why| no_route(&why)),
                Some(Ok(hop)) => self
                    .router
                    .checked(hop.clone())
                    .map_err(|why| no_route(&why)),
                Some(Err(reply)) => Err(reply.clone()),
            };
            match route {
                Err(reply) => {
                    *state = RcptState::Deferred {
                        relay: Relay::None,
                        reply: reply.clone(),
                        dest: None,
                    };
                    unroutable.push((i, reply));
                }
                Ok(hop) if *hop == NextHop::Discard => {
                    *state = RcptState::Delivered;
                    discarded.push(i as u16);
                }
                Ok(hop) => {
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
        for (i, reply) in &unroutable {
            lines::unroutable(&self.logger, &envelope, *i, reply);
        }
        if !discarded.is_empty() {
            // The "complete" record, if due, is written by finish_round.
            self.record(id, discarded, false);
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

    /// Has the spool record these recipients final (and, with `complete`,
    /// the message).
    pub(super) fn record(&mut self, id: u64, rcpts: Vec<u16>, complete: bool) {
        self.out.push(Action::Record {
            id,
            rcpts,
            complete,
        });
    }

    /// Forgets an active message (its "complete" is recorded already).
    pub(super) fn remove(&mut self, id: u64) {
        if self.messages.remove(id).is_some() {
            // Held while it was being delivered: gone, so off the list.
            self.forget_hold(id);
            let by = "queue".into();
            self.logger.emit(&Event::Removed {
                queue_id: Qid(id),
                by,
            });
        }
    }

    /// True once a drain has started (nothing new is dispatched).
    pub(super) fn draining(&self) -> bool {
        self.draining.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message's filter sends every recipient to its hop; none routes
    /// as usual; one that does not read as a filter holds the mail
    /// (`4.3.5`), never routes it around the filter.
    #[test]
    fn the_filter_takes_every_recipient_or_holds_them() {
        let mut env = sluice_spool::Envelope::default();
        assert!(filter_hop(&env).is_none());
        env.filter = "smtp:[127.0.0.1]:10024".into();
        let hop = filter_hop(&env).unwrap().unwrap();
        assert_eq!(hop.key(), "smtp:[127.0.0.1]:10024");
        for bad in ["discard", "maildir", "Carrier-Pigeon:x", "smtp:"] {
            env.filter = bad.into();
            let reply = filter_hop(&env).unwrap().unwrap_err();
            assert_eq!(
                (reply.code, reply.status.map(|s| s.to_string())),
                (451, Some("4.3.5".into())),
                "{bad}"
            );
        }
    }
}
