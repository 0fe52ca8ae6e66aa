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
//! synced, renamed, directory synced) on the blocking pool, never on the
//! scheduler's task, and the administrator is answered once it is on disk;
//! a deletion or bounce of a message with deliveries in flight takes
//! effect when its round ends (`doomed`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::scheduler::{RcptState, Scheduler};
pub use super::view::{DestinationStats, Place, QueueStats, ReasonStats, Snap};
use crate::log::qid;
use crate::message::status::{Enhanced, Failure, Relay, Reply};
use crate::{event, log};

/// What an administrator asked the queue to do.
#[derive(Debug)]
pub enum AdminRequest {
    Snapshot,
    /// Counts, the busiest destinations and the commonest deferral
    /// reasons (the dashboard and /metrics).
    Stats,
    /// Retry now: these messages, or every waiting one (`None`).
    Flush(Option<Vec<u64>>),
    /// postsuper's operations: on these messages, or all (`None`).
    Apply(Op, Option<Vec<u64>>),
}

/// What postsuper does to a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Remove it, no notice (`postsuper -d`).
    Delete,
    /// Keep it, do not deliver it (`-h`).
    Hold,
    /// Deliver it again (`-H`).
    Release,
    /// Return its open recipients to the sender now.
    Bounce,
    /// Deliver it again from scratch now (`-r`): out of hold, attempts
    /// and backoff forgotten.
    Requeue,
}

pub enum AdminReply {
    Snapshot(Vec<Snap>),
    Stats(QueueStats),
    /// How many messages the request applied to.
    Count(usize),
    Applied(Tally),
}

/// What an [`Op`] did, message by message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub changed: usize,
    /// Found and already so (held mail held again, …).
    pub unchanged: usize,
    /// Not in the queue (delivered, or never queued).
    pub missing: usize,
}

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

/// Deletion or bounce waiting for a round to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doom {
    Delete,
    Bounce,
}

/// The hold list's file name in `data_dir`.
const HOLD_LIST: &str = "hold.list";

#[derive(Default)]
pub struct AdminState {
    pub held: HashSet<u64>,
    pub doomed: HashMap<u64, Doom>,
    /// Where `held` is kept (none: nowhere, for tests of the scheduler).
    pub hold_file: Option<HoldFile>,
}

/// `<data_dir>/hold.list` and which of its versions reached the disk.
pub struct HoldFile {
    dir: PathBuf,
    /// Bumped by each save.
    generation: u64,
    /// The newest generation written: of two saves racing on the blocking
    /// pool, the older never replaces the newer.
    written: Arc<Mutex<u64>>,
}

impl HoldFile {
    /// A durable write of `held` as it is now, to run off the scheduler.
    fn save(&mut self, held: &HashSet<u64>) -> impl FnOnce() -> std::io::Result<()> + Send {
        self.generation += 1;
        let generation = self.generation;
        let (dir, written) = (self.dir.clone(), self.written.clone());
        let mut ids: Vec<u64> = held.iter().copied().collect();
        ids.sort_unstable();
        let text: String = ids.iter().map(|id| format!("{}\n", qid(*id))).collect();
        move || {
            let mut newest = written.lock().unwrap_or_else(PoisonError::into_inner);
            if *newest >= generation {
                return Ok(());
            }
            sluice_spool::replace_file(&dir, HOLD_LIST, text.as_bytes(), 0o600)?;
            *newest = generation;
            Ok(())
        }
    }
}

impl AdminState {
    /// Loads held IDs from `<data_dir>/hold.list` (one hex ID a line).
    pub fn load(data_dir: &std::path::Path) -> AdminState {
        let held = std::fs::read_to_string(data_dir.join(HOLD_LIST))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| u64::from_str_radix(l.trim(), 16).ok())
            .collect();
        AdminState {
            held,
            doomed: HashMap::new(),
            hold_file: Some(HoldFile {
                dir: data_dir.to_path_buf(),
                generation: 0,
                written: Arc::new(Mutex::new(0)),
            }),
        }
    }
}

