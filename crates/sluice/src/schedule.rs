//! The scheduler: one task owns the in-memory queue.
//!
//! Messages and destinations are referred to by ID (queue ID, destination
//! key), never by pointer. Each message's open recipients are grouped by
//! next hop into jobs; each destination has a FIFO of jobs, a concurrency
//! window and a set of delivery workers (one per connection). The window
//! starts small, grows by one per successful delivery up to the limit and
//! shrinks on failure, as Postfix's qmgr does; a destination whose
//! connections all fail is declared dead for a while and its queued mail is
//! deferred at once instead of each message waiting on a timeout. A slow or
//! dead destination therefore holds only its own window, never others'.
//!
//! Outcomes: delivered and bounced recipients are recorded in the spool
//! (group commit) and the message is forgotten when all are final;
//! deferred recipients are retried with exponential backoff until the
//! maximum queue lifetime, then bounced. Bounces (RFC 3464) are stored in
//! the spool before the bounced recipients are marked final, and a message
//! from the null sender never gets a bounce.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_spool::{BodyRef, Envelope, Spool};
use tokio::sync::mpsc;

use crate::bounce;
use crate::config::Config;
use crate::deliver::{self, Job, Outcome, WorkerId};
use crate::local::Local;
use crate::log::{qid, Logger};
use crate::route::{NextHop, Router};
use crate::{log, timefmt};

const NO_ROUTE: &str =
    "4.4.0 no route to destination (no transport entry and no relayhost; MX routing is not supported yet)";

/// A message handed to the scheduler (newly received, recovered, or a bounce).
pub struct Incoming {
    pub envelope: Envelope,
    pub body_ref: BodyRef,
    pub body: Option<Arc<Vec<u8>>>,
    /// Recipients already final (from recovery).
    pub done: Vec<bool>,
}

pub enum Event {
    Incoming(Incoming),
    /// A worker finished a job. `keep` says whether it waits for another.
    JobDone {
        dest: Arc<str>,
        worker: WorkerId,
        msg: u64,
        results: Vec<(u16, Outcome)>,
        connect_failed: bool,
        keep: bool,
    },
    /// A worker has ended; any jobs it had not started come back.
    WorkerExit {
        dest: Arc<str>,
        worker: WorkerId,
        returned: Vec<Job>,
    },
    /// The bounce for these recipients is safely spooled.
    BounceStored {
        msg: u64,
        recipients: Vec<u16>,
    },
    Shutdown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RcptState {
    Pending,
    InFlight,
    Deferred(String),
    Delivered,
    Bounced,
}

struct Message {
    envelope: Arc<Envelope>,
    body_ref: BodyRef,
    body: Option<Arc<Vec<u8>>>,
    rcpts: Vec<RcptState>,
    /// Jobs out with workers.
    in_flight: usize,
    attempts: u32,
    /// Permanently failed recipients waiting for their bounce: (index, reason).
    failed: Vec<(u16, String)>,
    /// A bounce is being stored; the message stays until it is.
    bounce_pending: bool,
}

impl Message {
    /// Every recipient delivered or bounced.
    fn all_final(&self) -> bool {
        self.rcpts
            .iter()
            .all(|s| matches!(s, RcptState::Delivered | RcptState::Bounced))
    }
}

struct Destination {
    hop: Arc<NextHop>,
    queue: VecDeque<Job>,
    workers: HashMap<WorkerId, mpsc::Sender<Job>>,
    idle: Vec<WorkerId>,
    limit: usize,
    window: usize,
    /// Connections that failed in a row with no success.
    failures: u32,
    dead_until: Option<Instant>,
}

pub struct Scheduler {
    config: Arc<Config>,
    local: Arc<Local>,
    router: Router,
    spool: Spool,
    logger: Logger,
    events: mpsc::UnboundedSender<Event>,
    messages: HashMap<u64, Message>,
    dests: HashMap<Arc<str>, Destination>,
    retry: BinaryHeap<Reverse<(Instant, u64)>>,
    next_worker: WorkerId,
    body_cache_bytes: usize,
    body_cache_limit: usize,
}

impl Scheduler {
    pub fn new(
        config: Arc<Config>,
        local: Arc<Local>,
        spool: Spool,
        logger: Logger,
        events: mpsc::UnboundedSender<Event>,
    ) -> Scheduler {
        let router = Router::with_local(
            &config.transport,
            config.delivery.relayhost.as_deref(),
            Some(local.clone()),
        );
        let body_cache_limit = config.spool.body_cache_mib << 20;
        Scheduler {
            config,
            local,
            router,
            spool,
            logger,
            events,
            messages: HashMap::new(),
            dests: HashMap::new(),
            retry: BinaryHeap::new(),
            next_worker: 1,
            body_cache_bytes: 0,
            body_cache_limit,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event>) {
        loop {
            let next_retry = self.retry.peek().map(|Reverse((at, _))| *at);
            let event = match next_retry {
                Some(at) => tokio::select! {
                    ev = rx.recv() => ev,
                    _ = tokio::time::sleep_until(at.into()) => {
                        self.run_due_retries();
                        continue;
                    }
                },
                None => rx.recv().await,
            };
            match event {
                None | Some(Event::Shutdown) => return,
                Some(ev) => self.handle(ev),
            }
            // Take everything already waiting before sleeping again.
            while let Ok(ev) = rx.try_recv() {
                if matches!(ev, Event::Shutdown) {
                    return;
                }
                self.handle(ev);
            }
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Incoming(incoming) => self.incoming(incoming),
            Event::JobDone {
                dest,
                worker,
                msg,
                results,
                connect_failed,
                keep,
            } => self.job_done(dest, worker, msg, results, connect_failed, keep),
            Event::WorkerExit {
                dest,
                worker,
                returned,
            } => self.worker_exit(dest, worker, returned),
            Event::BounceStored { msg, recipients } => self.bounce_stored(msg, recipients),
            Event::Shutdown => {}
        }
    }

    fn incoming(&mut self, inc: Incoming) {
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
                attempts: 0,
                failed: Vec::new(),
                bounce_pending: false,
            },
        );
        self.dispatch(id);
    }

