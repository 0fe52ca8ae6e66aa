//! The bounded active queue, like Postfix's `qmgr_message_active_limit`:
//! at most `queue.active_limit` messages are in memory with their
//! envelopes. The others wait on disk ("parked"): new mail that finds the
//! active queue full, mail recovered at start-up, and deferred mail until
//! its retry time (recovered mail: the one its last attempt record
//! names). A parked message costs its queue ID, where its record
//! is, and which recipients are done; its envelope is read back from the
//! spool (on the blocking pool, in batches) when room frees up.
//!
//! The state (parked messages, the line for room, the count of loads)
//! is `core::Admission`'s; this file decides: recovery, due retries,
//! admission (`Action::ReadBack`; the driver reads the envelopes on the
//! blocking pool and hands them back as `Input::Loaded`).

use sluice_spool::Envelope;

use super::compact::Spot;
use super::core::{secs32, Parked};
use super::dispatch::QueueCore;
use super::step::{Action, ReadBack};
use super::QueuedMessage;
use crate::log::{Event, Qid};
use crate::message::flags::{MARK_DELAY_WARNED, MARK_RELEASED, QUARANTINE};

impl QueueCore {
    /// Parks a message; it waits for room (`ready`) unless `retry_at` is
    /// given, in which case it waits for that time first.
    pub(super) fn park(&mut self, id: u64, parked: Parked, retry_at: Option<std::time::Instant>) {
        // On hold: kept, neither retried nor brought in.
        let held = self.admin.is_held(id);
        self.admission.park(id, parked, held, retry_at);
    }

    /// Messages found in the spool at start-up: all wait on disk first,
    /// deferred mail until the retry time recorded with its last attempt
    /// (as Postfix waits), with its attempt count and reason.
    pub(super) fn recovered(&mut self, batch: Vec<sluice_spool::Recovered>) {
        let now = self.clock.unix_ms / 1000;
        for r in batch {
            if r.flags & QUARANTINE != 0 && r.marks & MARK_RELEASED == 0 {
                self.admin.hold(r.id);
            }
            let attempt = r.attempt.unwrap_or_default();
            // The spool keeps the text, not the destination that gave it.
            // This is the spool boundary for replies: the attempt record's
            // text (as `Reply`'s Display wrote it, or as older versions
            // did) becomes a typed reply once, here.
            let reason = (!attempt.reason.is_empty()).then(|| {
                let reply = crate::message::status::Reply::parse(&attempt.reason, 451);
                self.admission.reason(&None, &reply)
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
    fn recovered_retry(&self, next: u64, now: u64) -> Option<std::time::Instant> {
        if next <= now {
            return None;
        }
        let q = &self.config.queue;
        let longest = q.maximal_backoff_secs.max(q.minimal_backoff_secs).max(1);
        let wait = std::time::Duration::from_secs((next - now).min(longest));
        Some(self.clock.at + wait)
    }

    /// Deferred messages whose retry time has come wait for room.
    pub(super) fn run_due_retries(&mut self) {
        if self.draining() {
            return;
        }
        let admin = &self.admin;
        self.admission
            .run_due_retries(self.clock.at, |id| admin.is_held(id));
    }

    /// Starts reading envelopes for waiting messages while there is room.
    pub(super) fn admit(&mut self) {
        if self.draining() {
            return;
        }
        loop {
            let batch = self.admission.next_batch(self.messages.len());
            if batch.is_empty() {
                return;
            }
            self.out.push(Action::ReadBack(batch));
        }
    }

    /// Envelopes read back: the messages become active and are dispatched.
    pub(super) fn loaded(&mut self, loaded: Vec<(u64, Result<Envelope, ReadBack>)>) {
        for (id, result) in loaded {
            let Some(parked) = self.admission.loaded(id) else {
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
                    self.logger.emit(&Event::QueueFileUnreadable {
                        queue_id: Qid(id),
                        error: why.to_string().into(),
                    });
                    let attempts = parked.attempts.saturating_add(1);
                    let at = self.clock.at + self.retry_wait(attempts.into(), id);
                    let parked = Parked { attempts, ..parked };
                    self.park(id, parked, Some(at));
                }
            }
        }
        self.admit();
    }
}
