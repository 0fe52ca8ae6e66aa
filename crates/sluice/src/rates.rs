//! The dashboard's rates, counted by the daemon: messages received and
//! recipients delivered, deferred and bounced in each 10-second interval
//! of the last ten minutes, served at `/api/rates`. A page loaded now shows
//! the last minutes at once (it used to work rates out from its own
//! samples of `/metrics`, so every load started from nothing).
//!
//! They are counted where the `sluice_messages_received_total` and
//! `sluice_deliveries_total` counters are, one ring per process like the
//! metrics recorder (daemons started in one test process share it).
//!
//! Invariants: memory is fixed, [`SLOTS`] intervals in an array; the slot
//! of interval `start` is `start / BUCKET_SECS % SLOTS`, reset when a newer
//! interval takes it over, and a read answers only for slots whose
//! interval is one of the last [`SLOTS`] (others count zero), so a quiet
//! spell or a clock stepped back never shows old counts as new.
//!
//! Trust: counts only; nothing a client sends is kept.

use std::sync::{Mutex, PoisonError};

/// Seconds in one interval.
pub const BUCKET_SECS: u64 = 10;
/// Intervals kept: ten minutes.
pub const SLOTS: usize = 60;
/// Intervals in "the last minute" (the current one, partly over, and the
/// five before it).
const MINUTE: usize = (60 / BUCKET_SECS) as usize;

/// What happened once.
#[derive(Debug, Clone, Copy)]
pub enum Tally {
    /// A message was accepted.
    Received,
    /// A recipient was delivered.
    Delivered,
    /// A recipient's delivery was deferred.
    Deferred,
    /// A recipient's delivery failed for good.
    Bounced,
}

/// One interval's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Bucket {
    /// Its first second (Unix time, a multiple of [`BUCKET_SECS`]).
    pub start: u64,
    pub received: u64,
    pub delivered: u64,
    pub deferred: u64,
    pub bounced: u64,
}

/// `/api/rates`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rates {
    pub bucket_secs: u64,
    /// Unix time of the answer.
    pub now: u64,
    /// The sums of the last [`MINUTE`] intervals (`start` is the first's).
    pub last_minute: Bucket,
    /// The last [`SLOTS`] intervals, oldest first, the current one last
    /// (partly over); intervals with nothing in them count zero.
    pub buckets: Vec<Bucket>,
}

struct Ring([Bucket; SLOTS]);

static RING: Mutex<Ring> = Mutex::new(Ring(
    [Bucket {
        start: 0,
        received: 0,
        delivered: 0,
        deferred: 0,
        bounced: 0,
    }; SLOTS],
));

/// Counts one event now.
pub fn count(what: Tally) {
    let now = crate::timefmt::now_millis() / 1000;
    RING.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .count(now, what);
}

/// The rates now.
pub fn rates() -> Rates {
    let now = crate::timefmt::now_millis() / 1000;
    RING.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .rates(now)
}

fn slot_of(start: u64) -> usize {
    (start / BUCKET_SECS) as usize % SLOTS
}

impl Ring {
    fn count(&mut self, now: u64, what: Tally) {
        let start = now - now % BUCKET_SECS;
        let slot = &mut self.0[slot_of(start)];
        if slot.start != start {
            *slot = Bucket {
                start,
                ..Bucket::default()
            };
        }
        let n = match what {
            Tally::Received => &mut slot.received,
            Tally::Delivered => &mut slot.delivered,
            Tally::Deferred => &mut slot.deferred,
            Tally::Bounced => &mut slot.bounced,
        };
        *n = n.saturating_add(1);
    }

    fn rates(&self, now: u64) -> Rates {
        let current = now - now % BUCKET_SECS;
        let buckets: Vec<Bucket> = (0..SLOTS as u64)
            .rev()
            .filter_map(|back| current.checked_sub(back * BUCKET_SECS))
            .map(|start| match self.0[slot_of(start)] {
                b if b.start == start => b,
                _ => Bucket {
                    start,
                    ..Bucket::default()
                },
            })
            .collect();
        let recent = &buckets[buckets.len().saturating_sub(MINUTE)..];
        let mut last_minute = Bucket {
            start: recent.first().map_or(current, |b| b.start),
            ..Bucket::default()
        };
        for b in recent {
            last_minute.received += b.received;
            last_minute.delivered += b.delivered;
            last_minute.deferred += b.deferred;
            last_minute.bounced += b.bounced;
        }
        Rates {
            bucket_secs: BUCKET_SECS,
            now,
            last_minute,
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> Ring {
        Ring([Bucket::default(); SLOTS])
    }

    #[test]
    fn the_last_minute_and_ten_minutes_of_intervals() {
        let mut r = ring();
        let t = 1_800_000_000; // a multiple of 10
        r.count(t - 61, Tally::Received); // older than the last minute
        r.count(t - 50, Tally::Received);
        r.count(t + 9, Tally::Received);
        r.count(t + 9, Tally::Deferred);
        r.count(t + 3, Tally::Delivered);
        let rates = r.rates(t + 9);
        assert_eq!(rates.buckets.len(), SLOTS);
        assert_eq!(rates.buckets[SLOTS - 1].start, t);
        assert_eq!(rates.buckets[0].start, t - 590);
        assert_eq!(rates.buckets[SLOTS - 1].received, 1);
        assert_eq!(rates.buckets[SLOTS - 1].delivered, 1);
        assert_eq!(rates.last_minute.start, t - 50);
        assert_eq!(rates.last_minute.received, 2);
        assert_eq!(rates.last_minute.deferred, 1);
        let all: u64 = rates.buckets.iter().map(|b| b.received).sum();
        assert_eq!(all, 3);
    }

    #[test]
    fn old_intervals_never_show_as_new() {
        let mut r = ring();
        let t = 1_800_000_000;
        r.count(t, Tally::Received);
        // Ten minutes on, the slot is the same; its count is not today's.
        let later = t + (SLOTS as u64) * BUCKET_SECS;
        let rates = r.rates(later);
        assert!(rates.buckets.iter().all(|b| b.received == 0));
        r.count(later, Tally::Delivered);
        let rates = r.rates(later);
        assert_eq!(rates.last_minute.received, 0);
        assert_eq!(rates.last_minute.delivered, 1);
        // A clock stepped back: the newer interval is not shown as older.
        let rates = r.rates(t);
        assert!(rates.buckets.iter().all(|b| b.delivered == 0));
    }
}
