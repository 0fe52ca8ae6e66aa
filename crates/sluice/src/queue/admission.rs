//! The bounded active queue, like Postfix's `qmgr_message_active_limit`:
//! at most `queue.active_limit` messages are in memory with their
//! envelopes. The others wait on disk ("parked"): new mail that finds the
//! active queue full, mail recovered at start-up, and deferred mail until
//! its retry time (recovered mail: the one its last attempt record
//! names). A parked message costs its queue ID, where its record
//! is, and which recipients are done; its envelope is read back from the
//! spool (on the blocking pool, in batches) when room frees up.
//!
//! Invariants: a message is in exactly one of `messages` (active),
//! `parked`, or an envelope load in flight (`loading` counts those, and
//! they count against the limit); `ready` and the retry queue hold only
//! parked IDs; arrivals are admitted first come, first served.

use sluice_spool::{BodyRef, Envelope};

use super::compact::{Reason, Spot};
use sluice_spool::DoneSet;

use super::scheduler::Scheduler;
use super::{Event, QueuedMessage};
use crate::log;
use crate::log::qid;
use crate::message::flags::{MARK_DELAY_WARNED, MARK_RELEASED, QUARANTINE};

/// Why a parked message's envelope could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadBack {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("reading the queue file failed unexpectedly")]
    Panicked,
    #[error("recipient count does not match the spool index")]
    Mismatch,
}

/// Envelopes read back per blocking task.
const LOAD_BATCH: usize = 256;

/// A message waiting on disk (56 bytes; see `compact.rs`).
pub(super) struct Parked {
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
pub(super) fn secs32(secs: u64) -> u32 {
    secs.min(u32::MAX as u64) as u32
}

impl Scheduler {
    /// Parks a message; it waits for room (`ready`) unless `retry_at` is
    /// given, in which case it waits for that time first.
    pub(super) fn park(&mut self, id: u64, parked: Parked, retry_at: Option<tokio::time::Instant>) {
        self.parked.insert(id, parked);
        if self.admin.held.contains(&id) {
            // On hold: kept, neither retried nor brought in.
            return;
        }
        match retry_at {
            Some(at) => self.retry.push(at, id),
            None => self.ready.push_back(id),
        }
    }

    /// Messages found in the spool at start-up: all wait on disk first,
    /// deferred mail until the retry time recorded with its last attempt
    /// (as Postfix waits), with its attempt count and reason.
    pub(super) fn recovered(&mut self, batch: Vec<sluice_spool::Recovered>) {
        let now = crate::timefmt::now_millis() / 1000;
        for r in batch {
            if r.flags & QUARANTINE != 0 && r.marks & MARK_RELEASED == 0 {
                self.admin.held.insert(r.id);
            }
            let attempt = r.attempt.unwrap_or_default();
            // The spool keeps the text, not the destination that gave it.
            // This is the spool boundary for replies: the attempt record's
            // text (as `Reply`'s Display wrote it, or as older versions
            // did) becomes a typed reply once, here.
            let reason = (!attempt.reason.is_empty()).then(|| {
                let reply = crate::message::status::Reply::parse(&attempt.reason, 451);
                self.reasons.get(&None, &reply)
            });
            let parked = Parked {
                spot: Spot::of(r.body),
                done: r.done,
                attempts: attempt.count.min(u16::MAX as u32) as u16,
                warned: r.marks & MARK_DELAY_WARNED != 0,
                reason,
                last_at: secs32(attempt.at),
                next_at: secs32(attempt.next),
            };
            self.park(r.id, parked, self.recovered_retry(attempt.next, now));
        }
    }

    /// When recovered mail whose next attempt was due at `next` (Unix
    /// seconds) is tried: then, if still to come, but never later than
    /// the longest backoff from now (a clock set back must not strand
    /// it); at once (`None`) if due, or never deferred.
    fn recovered_retry(&self, next: u64, now: u64) -> Option<tokio::time::Instant> {
        if next <= now {
            return None;
        }
        let q = &self.config.queue;
        let longest = q.maximal_backoff_secs.max(q.minimal_backoff_secs).max(1);
        let wait = std::time::Duration::from_secs((next - now).min(longest));
        Some(tokio::time::Instant::now() + wait)
    }

    /// Deferred messages whose retry time has come wait for room.
    pub(super) fn run_due_retries(&mut self) {
        if self.draining.is_some() || self.retry.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        while let Some(id) = self.retry.pop_due(now) {
            if self.parked.contains_key(id) && !self.admin.held.contains(&id) {
                self.ready.push_back(id);
            }
        }
    }

    /// True if a new arrival can go straight into the active queue: there
    /// is room and nobody is waiting or being brought in ahead of it.
    pub(super) fn has_room(&self) -> bool {
        self.ready.is_empty() && self.loading == 0 && self.messages.len() < self.active_limit
    }

    /// Starts reading envelopes for waiting messages while there is room.
    pub(super) fn admit(&mut self) {
        if self.draining.is_some() {
            return;
        }
        loop {
            let room = self
                .active_limit
                .saturating_sub(self.messages.len() + self.loading);
            let n = room.min(self.ready.len()).min(LOAD_BATCH);
            if n == 0 {
                return;
            }
            let batch: Vec<(u64, BodyRef)> = self
                .ready
                .drain(..n)
                .filter_map(|id| self.parked.get(id).map(|p| (id, p.spot.body_ref(id))))
                .collect();
            self.loading += batch.len();
            let (spool, events) = (self.spool.clone(), self.events.clone());
            tokio::task::spawn_blocking(move || {
                let ids: Vec<u64> = batch.iter().map(|(id, _)| *id).collect();
                let read = || {
                    batch
                        .into_iter()
                        .map(|(id, body)| (id, spool.read_envelope(body).map_err(ReadBack::Io)))
                        .collect()
                };
                // Whatever happens, every ID comes back, so `loading` is
                // always paid back and admission never stalls.
                let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
                    .unwrap_or_else(|_| {
                        ids.into_iter()
                            .map(|id| (id, Err(ReadBack::Panicked)))
                            .collect()
                    });
                let _ = events.blocking_send(Event::Loaded(loaded));
            });
        }
    }

    /// Envelopes read back: the messages become active and are dispatched.
    pub(super) fn loaded(&mut self, loaded: Vec<(u64, Result<Envelope, ReadBack>)>) {
        for (id, result) in loaded {
            self.loading = self.loading.saturating_sub(1);
            let Some(parked) = self.parked.remove(id) else {
                continue;
            };
            match result {
                Ok(envelope) if envelope.recipients.len() == parked.done.len() => {
                    let msg = QueuedMessage {
                        envelope,
                        body_ref: parked.spot.body_ref(id),
                        body: None,
                        done: parked.done.to_vec(),
                    };
                    self.activate(msg, parked.attempts.into(), parked.warned);
                }
                other => {
                    let why = match other {
                        Err(e) => e,
                        Ok(_) => ReadBack::Mismatch,
                    };
                    log!(
                        self.logger,
                        "qmgr",
                        "{}: cannot read queue file: {why}; left in the spool, retried later",
                        qid(id)
                    );
                    let attempts = parked.attempts.saturating_add(1);
                    let at = tokio::time::Instant::now() + self.retry_wait(attempts.into(), id);
                    let parked = Parked { attempts, ..parked };
                    self.park(id, parked, Some(at));
                }
            }
        }
        self.admit();
    }
}
