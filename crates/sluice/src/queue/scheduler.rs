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
//! Invariants that keep the spool safe:
//! - `complete` is recorded exactly once per message, immediately before
//!   it is removed from `messages`;
//! - `Message::in_flight` is the number of its jobs not yet reported;
//! - `bounce_pending` implies the message is not in the retry queue;
//! - a message waiting for a retry is parked on disk (`admission.rs`): no
//!   envelope or body of it is held in memory.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope, Spool};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::admission::Parked;
use super::agent::DeliveryAgent;
use super::compact::Spot;
use super::destination::Destination;
use super::job::{Job, JobReport, WorkerId};
use super::results::{delay, orig_to, OrigTo};
use super::retry::{backoff, RetryQueue};
use super::{DrainReport, Event, QueueHandle, QueuedMessage};
use crate::config::hop::NextHop;
use crate::config::Config;
use crate::event;
use crate::log::{qid, Logger};
use crate::message::flags;
use crate::message::status::{Enhanced, Failure, Relay, Reply};
use crate::routing::Router;

/// Why a recipient without a route waits: `4.4.0 no route …`.
fn no_route() -> Reply {
    let text = "no route to destination (an address without a domain)";
    Reply::own(451, Enhanced::new(4, 4, 0), text)
}

/// Events handled in one go before timers (retries, drain deadline) are
/// looked at again: sustained input must not starve retries.
const MAX_BURST: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RcptState {
    Pending,
    InFlight,
    /// `dest`: the destination that deferred it (none: no route).
    Deferred {
        relay: Relay,
        reply: Reply,
        dest: Option<Arc<str>>,
    },
    Delivered,
    Bounced,
}

pub(super) struct Message {
    pub envelope: Arc<Envelope>,
    pub body_ref: BodyRef,
    pub body: Option<Arc<Vec<u8>>>,
    pub rcpts: Vec<RcptState>,
    /// Jobs out with workers.
    pub in_flight: usize,
    pub attempts: u32,
    /// Permanently failed recipients waiting for their bounce.
    pub failed: Vec<(u16, Failure)>,
    /// A bounce is being stored; the message stays until it is.
    pub bounce_pending: bool,
    /// The sender has had a delay warning.
    pub warned: bool,
}