    /// Turns a message's open recipients into jobs, one per next hop.
    fn dispatch(&mut self, id: u64) {
        let Some(msg) = self.messages.get_mut(&id) else {
            return;
        };
        let per_job = self.config.delivery.recipients_per_transaction.max(1);
        let mut groups: Vec<(Arc<NextHop>, Vec<u16>)> = Vec::new();
        let mut discarded = Vec::new();
        let mut unroutable = Vec::new();
        for (i, state) in msg.rcpts.iter_mut().enumerate() {
            if !matches!(state, RcptState::Pending | RcptState::Deferred(_)) {
                continue;
            }
            match self.router.route(&msg.envelope.recipients[i]) {
                None => {
                    *state = RcptState::Deferred(NO_ROUTE.into());
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
            log!(
                self.logger,
                "discard",
                "{}: to=<{}>, relay=none, delay={}, dsn=2.0.0, status=sent (discarded)",
                qid(id),
                envelope.recipients[i as usize],
                delay(&envelope)
            );
        }
        for &i in &unroutable {
            log!(
                self.logger,
                "qmgr",
                "{}: to=<{}>, relay=none, delay={}, dsn=4.4.0, status=deferred ({NO_ROUTE})",
                qid(id),
                envelope.recipients[i],
                delay(&envelope)
            );
        }
        if !discarded.is_empty() {
            // The "complete" record, if due, is written by finish_round.
            self.spool
                .record_outcome(id, msg.body_ref, discarded, false);
        }
        let body = msg.body.clone();
        let body_ref = msg.body_ref;
        msg.in_flight += groups.len();
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

    fn destination(&mut self, hop: &Arc<NextHop>) -> Arc<str> {
        let key: Arc<str> = hop.key().into();
        if !self.dests.contains_key(&key) {
            let limit = self
                .config
                .delivery
                .destination_concurrency
                .get(&*key)
                .copied()
                .unwrap_or(self.config.delivery.default_concurrency)
                .max(1);
            let window = self.config.delivery.initial_concurrency.clamp(1, limit);
            self.dests.insert(
                key.clone(),
                Destination {
                    hop: hop.clone(),
                    queue: VecDeque::new(),
                    workers: HashMap::new(),
                    idle: Vec::new(),
                    limit,
                    window,
                    failures: 0,
                    dead_until: None,
                },
            );
        }
        key
    }

    fn enqueue(&mut self, hop: Arc<NextHop>, job: Job) {
        let key = self.destination(&hop);
        let dest = self.dests.get_mut(&key).expect("destination just made");
        if let Some(until) = dest.dead_until {
            if Instant::now() < until {
                let reason = format!("4.4.1 {} is not responding; delivery deferred", key);
                self.defer_job(job, &reason);
                return;
            }
            dest.dead_until = None;
        }
        dest.queue.push_back(job);
        self.pump(&key);
    }

    /// Hands queued jobs to idle workers, or starts workers within the window.
    fn pump(&mut self, key: &Arc<str>) {
        let Some(dest) = self.dests.get_mut(key) else {
            return;
        };
        while let Some(job) = dest.queue.pop_front() {
            if let Some(worker) = dest.idle.pop() {
                let Some(tx) = dest.workers.get(&worker) else {
                    continue;
                };
                match tx.try_send(job) {
                    Ok(()) => continue,
                    Err(err) => {
                        // The worker is on its way out; its exit event will follow.
                        dest.queue.push_front(err.into_inner());
                        continue;
                    }
                }
            }
            if dest.workers.len() < dest.window {
                let worker = self.next_worker;
                self.next_worker += 1;
                let (tx, rx) = mpsc::channel(1);
                dest.workers.insert(worker, tx);
                deliver::spawn_worker(
                    worker,
                    key.clone(),
                    dest.hop.clone(),
                    job,
                    rx,
                    self.config.clone(),
                    self.local.clone(),
                    self.spool.clone(),
                    self.logger.clone(),
                    self.events.clone(),
                );
                continue;
            }
            dest.queue.push_front(job);
            break;
        }
    }

    fn job_done(
        &mut self,
        key: Arc<str>,
        worker: WorkerId,
        id: u64,
        results: Vec<(u16, Outcome)>,
        connect_failed: bool,
        keep: bool,
    ) {
        let mut dead = false;
        if let Some(dest) = self.dests.get_mut(&key) {
            if connect_failed {
                dest.failures += 1;
                dest.window = dest.window.saturating_sub(1).max(1);
                // Dead when no connection to it works any more.
                if dest.workers.len() <= 1 {
                    dest.dead_until = Some(
                        Instant::now()
                            + Duration::from_secs(self.config.queue.minimal_backoff_secs),
                    );
                    dead = true;
                }
            } else {
                dest.failures = 0;
                if dest.window < dest.limit {
                    dest.window += 1;
                }
            }
            if keep && dest.workers.contains_key(&worker) {
                dest.idle.push(worker);
            }
        }
        self.apply_results(id, results);
        if dead {
            // Defer everything queued for it rather than trying each in turn.
            let reason = format!("4.4.1 connect to {key} failed; destination marked dead");
            let queued: Vec<Job> = self
                .dests
                .get_mut(&key)
                .map(|d| d.queue.drain(..).collect())
                .unwrap_or_default();
            for job in queued {
                self.defer_job(job, &reason);
            }
        }
        self.pump(&key);
    }

    fn worker_exit(&mut self, key: Arc<str>, worker: WorkerId, returned: Vec<Job>) {
        if let Some(dest) = self.dests.get_mut(&key) {
            dest.workers.remove(&worker);
            dest.idle.retain(|w| *w != worker);
            for job in returned.into_iter().rev() {
                dest.queue.push_front(job);
            }
        }
        self.pump(&key);
    }

    /// Marks a job's recipients deferred without trying them.
    fn defer_job(&mut self, job: Job, reason: &str) {
        let results = deliver::defer_all(&job, "none", reason);
        self.apply_results(job.msg, results);
    }

    fn apply_results(&mut self, id: u64, results: Vec<(u16, Outcome)>) {
        let Some(msg) = self.messages.get_mut(&id) else {
            return;
        };
        let env = msg.envelope.clone();
        let mut delivered = Vec::new();
        for (r, outcome) in results {
            let Some(state) = msg.rcpts.get_mut(r as usize) else {
                continue;
            };
            let to = &env.recipients[r as usize];
            let (status, relay, text, default_dsn) = match &outcome {
                Outcome::Delivered { relay, reply } => ("sent", relay, reply, "2.0.0"),
                Outcome::Deferred { relay, reason } => ("deferred", relay, reason, "4.0.0"),
                Outcome::Bounced { relay, reason } => ("bounced", relay, reason, "5.0.0"),
            };
            log!(
                self.logger,
                "smtp",
                "{}: to=<{to}>, relay={relay}, delay={}, dsn={}, status={status} ({text})",
                qid(id),
                delay(&env),
                dsn_of(text, default_dsn)
            );
            match outcome {
                Outcome::Delivered { .. } => {
                    *state = RcptState::Delivered;
                    delivered.push(r);
                }
                Outcome::Deferred { reason, .. } => *state = RcptState::Deferred(reason),
                Outcome::Bounced { relay, reason } => {
                    *state = RcptState::Bounced;
                    msg.failed.push((r, format!("{relay}: {reason}")));
                }
            }
        }
        msg.in_flight = msg.in_flight.saturating_sub(1);
        let round_over = msg.in_flight == 0;
        if !delivered.is_empty() {
            let complete = round_over && msg.failed.is_empty() && msg.all_final();
            self.spool
                .record_outcome(id, msg.body_ref, delivered, complete);
            if complete {
                self.remove(id);
                return;
            }
        }
        if round_over {
            self.finish_round(id);
        }
    }

    /// All jobs of a delivery round are back: bounce, retry or remove.
    fn finish_round(&mut self, id: u64) {
        let max_life = self.config.queue.maximal_lifetime_secs;
        let Some(msg) = self.messages.get_mut(&id) else {
            return;
        };
        let age_secs = timefmt::now_millis().saturating_sub(msg.envelope.arrival) / 1000;
        if age_secs >= max_life {
            for (i, state) in msg.rcpts.iter_mut().enumerate() {
                if let RcptState::Deferred(reason) = state {
                    let reason =
                        format!("message expired after {age_secs}s in queue; last error: {reason}");
                    log!(
                        self.logger,
                        "qmgr",
                        "{}: to=<{}>, relay=none, delay={}, dsn=4.4.7, status=expired ({reason})",
                        qid(id),
                        msg.envelope.recipients[i],
                        delay(&msg.envelope)
                    );
                    msg.failed.push((i as u16, reason));
                    *state = RcptState::Bounced;
                }
            }
        }
        if !msg.failed.is_empty() && !msg.bounce_pending {
            let failed = std::mem::take(&mut msg.failed);
            let indices: Vec<u16> = failed.iter().map(|(i, _)| *i).collect();
            if msg.envelope.sender.is_empty() {
                log!(
                    self.logger,
                    "bounce",
                    "{}: sender is null; no bounce sent",
                    qid(id)
                );
                self.bounce_stored(id, indices);
                return;
            }
            msg.bounce_pending = true;
            bounce::spawn_bounce(
                msg.envelope.clone(),
                msg.body.clone(),
                msg.body_ref,
                failed,
                self.config.clone(),
                self.spool.clone(),
                self.logger.clone(),
                self.events.clone(),
            );
            return;
        }
        if msg.bounce_pending {
            return;
        }
        let all_final = msg.all_final();
        if all_final {
            self.spool
                .record_outcome(id, msg.body_ref, Vec::new(), true);
            self.remove(id);
            return;
        }
        msg.attempts += 1;
        let q = &self.config.queue;
        let backoff = q
            .minimal_backoff_secs
            .saturating_mul(1u64 << (msg.attempts - 1).min(20))
            .min(q.maximal_backoff_secs.max(q.minimal_backoff_secs));
        self.retry.push(Reverse((
            Instant::now() + Duration::from_secs(backoff.max(1)),
            id,
        )));
    }

    fn bounce_stored(&mut self, id: u64, recipients: Vec<u16>) {
        let Some(msg) = self.messages.get_mut(&id) else {
            return;
        };
        msg.bounce_pending = false;
        let all_final = msg.all_final();
        let complete = all_final && msg.in_flight == 0 && msg.failed.is_empty();
        self.spool
            .record_outcome(id, msg.body_ref, recipients, complete);
        if complete {
            self.remove(id);
        } else if msg.in_flight == 0 {
            self.finish_round(id);
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(msg) = self.messages.remove(&id) {
            if let Some(body) = msg.body {
                self.body_cache_bytes -= body.len();
            }
            log!(self.logger, "qmgr", "{}: removed", qid(id));
        }
    }

    fn run_due_retries(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, id))) = self.retry.peek().copied() {
            if at > now {
                break;
            }
            self.retry.pop();
            let ready = self
                .messages
                .get(&id)
                .is_some_and(|m| m.in_flight == 0 && !m.bounce_pending);
            if ready {
                self.dispatch(id);
            }
        }
    }
}

/// Seconds since arrival, for log lines.
fn delay(env: &Envelope) -> String {
    let ms = timefmt::now_millis().saturating_sub(env.arrival);
    format!("{}.{:02}", ms / 1000, (ms % 1000) / 10)
}

/// The enhanced status code inside a reply text, or a default.
pub fn dsn_of<'a>(text: &'a str, default: &'a str) -> &'a str {
    text.split_whitespace()
        .take(2)
        .find(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() == 3
                && matches!(parts[0], "2" | "4" | "5")
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::dsn_of;

    #[test]
    fn dsn_codes_are_found() {
        assert_eq!(dsn_of("250 2.0.0 Ok", "x"), "2.0.0");
        assert_eq!(dsn_of("4.4.1 connect failed", "x"), "4.4.1");
        assert_eq!(dsn_of("550 User unknown", "5.0.0"), "5.0.0");
    }
}
