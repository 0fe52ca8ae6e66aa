//! One destination: a next hop's FIFO of jobs, its concurrency window and
//! its workers (one per connection), its dead mark and rate limit.
//!
//! The window starts small, grows by one per job that delivered something,
//! up to the limit, and shrinks on connection failures, as Postfix's qmgr
//! does. A destination whose connections all fail is declared dead for the
//! minimal backoff time.
//!
//! Invariants: `workers` holds every live worker (the driver keeps their
//! job senders);
//! `idle` ⊆ `workers`; a job is in at most one of `queue` or a worker;
//! `1 <= window <= limit`.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;

use crate::config::hop::NextHop;
use crate::queue::job::{Job, WorkerId};

pub struct Destination {
    pub hop: Arc<NextHop>,
    pub queue: VecDeque<Job>,
    pub workers: HashSet<WorkerId>,
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
    /// When it last had something to do (for pruning, `destinations.rs`).
    pub last_used: Instant,
}

impl Destination {
    pub fn new(hop: Arc<NextHop>, limit: usize, initial: usize, now: Instant) -> Destination {
        let limit = limit.max(1);
        Destination {
            hop,
            queue: VecDeque::new(),
            workers: HashSet::new(),
            idle: Vec::new(),
            closing: HashSet::new(),
            limit,
            window: initial.clamp(1, limit),
            dead_until: None,
            resolving: false,
            interval: None,
            next_send: now,
            wake_pending: false,
            last_used: now,
        }
    }

    /// Connections open: live workers and those on their way out.
    pub fn held(&self) -> usize {
        self.workers.len() + self.closing.len()
    }

    /// Ends a worker once it is idle (the caller has the driver drop its
    /// sender: `Action::Close`); it counts as closing until its exit
    /// report.
    pub fn close(&mut self, worker: WorkerId) {
        self.idle.retain(|w| *w != worker);
        if self.workers.remove(&worker) {
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

    /// Nothing queued, running, closing, looked up or paced, not dead,
    /// no rate-limit slot still to come, and unused for `after`: nothing
    /// worth keeping that a fresh destination would not have. An MX
    /// group's destination is kept (until a reload forgets the groups):
    /// its member domains' jobs find it by key, and one made again from a
    /// member's job would carry the member's next hop, not the group's
    /// host set (`rollup.rs`).
    pub fn prunable(&self, now: Instant, after: Duration) -> bool {
        !matches!(*self.hop, NextHop::MxSet { .. })
            && self.queue.is_empty()
            && self.workers.is_empty()
            && self.closing.is_empty()
            && !self.resolving
            && !self.wake_pending
            && self.dead_until.is_none_or(|until| until <= now)
            && self.next_send <= now
            && now.saturating_duration_since(self.last_used) >= after
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(limit: usize, initial: usize) -> Destination {
        Destination::new(Arc::new(NextHop::Discard), limit, initial, Instant::now())
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
        d.workers.insert(1);
        d.workers.insert(2);
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

    #[test]
    fn only_an_idle_destination_with_nothing_worth_keeping_is_prunable() {
        let idle = Duration::from_secs(300);
        let mut d = dest(4, 2);
        let t0 = d.last_used;
        assert!(!d.prunable(t0 + idle - Duration::from_secs(1), idle));
        assert!(d.prunable(t0 + idle, idle));
        d.dead_until = Some(t0 + idle * 2);
        assert!(!d.prunable(t0 + idle, idle), "its dead mark still counts");
        assert!(d.prunable(t0 + idle * 2, idle), "not once it has run out");
        d.workers.insert(1);
        assert!(!d.prunable(t0 + idle * 2, idle), "a worker is alive");
        let group = NextHop::MxSet {
            levels: vec![vec!["mx.test".into()]],
            port: 25,
        };
        let g = Destination::new(Arc::new(group), 4, 2, t0);
        assert!(!g.prunable(t0 + idle * 2, idle), "an MX group is kept");
    }
}