impl Message {
    /// Every recipient delivered or bounced.
    pub fn all_final(&self) -> bool {
        self.rcpts
            .iter()
            .all(|s| matches!(s, RcptState::Delivered | RcptState::Bounced))
    }
}

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
    pub(super) messages: HashMap<u64, Message>,
    /// Messages waiting on disk (see `admission.rs`).
    pub(super) parked: sluice_spool::IdTable<Parked>,
    /// Parked messages waiting for room in the active queue, oldest first.
    pub(super) ready: std::collections::VecDeque<u64>,
    /// Envelopes being read back (they count against the limit).
    pub(super) loading: usize,
    pub(super) active_limit: usize,
    pub(super) dests: HashMap<Arc<str>, Destination>,
    pub(super) retry: RetryQueue,
    pub(super) next_worker: WorkerId,
    body_cache_bytes: usize,
    pub(super) body_cache_limit: usize,
    /// Jobs handed to workers and not yet reported, over all messages.
    pub(super) jobs_out: usize,
    /// Bounces being stored.
    pub(super) bounces_out: usize,
    pub(super) draining: Option<Drain>,
    pub(super) rollup: super::rollup::Rollup,
    /// Rate-limited destinations to pump again, soonest first.
    pub(super) pacing: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    /// Held messages and pending admin deletions/bounces (`admin.rs`).
    pub(super) admin: super::admin::AdminState,
    /// Workers numbered below this were started before the last reload:
    /// they end after their current job (`reconfig.rs`).
    pub(super) retire_below: WorkerId,
    /// Where notices (bounces, delay warnings) go in, as all mail does.
    pub(super) intake: Arc<crate::intake::Intake>,
    /// Deferral reasons of parked messages, one copy each.
    pub(super) reasons: super::compact::Reasons,
    /// Local delivery's backlog, published after every round of events.
    pub(super) flow: Arc<crate::intake::flow::InFlow>,
    /// The destinations delivered locally (Maildir, LMTP): their queues
    /// are that backlog.
    pub(super) local_dests: Vec<Arc<str>>,
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
        let active_limit = config.queue.active_limit.max(1);
        let admin = super::admin::AdminState::load(&config.data_dir);
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
            messages: HashMap::new(),
            parked: sluice_spool::IdTable::default(),
            ready: std::collections::VecDeque::new(),
            loading: 0,
            active_limit,
            dests: HashMap::new(),
            retry: RetryQueue::default(),
            next_worker: 1,
            body_cache_bytes: 0,
            body_cache_limit,
            jobs_out: 0,
            bounces_out: 0,
            draining: None,
            rollup: Default::default(),
            pacing: BinaryHeap::new(),
            admin,
            retire_below: 0,
            intake,
            reasons: Default::default(),
            flow,
            local_dests: Vec::new(),
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
            self.run_due_retries();
            self.run_due_pacing();
            self.admit();
            self.publish_flow();
            if self.drain_over() {
                return;
            }
        }
    }

    fn next_wakeup(&self) -> Option<Instant> {
        let paced = self.pacing.peek().map(|Reverse((at, _))| *at);
        match (&self.draining, self.retry.next_due()) {
            (Some(d), _) => Some(d.deadline),
            (None, due) => [due, paced].into_iter().flatten().min(),
        }
    }

    /// Pumps rate-limited destinations whose next job is due.
    fn run_due_pacing(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, _))) = self.pacing.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((_, key))) = self.pacing.pop() else {
                break;
            };
            if let Some(dest) = self.dests.get_mut(&key) {
                dest.wake_pending = false;
            }
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
                if let Some(d) = self.draining.as_mut() {
                    d.finished_jobs += 1;
                }
                self.job_done(dest, worker, msg, results, feedback, wants_more)
            }
            Event::Report(JobReport::Exit {
                dest,
                worker,
                returned,
            }) => self.worker_exit(dest, worker, returned),
            Event::Resolved { dest, group } => self.resolved(dest, group),
            Event::Admin(request, reply) => self.admin(request, reply),
            Event::BounceStored { msg, recipients } => {
                self.bounces_out = self.bounces_out.saturating_sub(1);
                self.bounce_stored(msg, recipients)
            }
            Event::Reconfigure(r) => self.reconfigure(*r),
            Event::Drain { deadline, done } => self.start_drain(deadline, done),
        }
    }

    /// Stops new deliveries; jobs not yet started stay in the spool.
    fn start_drain(&mut self, deadline: Instant, done: oneshot::Sender<DrainReport>) {
        for dest in self.dests.values_mut() {
            // Not started: these recipients stay open in the spool.
            self.jobs_out = self.jobs_out.saturating_sub(dest.queue.len());
            dest.queue.clear();
            for worker in std::mem::take(&mut dest.idle) {
                dest.close(worker);
            }
        }
        event!(
            self.logger,
            "qmgr",
            "draining",
            { in_flight: self.jobs_out, bounces: self.bounces_out },
            "draining: {} deliveries in flight, {} bounces being stored",
            self.jobs_out,
            self.bounces_out
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
        let idle = self.jobs_out == 0 && self.bounces_out == 0;
        if !idle && Instant::now() < d.deadline {
            return false;
        }
        let d = self.draining.take().expect("checked above");
        let _ = d.done.send(DrainReport {
            finished_jobs: d.finished_jobs,
            abandoned_jobs: self.jobs_out,
        });
        true
    }

    fn queued(&mut self, inc: QueuedMessage) {
        if inc.envelope.flags & flags::QUARANTINE != 0 {
            // Quarantined by a content filter: held from the start.
            self.admin.held.insert(inc.envelope.id);
        }
        if self.has_room() && !self.admin.held.contains(&inc.envelope.id) {
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
        let rcpts = inc
            .done
            .iter()
            .map(|&d| {
                if d {
                    RcptState::Delivered
                } else {
                    RcptState::Pending
                }
            })
            .collect();
        let body = match inc.body {
            Some(b) if self.body_cache_bytes + b.len() <= self.body_cache_limit => {
                self.body_cache_bytes += b.len();
                Some(b)
            }
            _ => None,
        };
        self.messages.insert(
            id,
            Message {
                envelope: Arc::new(inc.envelope),
                body_ref: inc.body_ref,
                body,
                rcpts,
                in_flight: 0,
                attempts,
                failed: Vec::new(),
                bounce_pending: false,
                warned,
            },
        );
        if self.admin.doomed.contains_key(&id) {
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
        let Some(msg) = self.messages.get_mut(&id) else {
            return;
        };
        let per_job = self.config.delivery.recipients_per_transaction.max(1);
        let mut groups: Vec<(Arc<NextHop>, Vec<u16>)> = Vec::new();
        let mut discarded = Vec::new();
        let mut unroutable = Vec::new();
        for (i, state) in msg.rcpts.iter_mut().enumerate() {
            if !pick(i, state) {
                continue;
            }
            match self.router.route(&msg.envelope.recipients[i]) {
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
        let envelope = msg.envelope.clone();
        for &i in &discarded {
            let (to, delay) = (&envelope.recipients[i as usize], delay(&envelope));
            let orig = orig_to(&envelope, i as usize);
            event!(
                self.logger,
                "discard",
                "delivery",
                {
                    queue_id: qid(id),
                    to: to,
                    orig_to: orig,
                    relay: "none",
                    transport: "discard",
                    delay: delay,
                    dsn: "2.0.0",
                    status: "sent",
                    reason: "discarded",
                },
                "{}: to=<{to}>{}, relay=none, delay={delay:.2}, dsn=2.0.0, status=sent (discarded)",
                qid(id),
                OrigTo(orig)
            );
        }
        for &i in &unroutable {
            let (to, delay) = (&envelope.recipients[i], delay(&envelope));
            let orig = orig_to(&envelope, i);
            event!(
                self.logger,
                "qmgr",
                "delivery",
                {
                    queue_id: qid(id),
                    to: to,
                    orig_to: orig,
                    relay: "none",
                    transport: "none",
                    delay: delay,
                    dsn: "4.4.0",
                    status: "deferred",
                    reason: no_route(),
                },
                "{}: to=<{to}>{}, relay=none, delay={delay:.2}, dsn=4.4.0, status=deferred ({})",
                qid(id),
                OrigTo(orig),
                no_route()
            );
        }
        if !discarded.is_empty() {
            // The "complete" record, if due, is written by finish_round.
            self.spool.record_outcome(id, discarded, false);
        }
        let (body, body_ref) = (msg.body.clone(), msg.body_ref);
        msg.in_flight += groups.len();
        self.jobs_out += groups.len();
        if groups.is_empty() && msg.in_flight == 0 {
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

    pub(super) fn remove(&mut self, id: u64) {
        if let Some(msg) = self.messages.remove(&id) {
            self.uncache_body(&msg);
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
    /// A message leaves memory: its cached body no longer counts.
    pub(super) fn uncache_body(&mut self, msg: &Message) {
        if let Some(body) = &msg.body {
            self.body_cache_bytes -= body.len();
        }
    }

    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.messages.len(),
            self.parked.len(),
            self.body_cache_bytes,
        )
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
