//! Destinations: one per next hop, each with a FIFO of jobs, a concurrency
//! window and its workers (one per connection).
//!
//! The window starts small, grows by one per job that delivered something,
//! up to the limit, and shrinks on connection failures, as Postfix's qmgr
//! does. A destination whose connections all fail is declared dead for the
//! minimal backoff time and its queued mail is deferred at once instead of
//! each message waiting on a timeout. A slow or dead destination therefore
//! holds only its own window, never others'.
//!
//! Invariants: `workers` holds the job sender of every live worker;
//! `idle` ⊆ `workers`; a job is in at most one of `queue` or a worker.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::agent::WorkerStart;
use super::job::{defer_all, Feedback, Job, Reporter, WorkerId};
use super::scheduler::Scheduler;
use crate::config::hop::NextHop;
use crate::event;
use crate::message::status::{Enhanced, Outcome, Relay, Reply};

pub(super) struct Destination {
    pub hop: Arc<NextHop>,
    pub queue: VecDeque<Job>,
    pub workers: HashMap<WorkerId, mpsc::Sender<Job>>,
    pub idle: Vec<WorkerId>,
    /// Workers told to end (their sender dropped) that have not exited:
    /// their connections are still open.
    pub closing: HashSet<WorkerId>,
    pub limit: usize,
    pub window: usize,
    pub dead_until: Option<Instant>,
    /// Its mail hosts are being looked up (`rollup.rs`): no workers yet.
    pub resolving: bool,
    /// A rate limit: at least this long between jobs handed out.
    pub interval: Option<Duration>,
    /// The next job may go at this time (with `interval`).
    pub next_send: Instant,
    /// A pacing wake-up is scheduled for this destination.
    pub wake_pending: bool,
}

impl Destination {
    pub fn new(hop: Arc<NextHop>, limit: usize, initial: usize) -> Destination {
        let limit = limit.max(1);
        Destination {
            hop,
            queue: VecDeque::new(),
            workers: HashMap::new(),
            idle: Vec::new(),
            closing: HashSet::new(),
            limit,
            window: initial.clamp(1, limit),
            dead_until: None,
            resolving: false,
            interval: None,
            next_send: Instant::now(),
            wake_pending: false,
        }
    }

    /// Connections open: live workers and those on their way out.
    pub fn held(&self) -> usize {
        self.workers.len() + self.closing.len()
    }

    /// Ends a worker once it is idle (dropping its sender); it counts as
    /// closing until its exit report.
    pub fn close(&mut self, worker: WorkerId) {
        self.idle.retain(|w| *w != worker);
        if self.workers.remove(&worker).is_some() {
            self.closing.insert(worker);
        }
    }

    /// With a rate limit: whether a job may go at `now` (and if so, the
    /// next one is due one interval later); otherwise when it may.
    pub fn pace(&mut self, now: Instant) -> Result<(), Instant> {
        let Some(interval) = self.interval else {
            return Ok(());
        };
        if now < self.next_send {
            return Err(self.next_send);
        }
        self.next_send = self.next_send.max(now) + interval;
        Ok(())
    }

    /// A job came back from a connection that worked.
    pub fn on_success(&mut self, delivered_any: bool) {
        if delivered_any && self.window < self.limit {
            self.window += 1;
        }
    }

    /// The peer said it is too busy (421): one connection fewer, but the
    /// destination is alive.
    pub fn on_throttle(&mut self) {
        self.window = self.window.saturating_sub(1).max(1);
    }

    /// A connection could not be made; returns true if the destination is
    /// now dead (no other connection to it works).
    pub fn on_connect_failure(&mut self, now: Instant, dead_for: Duration) -> bool {
        self.window = self.window.saturating_sub(1).max(1);
        if self.workers.len() <= 1 {
            self.dead_until = Some(now + dead_for);
            return true;
        }
        false
    }

    /// True while the destination is marked dead.
    pub fn is_dead(&mut self, now: Instant) -> bool {
        match self.dead_until {
            Some(until) if now < until => true,
            Some(_) => {
                self.dead_until = None;
                false
            }
            None => false,
        }
    }
}

impl Scheduler {
    /// The destination `key` (delivering through `hop`), made on first use
    /// with the concurrency and rate configured for that key.
    pub(super) fn destination_for(&mut self, key: &Arc<str>, hop: &Arc<NextHop>) -> Arc<str> {
        if !self.dests.contains_key(key) {
            let (limit, interval) = self.limits_for(key);
            // A local disk needs no slow start: its window opens at once.
            let initial = match **hop {
                NextHop::Maildir => limit,
                _ => self.config.delivery.initial_concurrency,
            };
            let mut dest = Destination::new(hop.clone(), limit, initial);
            dest.interval = interval;
            self.dests.insert(key.clone(), dest);
            if matches!(**hop, NextHop::Maildir | NextHop::Lmtp(_))
                && !self.local_dests.contains(key)
            {
                self.local_dests.push(key.clone());
            }
        }
        key.clone()
    }

