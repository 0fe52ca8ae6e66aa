//! Cluster-wide rate limits: at most R messages a minute to one
//! destination from all nodes together.
//!
//! Redis keeps, per destination, the time from which sending slots are
//! still free (GCRA's "theoretical arrival time"). A node reserves a block
//! of consecutive slots, one interval (60 s / R) apart, starting at that
//! time, and moves it past the block (`RESERVE`, atomic). Blocks of
//! different nodes never overlap in Redis's time, and each slot is used
//! once, so however the nodes interleave, the cluster's rate cannot exceed
//! R over any stretch longer than a block (a node places its block within
//! the request's round trip, see `reserved`). A node sends
//! in a slot only during it (a slot already past when the queue gets to
//! it is dropped, not caught up on), reserves about a fifth of a second
//! of slots at a time and the next block when half of one is used, and
//! does not reserve more than a second ahead of Redis's clock.
//!
//! Redis down: each node paces itself at R divided among the nodes (as
//! for connection caps, `mod.rs`).
//!
//! Invariant: a slot is used at most once, and never before its time.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Cluster;

/// Reserves ARGV[1] slots ARGV[2] microseconds apart for KEYS[1] (its
/// free-from time), unless that is more than ARGV[3] microseconds ahead.
/// Returns {start offset from now in microseconds, slots}, or {-1, 0}.
pub(super) const RESERVE: &str = include_str!("lua/reserve.lua");

/// How far ahead of Redis's clock a node may reserve.
pub(super) const AHEAD: Duration = Duration::from_secs(1);

/// One block of a destination's slots, as this node holds them.
#[derive(Debug, Default)]
pub(super) struct Slots {
    pub per_minute: u32,
    /// The next slot and how many are left in this block.
    pub next: Option<Instant>,
    pub left: usize,
    /// The block reserved after this one.
    pub after: Option<(Instant, usize)>,
    /// Pacing without Redis: the next send may go at this time.
    pub alone_next: Option<Instant>,
    /// When the queue last asked for a slot (idle entries are dropped).
    pub touched: Option<Instant>,
}

impl Slots {
    pub fn interval(&self) -> Duration {
        Duration::from_secs(60) / self.per_minute.max(1)
    }

    /// Slots one reservation asks for: about 200 ms of sending.
    pub fn block(&self) -> usize {
        let per = self.interval().as_micros().max(1);
        (200_000 / per).clamp(1, 10_000) as usize
    }

    /// The queue is waiting for slots (none left, none reserved).
    pub fn waiting(&self) -> bool {
        self.left == 0 && self.after.is_none() && self.touched.is_some()
    }

    /// Whether the node should reserve: the current block is half used
    /// and none is waiting.
    pub fn wants_block(&self) -> bool {
        self.after.is_none() && self.left <= self.block() / 2
    }

    /// Takes the slot due at `now`, dropping those already past; `Err`
    /// with when the next one is due, or `None` if none is reserved.
    fn take(&mut self, now: Instant) -> Result<(), Option<Instant>> {
        let interval = self.interval();
        loop {
            if self.left == 0 {
                let (start, n) = self.after.take().ok_or(None)?;
                (self.next, self.left) = (Some(start), n);
            }
            let next = self.next.ok_or(None)?;
            if now < next {
                return Err(Some(next));
            }
            self.left -= 1;
            self.next = Some(next + interval);
            if now < next + interval {
                return Ok(());
            }
            // That slot's time has passed: it is dropped, not caught up on.
        }
    }

    /// Pacing alone: the node's part of the rate.
    fn take_alone(&mut self, now: Instant, nodes: usize) -> Result<(), Option<Instant>> {
        let interval = self.interval() * nodes.max(1) as u32;
        let next = self.alone_next.unwrap_or(now);
        if now < next {
            return Err(Some(next));
        }
        self.alone_next = Some(now + interval);
        Ok(())
    }
}

impl Cluster {
    /// Whether one message may go to `key` now under its cluster-wide rate
    /// (`per_minute`); `Err` with when to try again, or `None` when a
    /// reservation is under way (the destination is pumped when it comes).
    pub fn take_slot(&self, key: &Arc<str>, per_minute: u32) -> Result<(), Option<Instant>> {
        let now = Instant::now();
        let shared = self.shared();
        let nodes = self.node_count();
        let mut state = self.state();
        let slots = state.slots.entry(key.clone()).or_default();
        if slots.per_minute != per_minute {
            *slots = Slots {
                per_minute,
                ..Slots::default()
            };
        }
        slots.touched = Some(now);
        let taken = match shared {
            true => slots.take(now),
            false => slots.take_alone(now, nodes),
        };
        let wake = shared && slots.wants_block();
        drop(state);
        if wake {
            self.wake.notify_one();
        }
        taken
    }

