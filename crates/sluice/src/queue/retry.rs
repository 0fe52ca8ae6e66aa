//! Retry policy: exponential backoff with a little jitter, and the heap of
//! messages waiting for their next attempt.
//!
//! Invariant: a message is in the heap at most once per delivery round
//! (the scheduler pushes it only when a round ends with work left).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use std::time::Instant;

/// Delay before attempt `attempts + 1`: `min · 2^(attempts-1)`, capped at
/// `max`, plus 0–9 % jitter derived from the queue ID, so messages deferred
/// together do not all come back in the same instant (and tests stay
/// deterministic).
pub fn backoff(attempts: u32, min_secs: u64, max_secs: u64, id: u64) -> Duration {
    let max = max_secs.max(min_secs).max(1);
    let base = min_secs
        .max(1)
        .saturating_mul(1u64 << attempts.saturating_sub(1).min(20))
        .min(max);
    let mix = id.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(attempts) >> 16;
    let jitter_ms = base * 1000 * (mix % 10) / 100;
    Duration::from_secs(base) + Duration::from_millis(jitter_ms)
}

/// Messages by the time of their next attempt: 16 bytes each (a backlog
/// of a million deferred messages is in here), the time kept as
/// nanoseconds after the queue's start (`origin`, given by its owner:
/// the queue's clock is its caller's, never read here).
pub struct RetryQueue {
    origin: Instant,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
}

impl RetryQueue {
    /// An empty queue whose times count from `origin` (a time no retry
    /// is due before: when the queue started).
    pub fn new(origin: Instant) -> RetryQueue {
        RetryQueue {
            origin,
            heap: BinaryHeap::new(),
        }
    }

    pub fn push(&mut self, at: Instant, id: u64) {
        let origin = self.origin;
        // Before the origin means already due: as early as the origin,
        // which is past.
        let nanos = at.saturating_duration_since(origin).as_nanos();
        if self.heap.len() == self.heap.capacity() {
            // Grow by an eighth, not double (see `sluice_spool::IdTable`).
            self.heap.reserve_exact((self.heap.len() / 8).max(64));
        }
        self.heap
            .push(Reverse((nanos.min(u64::MAX as u128) as u64, id)));
    }

    fn at(&self, nanos: u64) -> Option<Instant> {
        Some(self.origin + Duration::from_nanos(nanos))
    }

    /// When the earliest retry is due.
    pub fn next_due(&self) -> Option<Instant> {
        let Reverse((nanos, _)) = self.heap.peek()?;
        self.at(*nanos)
    }

    /// The next message whose time has come.
    pub fn pop_due(&mut self, now: Instant) -> Option<u64> {
        if self.next_due()? > now {
            return None;
        }
        let id = self.heap.pop().map(|Reverse((_, id))| id);
        if self.heap.len() < self.heap.capacity() / 4 && self.heap.capacity() > 4096 {
            // A drained backlog gives its memory back.
            self.heap.shrink_to(self.heap.len() * 2);
        }
        id
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_come_due_in_time_order_at_their_exact_time() {
        let origin = Instant::now();
        let now = origin + Duration::from_secs(5);
        let mut q = RetryQueue::new(origin);
        q.push(now + Duration::from_millis(2_500), 1);
        q.push(now + Duration::from_nanos(1), 2);
        q.push(origin - Duration::from_secs(1), 3);
        assert_eq!(
            q.next_due(),
            Some(origin),
            "a time before the origin is due at once"
        );
        assert_eq!(q.pop_due(now), Some(3));
        assert_eq!(q.pop_due(now), None);
        assert_eq!(q.next_due(), Some(now + Duration::from_nanos(1)));
        assert_eq!(q.pop_due(now + Duration::from_nanos(1)), Some(2));
        assert_eq!(q.pop_due(now + Duration::from_millis(2_499)), None);
        assert_eq!(q.next_due(), Some(now + Duration::from_millis(2_500)));
        assert_eq!(q.pop_due(now + Duration::from_millis(2_500)), Some(1));
        assert!(q.is_empty());
    }

    #[test]
    fn backoff_doubles_from_the_minimum_to_the_maximum() {
        let secs: Vec<u64> = (1..=6)
            .map(|a| backoff(a, 300, 4000, 0).as_secs())
            .collect();
        assert_eq!(secs, [300, 600, 1200, 2400, 4000, 4000]);
        for id in 0..50 {
            let d = backoff(2, 300, 4000, id);
            assert!(
                d >= Duration::from_secs(600) && d < Duration::from_secs(660),
                "{d:?}"
            );
        }
        let spread: std::collections::HashSet<_> =
            (0..50).map(|id| backoff(1, 300, 4000, id)).collect();
        assert!(spread.len() > 3, "jitter spreads retries");
        // A maximum below the minimum does not make the delay shrink.
        assert_eq!(backoff(3, 60, 10, 0).as_secs(), 60);
    }
}