    /// Tells the sessions how many jobs wait for local delivery (in-flow
    /// pacing, `intake/flow.rs`): the queues of the local destinations.
    pub(super) fn publish_flow(&self) {
        let waiting = self
            .local_dests
            .iter()
            .filter_map(|k| self.dests.get(k))
            .map(|d| d.queue.len())
            .sum();
        self.flow.publish(waiting);
    }

    /// The concurrency limit and the rate-limit interval configured for
    /// destination `key` (Maildir delivery: `local.concurrency` unless the
    /// destination is named).
    pub(super) fn limits_for(&self, key: &str) -> (usize, Option<Duration>) {
        let d = &self.config.delivery;
        let default = match key == NextHop::Maildir.key() {
            true => self.config.local.concurrency,
            false => d.default_concurrency,
        };
        let limit = d
            .destination_concurrency
            .get(key)
            .copied()
            .unwrap_or(default);
        let per_minute = d
            .destination_rate_limit
            .get(key)
            .copied()
            .unwrap_or(d.default_rate_limit);
        let interval = (per_minute > 0).then(|| Duration::from_secs(60) / per_minute);
        (limit, interval)
    }

    pub(super) fn enqueue(&mut self, hop: Arc<NextHop>, job: Job) {
        let Some((key, job)) = self.route_rollup(&hop, job) else {
            return;
        };
        let key = self.destination_for(&key, &hop);
        let dest = self.dests.get_mut(&key).expect("destination just made");
        if dest.is_dead(Instant::now()) {
            let text = format!("{key} is not responding; delivery deferred");
            let reply = Reply::own(451, Enhanced::new(4, 4, 1), text);
            self.defer_job(job, &key, &reply);
            return;
        }
        dest.queue.push_back(job);
        self.pump(&key);
    }

    /// Hands queued jobs to idle workers, or starts workers within the window.
    pub(super) fn pump(&mut self, key: &Arc<str>) {
        if self.draining.is_some() {
            return;
        }
        let Some(dest) = self.dests.get_mut(key) else {
            return;
        };
        if dest.resolving {
            return;
        }
        let allowed = super::leases::allowance(self.cluster.as_deref(), key, dest);
        if let Some(allowed) = allowed {
            super::leases::shed(dest, allowed);
        }
        let now = Instant::now();
        while let Some(job) = dest.queue.pop_front() {
            // Room first: a rate's slot is not spent on a job with nowhere
            // to go.
            let capped = allowed.is_some_and(|a| dest.held() >= a);
            if dest.idle.is_empty() && (dest.workers.len() >= dest.window || capped) {
                dest.queue.push_front(job);
                break;
            }
            let paced = match dest.pace(now) {
                Ok(()) => super::leases::take_slot(self.cluster.as_deref(), key),
                Err(at) => Err(Some(at)),
            };
            if let Err(at) = paced {
                dest.queue.push_front(job);
                // No time: a reservation is under way and pumps when done.
                if let Some(at) = at.filter(|_| !dest.wake_pending) {
                    dest.wake_pending = true;
                    self.pacing.push(std::cmp::Reverse((at, key.clone())));
                }
                break;
            }
            if let Some(worker) = dest.idle.pop() {
                let sent = match dest.workers.get(&worker) {
                    Some(tx) => tx.try_send(job).map_err(|e| e.into_inner()),
                    None => Err(job),
                };
                if let Err(job) = sent {
                    // The worker is on its way out; its exit report follows.
                    dest.queue.push_front(job);
                }
                continue;
            }
            let id = self.next_worker;
            self.next_worker += 1;
            let (tx, jobs) = mpsc::channel(1);
            dest.workers.insert(id, tx);
            self.agent.spawn(WorkerStart {
                id,
                dest: key.clone(),
                hop: dest.hop.clone(),
                first: job,
                jobs,
                reports: Reporter(self.events.clone()),
            });
        }
        if allowed.is_some() {
            // What it holds now, for the next claim.
            super::leases::allowance(self.cluster.as_deref(), key, dest);
        }
    }