impl Scheduler {
    pub(super) fn admin(&mut self, request: AdminRequest, reply: oneshot::Sender<AdminReply>) {
        // Only these change the hold list (a mailq or a /metrics scrape
        // writes nothing).
        let changes_holds = matches!(request, AdminRequest::Apply(..));
        let answer = match request {
            AdminRequest::Snapshot => AdminReply::Snapshot(self.snapshot()),
            AdminRequest::Stats => AdminReply::Stats(self.stats()),
            AdminRequest::Flush(ids) => AdminReply::Count(self.flush(ids)),
            AdminRequest::Apply(op, ids) => AdminReply::Applied(self.apply_op(op, ids)),
        };
        let save = match (&mut self.admin.hold_file, changes_holds) {
            (Some(file), true) => Some(file.save(&self.admin.held)),
            _ => None,
        };
        match save {
            // Answered once the list is on disk (two syncs: not on the
            // scheduler's task).
            Some(save) => {
                let logger = self.logger.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = save() {
                        log!(logger, "qmgr", "warning: cannot save the hold list: {e}");
                    }
                    let _ = reply.send(answer);
                });
            }
            None => {
                let _ = reply.send(answer);
            }
        }
        self.admit();
    }

    /// `op` on each of `ids`, or on every message (`None`).
    fn apply_op(&mut self, op: Op, ids: Option<Vec<u64>>) -> Tally {
        let ids = ids.unwrap_or_else(|| {
            let mut all: Vec<u64> = self.parked.keys().collect();
            all.extend(self.messages.keys());
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
        self.parked.contains_key(id) || self.messages.contains_key(&id)
    }

    /// Waiting mail (not held) goes back to the front of the line now; the
    /// destinations' dead marks and the agents' dead-host caches are
    /// forgotten (all of them, for a flush of one message too).
    fn flush(&mut self, ids: Option<Vec<u64>>) -> usize {
        let queued: HashSet<u64> = self.ready.iter().copied().collect();
        let candidates: Vec<u64> = match ids {
            Some(ids) => ids,
            None => self.parked.keys().collect(),
        };
        let mut n = 0;
        for id in candidates {
            if self.parked.contains_key(id)
                && !self.admin.held.contains(&id)
                && !queued.contains(&id)
            {
                self.ready.push_back(id);
                n += 1;
            }
        }
        for dest in self.dests.values_mut() {
            dest.dead_until = None;
        }
        self.agent.flushed();
        log!(self.logger, "qmgr", "flush: {n} messages to be retried now");
        n
    }

    fn delete(&mut self, id: u64) -> Applied {
        self.admin.held.remove(&id);
        if self.parked.remove(id).is_some() {
            // (Its place in `ready` is skipped by admit: no longer parked.)
            self.spool.record_outcome(id, Vec::new(), true);
            event!(
                self.logger,
                "qmgr",
                "removed",
                { queue_id: qid(id), by: "administrator" },
                "{}: removed (deleted by the administrator)",
                qid(id)
            );
            return Applied::Changed;
        }
        match self.messages.get(&id) {
            Some(m) if m.in_flight == 0 && !m.bounce_pending => {
                self.delete_active(id);
                Applied::Changed
            }
            Some(_) => {
                let again = self.admin.doomed.insert(id, Doom::Delete) == Some(Doom::Delete);
                Applied::changed_if(true, !again)
            }
            None => Applied::Missing,
        }
    }

    fn hold(&mut self, id: u64) -> Applied {
        if !self.in_queue(id) || self.admin.held.contains(&id) {
            return Applied::changed_if(self.in_queue(id), false);
        }
        self.admin.held.insert(id);
        // For the shadow copy: a peer that claims it holds it too.
        self.spool
            .record_marks(id, crate::message::flags::MARK_HELD);
        self.ready.retain(|r| *r != id);
        log!(self.logger, "qmgr", "{}: placed on hold", qid(id));
        Applied::Changed
    }

    fn release(&mut self, id: u64) -> Applied {
        if !self.admin.held.remove(&id) {
            return Applied::changed_if(self.in_queue(id), false);
        }
        // A quarantined message is not held again after a restart.
        self.spool
            .record_marks(id, crate::message::flags::MARK_RELEASED);
        if self.parked.contains_key(id) {
            self.ready.push_back(id);
        }
        log!(self.logger, "qmgr", "{}: released from hold", qid(id));
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
        if self.admin.held.contains(&id) {
            self.release(id);
        }
        if let Some(m) = self.messages.get_mut(&id) {
            m.attempts = 0;
        }
        if let Some(p) = self.parked.get_mut(id) {
            p.attempts = 0;
            p.next_at = 0;
            p.reason = None;
            let attempt = sluice_spool::Attempt {
                at: p.last_at.into(),
                ..Default::default()
            };
            self.spool.record_attempt(id, attempt);
            if !self.ready.contains(&id) {
                self.ready.push_back(id);
            }
        }
        log!(self.logger, "qmgr", "{}: requeued", qid(id));
        Applied::Changed
    }

    /// Returns the message's open recipients to the sender now.
    fn bounce_now(&mut self, id: u64) -> Applied {
        if !self.in_queue(id) {
            return Applied::Missing;
        }
        self.admin.held.remove(&id);
        if self.admin.doomed.insert(id, Doom::Bounce) == Some(Doom::Bounce) {
            return Applied::Unchanged;
        }
        if self.parked.contains_key(id) && !self.ready.contains(&id) {
            self.ready.push_back(id);
        }
        if let Some(m) = self.messages.get(&id) {
            if m.in_flight == 0 && !m.bounce_pending {
                self.finish_round(id);
            }
        }
        Applied::Changed
    }

    /// Forgets an active message with nothing in flight: recorded
    /// complete in the spool, so it is never delivered again.
    fn delete_active(&mut self, id: u64) {
        self.spool.record_outcome(id, Vec::new(), true);
        self.remove(id);
        log!(
            self.logger,
            "qmgr",
            "{}: deleted by the administrator",
            qid(id)
        );
    }

    /// At the end of a round: a pending deletion (true: the message is
    /// gone) or bounce (its open recipients become failures).
    pub(super) fn admin_round_end(&mut self, id: u64) -> bool {
        let Some(doom) = self.admin.doomed.remove(&id) else {
            return false;
        };
        if doom == Doom::Delete {
            self.delete_active(id);
            return true;
        }
        let Some(msg) = self.messages.get_mut(&id) else {
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
        log!(
            self.logger,
            "qmgr",
            "{}: returned to the sender by the administrator",
            qid(id)
        );
        false
    }
}
