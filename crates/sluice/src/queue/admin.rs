//! The queue's side of administration (`sluice queue …`, like Postfix's
//! postqueue/postsuper): a snapshot of the queue, and flush, delete,
//! hold, release, bounce and requeue by queue ID or of every message;
//! each says how many messages it changed, left as they were (holding
//! held mail) or did not find. The admin socket (`admin/`)
//! turns requests into these and reads envelopes of waiting mail from the
//! spool itself, so the scheduler never blocks on disk for them.
//!
//! Invariants: a held message is parked and in neither `ready` nor a
//! retry (it is not delivered) until released; held IDs are kept in
//! `<data_dir>/hold.list` so a hold survives a restart or a power cut: the
//! list is replaced durably (`sluice_spool::replace_file`: temporary file
//! synced, renamed, directory synced) by the driver on the blocking pool
//! (`Action::SaveHolds`, `Action::Answer`), and the administrator is
//! answered once it is on disk;
//! a deletion or bounce of a message with deliveries in flight takes
//! effect when its round ends (`doomed`).

use std::collections::HashSet;

use super::core::{Doom, RcptState};
use super::dispatch::QueueCore;
pub use super::requests::{AdminReply, AdminRequest, Op, Tally};
use super::step::{Action, Ticket};
pub use super::view::{DestinationStats, Place, QueueStats, ReasonStats, Snap};
use crate::log::{Event, Qid};
use crate::message::status::{Enhanced, Failure, Relay, Reply};

/// What an [`Op`] did to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    Changed,
    Unchanged,
    Missing,
}

impl Applied {
    fn changed_if(found: bool, changed: bool) -> Applied {
        match (found, changed) {
            (false, _) => Applied::Missing,
            (true, true) => Applied::Changed,
            (true, false) => Applied::Unchanged,
        }
    }
}

impl QueueCore {
    pub(super) fn admin(&mut self, ticket: Ticket, request: AdminRequest) {
        // Only these change the hold list (a mailq or a /metrics scrape
        // writes nothing).
        let changes_holds = matches!(request, AdminRequest::Apply(..));
        let reply = match request {
            AdminRequest::Snapshot => AdminReply::Snapshot(self.view().snapshot()),
            AdminRequest::Stats => AdminReply::Stats(self.view().stats()),
            AdminRequest::Flush(ids) => AdminReply::Count(self.flush(ids)),
            AdminRequest::Apply(op, ids) => AdminReply::Applied(self.apply_op(op, ids)),
        };
        // Answered once the list is on disk (two syncs: by the driver, on
        // the blocking pool).
        let after = match changes_holds {
            true => self.admin.save_holds(),
            false => None,
        };
        self.out.push(Action::Answer {
            ticket,
            reply,
            after,
        });
        self.admit();
    }

    /// A message that is gone (delivered, bounced) leaves the hold list,
    /// in memory and on disk (by the driver; of two saves the later one
    /// stands).
    pub(super) fn forget_hold(&mut self, id: u64) {
        if !self.admin.release(id) {
            return;
        }
        if let Some(save) = self.admin.save_holds() {
            self.out.push(Action::SaveHolds(save));
        }
    }