    /// Destinations that should reserve: key, slots per block, interval.
    /// Those the queue has not asked about for ten minutes are forgotten.
    pub(super) fn reservations(&self) -> Vec<(Arc<str>, usize, Duration)> {
        let mut state = self.state();
        let idle = Instant::now().checked_sub(Duration::from_secs(600));
        state
            .slots
            .retain(|_, s| s.touched.zip(idle).is_none_or(|(t, idle)| t > idle));
        (state.slots.iter())
            .filter(|(_, s)| s.wants_block() && s.per_minute > 0)
            .map(|(k, s)| (k.clone(), s.block(), s.interval()))
            .collect()
    }

    /// A reserved block of `n` slots from `start`: the latest its first
    /// slot can be, as Redis's moment is known only to within the round
    /// trip (`rtt`); its last slots, as many whole intervals as the round
    /// trip spans, are left unused, so a block overlaps the next one by
    /// less than an interval (two sends of the cluster are never closer
    /// than an interval minus the round trip; each slot is used once, so
    /// over any longer time the rate holds exactly).
    pub(super) fn reserved(&self, key: &Arc<str>, start: Instant, n: usize, rtt: Duration) {
        let mut state = self.state();
        let Some(slots) = state.slots.get_mut(key) else {
            return;
        };
        let lost = (rtt.as_nanos() / slots.interval().as_nanos().max(1)) as usize;
        let n = n.saturating_sub(lost);
        if n == 0 {
            return;
        }
        if slots.left == 0 {
            (slots.next, slots.left) = (Some(start), n);
        } else {
            slots.after = Some((start, n));
        }
        if let Some(f) = &state.on_grant {
            f(key.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(per_minute: u32) -> Slots {
        Slots {
            per_minute,
            ..Slots::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_block_is_used_one_slot_per_interval_and_past_slots_are_dropped() {
        let mut s = slots(600); // 100 ms apart
        let t0 = Instant::now();
        assert_eq!(s.take(t0), Err(None), "nothing reserved");
        s.next = Some(t0);
        s.left = 3;
        assert_eq!(s.take(t0), Ok(()));
        assert_eq!(s.take(t0), Err(Some(t0 + Duration::from_millis(100))));
        // 250 ms later: the slot at 100 ms is gone, the one at 200 ms is used.
        assert_eq!(s.take(t0 + Duration::from_millis(250)), Ok(()));
        assert_eq!(s.left, 0);
        assert_eq!(s.take(t0 + Duration::from_millis(250)), Err(None));
        s.after = Some((t0 + Duration::from_secs(1), 2));
        assert_eq!(
            s.take(t0 + Duration::from_millis(300)),
            Err(Some(t0 + Duration::from_secs(1)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn alone_a_node_sends_its_part_of_the_rate() {
        let mut s = slots(600);
        let t0 = Instant::now();
        assert_eq!(s.take_alone(t0, 2), Ok(()));
        assert_eq!(
            s.take_alone(t0, 2),
            Err(Some(t0 + Duration::from_millis(200)))
        );
        assert_eq!(s.take_alone(t0 + Duration::from_millis(200), 2), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_block_loses_the_slots_its_round_trip_spans() {
        let c = Cluster::new(
            toml::from_str("redis_url = \"redis://x/\"\npeers = [\"y:25\"]").unwrap(),
            "a",
            Duration::from_secs(60),
        );
        let key: Arc<str> = "d".into();
        c.round_ok(vec!["a".into()], Vec::new());
        assert_eq!(c.take_slot(&key, 600), Err(None), "waiting for a block");
        assert!(c.state().slots[&key].waiting());
        let t0 = Instant::now();
        // 100 ms apart; a 250 ms round trip spans two of the five slots.
        c.reserved(&key, t0, 5, Duration::from_millis(250));
        assert_eq!(c.state().slots[&key].left, 3);
        assert_eq!(c.take_slot(&key, 600), Ok(()));
    }

    #[test]
    fn a_block_is_a_fifth_of_a_second_of_sending() {
        assert_eq!(slots(600).block(), 2);
        assert_eq!(slots(60_000).block(), 200);
        assert_eq!(slots(1).block(), 1);
    }
}
