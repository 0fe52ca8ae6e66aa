//! The bounded active queue's waiting side, like Postfix's
//! `qmgr_message_active_limit`: at most `queue.active_limit` messages are
//! in memory with their envelopes (`Messages`). The others wait on disk
//! ("parked"): new mail that finds the active queue full, mail recovered
//! at start-up, and deferred mail until its retry time. A parked message
//! costs its queue ID, where its record is, and which recipients are
//! done; its envelope is read back from the spool when room frees up
//! (`queue/admission.rs` does the reading).
//!
//! Invariants: a message is active or parked, never both; a message
//! whose envelope is being read back stays parked until it comes back
//! (`loading` counts those, and they count against the limit); `ready`
//! and the retry queue hold queue IDs, which may have left meanwhile
//! (they are skipped then); arrivals are admitted first come, first
//! served; `loading` never goes below zero.

use std::collections::VecDeque;

use sluice_spool::{BodyRef, DoneSet, IdTable};
use std::time::Instant;

use crate::message::status::Reply;
use crate::queue::compact::{Reason, Reasons, Spot};
use crate::queue::retry::RetryQueue;

/// Envelopes read back per batch.
const LOAD_BATCH: usize = 256;

/// A message waiting on disk (56 bytes; see `compact.rs`).
pub struct Parked {
    pub done: DoneSet,
    /// Why it was last deferred (for `sluice queue list`), shared with the
    /// other messages deferred for the same reason.
    pub reason: Option<Reason>,
    /// Where its record is (with the table's key, its `BodyRef`).
    pub spot: Spot,
    /// Delivery attempts so far (saturating: the backoff stops growing
    /// long before).
    pub attempts: u16,
    /// The sender has had a delay warning.
    pub warned: bool,
    /// When it was last tried and is due again, Unix seconds (0: not
    /// known), for `sluice queue show`; the retry queue holds the timer.
    pub last_at: u32,
    pub next_at: u32,
}

// The size the figure above assumes.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Parked>() == 56);

/// Unix seconds in 32 bits (good until 2106).
pub fn secs32(secs: u64) -> u32 {
    secs.min(u32::MAX as u64) as u32
}

pub struct Admission {
    /// Messages waiting on disk.
    parked: IdTable<Parked>,
    /// Parked messages waiting for room in the active queue, oldest first.
    ready: VecDeque<u64>,
    /// Envelopes being read back (they count against the limit).
    loading: usize,
    limit: usize,
    /// Deferred messages by the time of their next attempt.
    retry: RetryQueue,
    /// Deferral reasons of parked messages, one copy each.
    reasons: Reasons,
}

impl Admission {
    pub fn new(limit: usize, origin: Instant) -> Admission {
        Admission {
            parked: IdTable::default(),
            ready: VecDeque::new(),
            loading: 0,
            limit: limit.max(1),
            retry: RetryQueue::new(origin),
            reasons: Reasons::default(),
        }
    }

    /// A reload's new limit (messages already active stay).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.max(1);
    }

    #[cfg(test)]
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Parks a message; it waits for room unless `retry_at` is given, in
    /// which case it waits for that time first; a `held` one waits for
    /// neither (it is kept until released).
    pub fn park(&mut self, id: u64, parked: Parked, held: bool, retry_at: Option<Instant>) {
        self.parked.insert(id, parked);
        if held {
            return;
        }
        match retry_at {
            Some(at) => self.retry.push(at, id),
            None => self.ready.push_back(id),
        }
    }

    /// Deferred messages whose retry time has come line up for room
    /// (unless held or gone meanwhile).
    pub fn run_due_retries(&mut self, now: Instant, held: impl Fn(u64) -> bool) {
        while let Some(id) = self.retry.pop_due(now) {
            if self.parked.contains_key(id) && !held(id) {
                self.ready.push_back(id);
            }
        }
    }

    /// When the earliest retry is due.
    pub fn next_retry(&self) -> Option<Instant> {
        self.retry.next_due()
    }

    /// True if a new arrival can go straight into the active queue (of
    /// `active` messages): there is room and nobody is waiting or being
    /// brought in ahead of it.
    pub fn has_room(&self, active: usize) -> bool {
        self.ready.is_empty() && self.loading == 0 && active < self.limit
    }

    /// The next messages to read back while there is room beside `active`
    /// messages (empty: none); they count as loading until `loaded`.
    pub fn next_batch(&mut self, active: usize) -> Vec<(u64, BodyRef)> {
        // More active than the limit after a reload lowered it: no room.
        let room = self.limit.saturating_sub(active + self.loading);
        let n = room.min(self.ready.len()).min(LOAD_BATCH);
        let parked = &self.parked;
        let batch: Vec<(u64, BodyRef)> = self
            .ready
            .drain(..n)
            .filter_map(|id| parked.get(id).map(|p| (id, p.spot.body_ref(id))))
            .collect();
        self.loading += batch.len();
        batch
    }

    /// A read-back envelope of message `id` is here: the message leaves
    /// the parked table (`None` if it left meanwhile).
    pub fn loaded(&mut self, id: u64) -> Option<Parked> {
        debug_assert!(self.loading > 0, "loading below zero");
        self.loading -= 1;
        self.parked.remove(id)
    }

    #[cfg(test)]
    pub fn loading(&self) -> usize {
        self.loading
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Parked> {
        self.parked.get_mut(id)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.parked.contains_key(id)
    }

    /// Takes a message out of the queue (its places in line are skipped).
    pub fn remove(&mut self, id: u64) -> Option<Parked> {
        self.parked.remove(id)
    }

    pub fn len(&self) -> usize {
        self.parked.len()
    }

    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.parked.keys()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &Parked)> {
        self.parked.iter()
    }

    /// Message `id` goes to the back of the line for room.
    pub fn line_up(&mut self, id: u64) {
        self.ready.push_back(id);
    }

    pub fn in_line(&self, id: u64) -> bool {
        self.ready.contains(&id)
    }

    /// The messages in line for room.
    pub fn line(&self) -> impl Iterator<Item = u64> + '_ {
        self.ready.iter().copied()
    }

    /// Message `id` leaves the line (it is held).
    pub fn leave_line(&mut self, id: u64) {
        self.ready.retain(|r| *r != id);
    }

    /// The shared copy of a deferral reason given by `dest`.
    pub fn reason(&mut self, dest: &Option<std::sync::Arc<str>>, reply: &Reply) -> Reason {
        self.reasons.get(dest, reply)
    }
}
