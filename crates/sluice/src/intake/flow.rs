//! In-flow pacing, as Postfix's `in_flow_delay`: when local delivery
//! falls behind receipt, a new SMTP transaction waits (at MAIL FROM, at
//! most `queue.in_flow_delay_ms`) until it has caught up.
//!
//! Why: on a busy machine the sessions and the local delivery agent
//! share the CPU. Without pacing, receipt takes more than its share, the
//! backlog grows while the clients are served, and delivery finishes
//! long after the last `250` (measured: 11.7 s after, for 60,000
//! messages at 250 sessions). The queue publishes how many jobs wait for
//! a local delivery agent (Maildir, LMTP); above `queue.in_flow_limit`, a
//! MAIL command waits for the backlog to fall below it again, or for the
//! delay to pass, then goes on either way: pacing slows a client, it
//! never refuses one.
//!
//! Only local delivery counts: mail waiting for a slow or dead remote
//! destination is that destination's problem, and must not slow the
//! rest (as it would if, like Postfix, every queued message counted).
//!
//! Trusts: the scheduler to publish the backlog after every round of
//! events. Invariant: a waiter is woken when the backlog falls to the
//! limit or below, or at its deadline, whichever comes first.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// The backlog of local delivery and the pacing settings; one per
/// process, shared by the queue and every session.
#[derive(Debug, Default)]
pub struct InFlow {
    waiting: AtomicUsize,
    limit: AtomicUsize,
    delay_ms: AtomicU64,
    caught_up: Notify,
}

impl InFlow {
    /// Pacing with these settings (`delay_ms` 0: never).
    pub fn new(limit: usize, delay_ms: u64) -> InFlow {
        let flow = InFlow::default();
        flow.configure(limit, delay_ms);
        flow
    }

    /// New settings (at start and reload).
    pub fn configure(&self, limit: usize, delay_ms: u64) {
        self.limit.store(limit.max(1), Ordering::Relaxed);
        self.delay_ms.store(delay_ms, Ordering::Relaxed);
        self.caught_up.notify_waiters();
    }

    /// The queue's count of jobs waiting for a local delivery agent.
    pub fn publish(&self, waiting: usize) {
        let before = self.waiting.swap(waiting, Ordering::Relaxed);
        let limit = self.limit.load(Ordering::Relaxed);
        if waiting <= limit && before > limit {
            self.caught_up.notify_waiters();
        }
    }

    /// Jobs waiting for local delivery, as last published.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Local delivery is behind: a new transaction would be paced.
    pub fn behind(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > self.limit.load(Ordering::Relaxed)
    }

    /// Waits while local delivery is behind, at most the configured
    /// delay; returns how long it waited (zero when it was not behind).
    pub async fn pace(&self) -> Duration {
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::Relaxed));
        if delay.is_zero() || !self.behind() {
            return Duration::ZERO;
        }
        let start = tokio::time::Instant::now();
        let deadline = start + delay;
        loop {
            let woken = self.caught_up.notified();
            tokio::pin!(woken);
            // Registered before the check, so a publish between the two
            // still wakes it.
            woken.as_mut().enable();
            if !self.behind() {
                break;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                break;
            }
        }
        metrics::counter!("sluice_in_flow_delays_total").increment(1);
        start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn not_behind_means_no_wait() {
        let flow = InFlow::new(10, 1000);
        flow.publish(10);
        assert_eq!(flow.pace().await, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn behind_waits_at_most_the_delay() {
        let flow = InFlow::new(10, 1000);
        flow.publish(11);
        assert_eq!(flow.pace().await, Duration::from_millis(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_delay_turns_pacing_off() {
        let flow = InFlow::new(10, 0);
        flow.publish(1_000_000);
        assert_eq!(flow.pace().await, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn catching_up_wakes_the_waiters_before_the_deadline() {
        let flow = Arc::new(InFlow::new(10, 1000));
        flow.publish(50);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let f = flow.clone();
                tokio::spawn(async move { f.pace().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        flow.publish(20); // still behind: nobody goes
        tokio::time::sleep(Duration::from_millis(100)).await;
        flow.publish(10); // caught up
        for w in waiters {
            assert_eq!(w.await.unwrap(), Duration::from_millis(400));
        }
    }
}
