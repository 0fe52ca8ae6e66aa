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
//! The destination itself (window, dead mark, pace) is
//! `core::Destination`, the set of them `core::Destinations`; this file
//! decides which job goes to which worker (`Action::Hand`, or a new
//! worker: `Action::Start`) and takes their reports.

use std::sync::Arc;
use std::time::Duration;

use super::core::Destination;
use super::dispatch::QueueCore;
use super::job::{defer_all, Feedback, Job, WorkerId};
use super::step::Action;
use crate::config::hop::NextHop;
use crate::log::Event;
use crate::message::status::{Enhanced, Outcome, Relay, Reply};

impl QueueCore {
    /// The destination `key` (delivering through `hop`), made on first use
    /// with the concurrency and rate configured for that key.
    pub(super) fn destination_for(&mut self, key: &Arc<str>, hop: &Arc<NextHop>) -> Arc<str> {
        if !self.dests.contains(key) {
            let (limit, interval) = self.limits_for(key);
            // A local disk needs no slow start: its window opens at once.
            let initial = match **hop {
                NextHop::Maildir | NextHop::System => limit,
                _ => self.config.delivery.initial_concurrency,
            };
            let mut dest = Destination::new(hop.clone(), limit, initial, self.clock.at);
            dest.interval = interval;
            self.dests.insert(key.clone(), dest);
        }
        key.clone()
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
        if dest.is_dead(self.clock.at) {
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
        if self.draining() {
            return;
        }
        let Some(dest) = self.dests.get_mut(key) else {
            return;
        };
        let caps = self.caps.as_deref();
        let allowed = super::leases::allowance(caps, key, dest);
        if let Some(allowed) = allowed {
            for worker in super::leases::shed(dest, allowed) {
                self.out.push(Action::Close(worker));
            }
        }
        // Over its allowance or not, a destination whose domain is being
        // looked up starts nothing: its jobs wait for the answer.
        if dest.resolving {
            return;
        }
        let now = self.clock.at;
        dest.last_used = now;
        let mut wake = None;
        while let Some(job) = dest.queue.pop_front() {
            // Room first: a rate's slot is not spent on a job with nowhere
            // to go.
            let capped = allowed.is_some_and(|a| dest.held() >= a);
            if dest.idle.is_empty() && (dest.workers.len() >= dest.window || capped) {
                dest.queue.push_front(job);
                break;
            }
            let paced = match dest.pace(now) {
                Ok(()) => super::leases::take_slot(caps, key),
                Err(at) => Err(Some(at)),
            };
            if let Err(at) = paced {
                dest.queue.push_front(job);
                // No time: a reservation is under way and pumps when done.
                wake = at;
                break;
            }
            let dest_key = key.clone();
            if let Some(worker) = dest.idle.pop() {
                // Should the worker be on its way out, the job comes back
                // (`Input::Unsent`).
                self.out.push(Action::Hand {
                    dest: dest_key,
                    worker,
                    job,
                });
                continue;
            }
            let worker = self.next_worker;
            self.next_worker += 1;
            dest.workers.insert(worker);
            self.out.push(Action::Start {
                worker,
                dest: dest_key,
                hop: dest.hop.clone(),
                first: job,
            });
        }
        if allowed.is_some() {
            // What it holds now, for the next claim.
            super::leases::allowance(caps, key, dest);
        }
        if let Some(at) = wake {
            self.dests.wake_at(key, at);
        }
    }

    /// A job handed to a worker already on its way out: back to the front
    /// of its queue (or, in a drain, left open in the spool).
    pub(super) fn unsent(&mut self, key: Arc<str>, job: Job) {
        let draining = self.draining();
        match self.dests.get_mut(&key) {
            Some(dest) if !draining => dest.queue.push_front(job),
            _ => self.messages.jobs_abandoned(1),
        }
        self.pump(&key);
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
        let draining = self.draining();
        let mut dead = false;
        if let Some(dest) = self.dests.get_mut(&key) {
            if feedback == Feedback::ConnectFailed {
                dead = dest.on_connect_failure(self.clock.at, dead_for);
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
                self.out.push(Action::Close(worker));
            } else if dest.workers.contains(&worker) {
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
            self.logger.emit(&Event::DestinationDead {
                destination: (&*key).into(),
                deferred: queued.len() as u64,
            });
            for job in queued {
                self.defer_job(job, &key, &reply);
            }
        }
        self.pump(&key);
    }

    pub(super) fn worker_exit(&mut self, key: Arc<str>, worker: WorkerId, returned: Vec<Job>) {
        if self.draining() {
            // Not started and not to be started now: they stay open in
            // the spool, and the drain does not wait for them.
            self.messages.jobs_abandoned(returned.len());
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