    pub(super) fn job_done(
        &mut self,
        key: Arc<str>,
        worker: WorkerId,
        id: u64,
        results: Vec<(u16, Outcome)>,
        feedback: Feedback,
        wants_more: bool,
    ) {
        let dead_for = Duration::from_secs(self.config.queue.minimal_backoff_secs);
        let draining = self.draining.is_some();
        let mut dead = false;
        if let Some(dest) = self.dests.get_mut(&key) {
            if feedback == Feedback::ConnectFailed {
                dead = dest.on_connect_failure(Instant::now(), dead_for);
            } else if feedback == Feedback::Throttled {
                dest.on_throttle();
            } else {
                let delivered = results
                    .iter()
                    .any(|(_, o)| matches!(o, Outcome::Delivered { .. }));
                dest.on_success(delivered);
            }
            if draining || !wants_more || worker < self.retire_below {
                // Dropping the sender ends the worker once it is idle.
                dest.close(worker);
            } else if dest.workers.contains_key(&worker) {
                dest.idle.push(worker);
            }
        }
        self.apply_results(id, Some(&key), results);
        if dead {
            // Defer everything queued for it rather than trying each in turn.
            let text = format!("connect to {key} failed; destination marked dead");
            let reply = Reply::own(451, Enhanced::new(4, 4, 1), text);
            let queued: Vec<Job> = self
                .dests
                .get_mut(&key)
                .map(|d| d.queue.drain(..).collect())
                .unwrap_or_default();
            event!(
                self.logger,
                "qmgr",
                "destination_dead",
                { destination: &*key, deferred: queued.len() },
                "{key}: destination marked dead (connect failed); {} queued jobs deferred",
                queued.len()
            );
            for job in queued {
                self.defer_job(job, &key, &reply);
            }
        }
        self.pump(&key);
    }

    pub(super) fn worker_exit(&mut self, key: Arc<str>, worker: WorkerId, returned: Vec<Job>) {
        if self.draining.is_some() {
            // Not started and not to be started now: they stay open in
            // the spool, and the drain does not wait for them.
            self.jobs_out = self.jobs_out.saturating_sub(returned.len());
        } else if let Some(dest) = self.dests.get_mut(&key) {
            for job in returned.into_iter().rev() {
                dest.queue.push_front(job);
            }
        }
        if let Some(dest) = self.dests.get_mut(&key) {
            dest.workers.remove(&worker);
            dest.idle.retain(|w| *w != worker);
            dest.closing.remove(&worker);
        }
        self.pump(&key);
    }

    /// Marks a job's recipients deferred without trying them.
    pub(super) fn defer_job(&mut self, job: Job, key: &Arc<str>, reply: &Reply) {
        let results = defer_all(&job, &Relay::None, reply);
        self.apply_results(job.msg, Some(key), results);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(limit: usize, initial: usize) -> Destination {
        Destination::new(Arc::new(NextHop::Discard), limit, initial)
    }

    #[test]
    fn the_window_grows_on_delivery_and_shrinks_on_failure() {
        let mut d = dest(4, 2);
        assert_eq!(d.window, 2);
        d.on_success(false);
        assert_eq!(d.window, 2, "a job that delivered nothing does not grow it");
        for _ in 0..5 {
            d.on_success(true);
        }
        assert_eq!(d.window, 4, "capped at the limit");
        d.workers.insert(1, mpsc::channel(1).0);
        d.workers.insert(2, mpsc::channel(1).0);
        let now = Instant::now();
        assert!(!d.on_connect_failure(now, Duration::from_secs(60)));
        assert_eq!(d.window, 3);
        assert!(!d.is_dead(now));
        d.on_throttle();
        assert_eq!(d.window, 2, "a 421 shrinks the window");
        assert!(!d.is_dead(now), "but does not kill the destination");
        d.workers.remove(&2);
        assert!(d.on_connect_failure(now, Duration::from_secs(60)));
        assert!(d.is_dead(now + Duration::from_secs(59)));
        assert!(!d.is_dead(now + Duration::from_secs(60)));
        assert_eq!(dest(3, 0).window, 1, "never below one");
    }

    #[test]
    fn a_rate_limit_lets_one_job_go_per_interval() {
        let mut d = dest(4, 2);
        let t0 = Instant::now();
        assert!(d.pace(t0).is_ok(), "no limit: always");
        assert!(d.pace(t0).is_ok());
        d.interval = Some(Duration::from_millis(500));
        d.next_send = t0;
        assert!(d.pace(t0).is_ok(), "the first goes at once");
        assert_eq!(d.pace(t0), Err(t0 + Duration::from_millis(500)));
        let t1 = t0 + Duration::from_millis(500);
        assert!(d.pace(t1).is_ok());
        assert_eq!(d.pace(t1), Err(t1 + Duration::from_millis(500)));
        // Idle for a long time: no burst of saved-up sends afterwards.
        let t2 = t1 + Duration::from_secs(10);
        assert!(d.pace(t2).is_ok());
        assert!(d.pace(t2).is_err());
    }
}
