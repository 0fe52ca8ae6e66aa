//! Retry policy: exponential backoff with a little jitter, and the heap of
//! messages waiting for their next attempt.
//!
//! Invariant: a message is in the heap at most once per delivery round
//! (the scheduler pushes it only when a round ends with work left).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tokio::time::Instant;

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

/// Messages by the time of their next attempt.
#[derive(Default)]
pub struct RetryQueue {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl RetryQueue {
    pub fn push(&mut self, at: Instant, id: u64) {
        self.heap.push(Reverse((at, id)));
    }

    /// When the earliest retry is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// The next message whose time has come.
    pub fn pop_due(&mut self, now: Instant) -> Option<u64> {
        match self.heap.peek() {
            Some(Reverse((at, _))) if *at <= now => self.heap.pop().map(|Reverse((_, id))| id),
            _ => None,
        }
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