    /// The queue's state as the read-only views see it.
    fn view(&self) -> super::view::Queue<'_> {
        super::view::Queue {
            messages: &self.messages,
            admission: &self.admission,
            dests: &self.dests,
            admin: &self.admin,
        }
    }

    /// `op` on each of `ids`, or on every message (`None`).
    fn apply_op(&mut self, op: Op, ids: Option<Vec<u64>>) -> Tally {
        let ids = ids.unwrap_or_else(|| {
            let mut all: Vec<u64> = self.admission.ids().collect();
            all.extend(self.messages.ids());
            all.sort_unstable();
            all
        });
        let f = match op {
            Op::Delete => Self::delete,
            Op::Hold => Self::hold,
            Op::Release => Self::release,
            Op::Bounce => Self::bounce_now,
            Op::Requeue => Self::requeue,
        };
        let mut tally = Tally::default();
        for id in ids {
            match f(self, id) {
                Applied::Changed => tally.changed += 1,
                Applied::Unchanged => tally.unchanged += 1,
                Applied::Missing => tally.missing += 1,
            }
        }
        tally
    }

    fn in_queue(&self, id: u64) -> bool {
        self.admission.contains(id) || self.messages.contains(id)
    }

    /// Waiting mail (not held) goes back to the front of the line now; the
    /// destinations' dead marks and the agents' dead-host caches are
    /// forgotten (all of them, for a flush of one message too).
    fn flush(&mut self, ids: Option<Vec<u64>>) -> usize {
        let queued: HashSet<u64> = self.admission.line().collect();
        let candidates: Vec<u64> = match ids {
            Some(ids) => ids,
            None => self.admission.ids().collect(),
        };
        let mut n = 0;
        for id in candidates {
            if self.admission.contains(id) && !self.admin.is_held(id) && !queued.contains(&id) {
                self.admission.line_up(id);
                n += 1;
            }
        }
        for dest in self.dests.values_mut() {
            dest.dead_until = None;
        }
        self.out.push(Action::Flushed);
        self.logger.emit(&Event::Flush { messages: n as u64 });
        n
    }

    fn delete(&mut self, id: u64) -> Applied {
        self.admin.release(id);
        if self.admission.remove(id).is_some() {
            // (Its place in `ready` is skipped by admit: no longer parked.)
            self.record(id, Vec::new(), true);
            let by = "administrator".into();
            self.logger.emit(&Event::Removed {
                queue_id: Qid(id),
                by,
            });
            return Applied::Changed;
        }
        let bouncing = self.notices.pending(id);
        match self.messages.get(id) {
            Some(m) if m.in_flight() == 0 && !bouncing => {
                self.delete_active(id);
                Applied::Changed
            }
            Some(_) => {
                let again = self.admin.doom(id, Doom::Delete) == Some(Doom::Delete);
                Applied::changed_if(true, !again)
            }
            None => Applied::Missing,
        }
    }

    fn hold(&mut self, id: u64) -> Applied {
        if !self.in_queue(id) || self.admin.is_held(id) {
            return Applied::changed_if(self.in_queue(id), false);
        }
        self.admin.hold(id);
        // For the shadow copy: a peer that claims it holds it too.
        let marks = crate::message::flags::MARK_HELD;
        self.out.push(Action::Marks { id, marks });
        self.admission.leave_line(id);
        self.logger.emit(&Event::Held { queue_id: Qid(id) });
        Applied::Changed
    }

    fn release(&mut self, id: u64) -> Applied {
        if !self.admin.release(id) {
            return Applied::changed_if(self.in_queue(id), false);
        }
        // A quarantined message is not held again after a restart.
        let marks = crate::message::flags::MARK_RELEASED;
        self.out.push(Action::Marks { id, marks });
        if self.admission.contains(id) {
            self.admission.line_up(id);
        }
        self.logger.emit(&Event::Released { queue_id: Qid(id) });
        Applied::Changed
    }

    /// Deliver again from scratch now (postsuper -r): out of hold, its
    /// attempt count and backoff forgotten (recorded, so a restart does
    /// not bring them back), to the back of the line of mail waiting for
    /// room. Mail being delivered finishes its round first; its count
    /// starts again from there. The queue ID stays the same.
    fn requeue(&mut self, id: u64) -> Applied {
        if !self.in_queue(id) {
            return Applied::Missing;
        }
        if self.admin.is_held(id) {
            self.release(id);
        }
        if let Some(m) = self.messages.get_mut(id) {
            m.attempts = 0;
        }
        if let Some(p) = self.admission.get_mut(id) {
            p.attempts = 0;
            p.next_at = 0;
            p.reason = None;
            let attempt = sluice_spool::Attempt {
                at: p.last_at.into(),
                ..Default::default()
            };
            self.out.push(Action::Attempt { id, attempt });
            if !self.admission.in_line(id) {
                self.admission.line_up(id);
            }
        }
        self.logger.emit(&Event::Requeued { queue_id: Qid(id) });
        Applied::Changed
    }

    /// Returns the message's open recipients to the sender now.
    fn bounce_now(&mut self, id: u64) -> Applied {
        if !self.in_queue(id) {
            return Applied::Missing;
        }
        self.admin.release(id);
        if self.admin.doom(id, Doom::Bounce) == Some(Doom::Bounce) {
            return Applied::Unchanged;
        }
        if self.admission.contains(id) && !self.admission.in_line(id) {
            self.admission.line_up(id);
        }
        let bouncing = self.notices.pending(id);
        if let Some(m) = self.messages.get(id) {
            if m.in_flight() == 0 && !bouncing {
                self.finish_round(id);
            }
        }
        Applied::Changed
    }

    /// Forgets an active message with nothing in flight: recorded
    /// complete in the spool, so it is never delivered again.
    fn delete_active(&mut self, id: u64) {
        self.record(id, Vec::new(), true);
        self.remove(id);
        self.logger.emit(&Event::Deleted { queue_id: Qid(id) });
    }

    /// At the end of a round: a pending deletion (true: the message is
    /// gone) or bounce (its open recipients become failures).
    pub(super) fn admin_round_end(&mut self, id: u64) -> bool {
        let Some(doom) = self.admin.take_doom(id) else {
            return false;
        };
        if doom == Doom::Delete {
            self.delete_active(id);
            return true;
        }
        let Some(msg) = self.messages.get_mut(id) else {
            return false;
        };
        for (i, state) in msg.rcpts.iter_mut().enumerate() {
            if matches!(state, RcptState::Pending | RcptState::Deferred { .. }) {
                *state = RcptState::Bounced;
                let text = "returned to the sender by the administrator";
                let why = Reply::own(550, Some(Enhanced::BOUNCED), text);
                msg.failed
                    .push((i as u16, Failure::from_bounce(&Relay::None, &why)));
            }
        }
        self.logger.emit(&Event::Returned { queue_id: Qid(id) });
        false
    }
}
