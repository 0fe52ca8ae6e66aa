//! The queue's side of administration (`sluice queue …`, like Postfix's
//! postqueue/postsuper): a snapshot of the queue, and flush, delete,
//! hold, release and bounce by queue ID. The admin socket (`admin/`)
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

use sluice_spool::{BodyRef, Envelope};
use tokio::sync::oneshot;

use super::scheduler::{RcptState, Scheduler};
use crate::log::qid;
use crate::message::status::Failure;
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
    Delete(Vec<u64>),
    Hold(Vec<u64>),
    Release(Vec<u64>),
    Bounce(Vec<u64>),
}

pub enum AdminReply {
    Snapshot(Vec<Snap>),
    Stats(QueueStats),
    /// How many messages the request applied to.
    Count(usize),
}

/// The queue at a glance.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QueueStats {
    pub active: usize,
    pub deferred: usize,
    pub hold: usize,
    /// The 20 destinations with the most mail queued or in flight.
    pub destinations: Vec<DestinationStats>,
    /// The 10 commonest reasons mail is waiting, with their counts.
    pub reasons: Vec<(String, usize)>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DestinationStats {
    pub name: String,
    pub queued: usize,
    pub in_flight: usize,
    pub window: usize,
}

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// In memory, being delivered or about to be.
    Active,
    /// On disk, waiting for a retry (or for room).
    Deferred,
    /// On hold: kept, not delivered.
    Hold,
}

/// One message as the queue knows it.
pub struct Snap {
    pub id: u64,
    pub place: Place,
    pub body_ref: BodyRef,
    /// The envelope, when in memory (otherwise read it from the spool).
    pub envelope: Option<Arc<Envelope>>,
    /// Per recipient: final already.
    pub done: Vec<bool>,
    /// Per recipient, for active mail: the last deferral reason.
    pub reasons: Vec<Option<String>>,
    /// For waiting mail: the reason it was last deferred.
    pub last_reason: Option<String>,
    pub attempts: u32,
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
        let changes_holds = matches!(
            request,
            AdminRequest::Delete(_)
                | AdminRequest::Hold(_)
                | AdminRequest::Release(_)
                | AdminRequest::Bounce(_)
        );
        let answer = match request {
            AdminRequest::Snapshot => AdminReply::Snapshot(self.snapshot()),
            AdminRequest::Stats => AdminReply::Stats(self.stats()),
            AdminRequest::Flush(ids) => AdminReply::Count(self.flush(ids)),
            AdminRequest::Delete(ids) => AdminReply::Count(self.each(ids, Self::delete)),
            AdminRequest::Hold(ids) => AdminReply::Count(self.each(ids, Self::hold)),
            AdminRequest::Release(ids) => AdminReply::Count(self.each(ids, Self::release)),
            AdminRequest::Bounce(ids) => AdminReply::Count(self.each(ids, Self::bounce_now)),
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

    fn each(&mut self, ids: Vec<u64>, f: fn(&mut Self, u64) -> bool) -> usize {
        ids.into_iter().filter(|&id| f(self, id)).count()
    }

    fn stats(&self) -> QueueStats {
        let mut destinations: Vec<DestinationStats> = self
            .dests
            .iter()
            .map(|(name, d)| DestinationStats {
                name: name.to_string(),
                queued: d.queue.len(),
                in_flight: d.workers.len(),
                window: d.window,
            })
            .filter(|d| d.queued + d.in_flight > 0)
            .collect();
        destinations.sort_by_key(|d| std::cmp::Reverse(d.queued + d.in_flight));
        destinations.truncate(20);
        // Counted by the first 80 characters, borrowed: only the ten
        // commonest are copied out.
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for p in self.parked.values().take(100_000) {
            if let Some(r) = &p.reason {
                let end = r.char_indices().nth(80).map_or(r.len(), |(i, _)| i);
                *counts.entry(&r[..end]).or_default() += 1;
            }
        }
        let mut counts: Vec<(&str, usize)> = counts.into_iter().collect();
        counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        counts.truncate(10);
        let reasons = counts
            .into_iter()
            .map(|(r, n)| (r.to_string(), n))
            .collect();
        let hold = self.admin.held.len();
        QueueStats {
            active: self.messages.len(),
            deferred: self.parked.len().saturating_sub(hold),
            hold,
            destinations,
            reasons,
        }
    }

    fn snapshot(&self) -> Vec<Snap> {
        let mut out = Vec::with_capacity(self.messages.len() + self.parked.len());
        for (&id, m) in &self.messages {
            let reasons = m
                .rcpts
                .iter()
                .map(|s| match s {
                    RcptState::Deferred { reason, .. } => Some(reason.clone()),
                    _ => None,
                })
                .collect();
            out.push(Snap {
                id,
                place: Place::Active,
                body_ref: m.body_ref,
                envelope: Some(m.envelope.clone()),
                done: m
                    .rcpts
                    .iter()
                    .map(|s| matches!(s, RcptState::Delivered | RcptState::Bounced))
                    .collect(),
                reasons,
                last_reason: None,
                attempts: m.attempts,
            });
        }
        for (id, p) in self.parked.iter() {
            out.push(Snap {
                id,
                place: if self.admin.held.contains(&id) {
                    Place::Hold
                } else {
                    Place::Deferred
                },
                body_ref: p.spot.body_ref(id),
                envelope: None,
                done: p.done.to_vec(),
                reasons: Vec::new(),
                last_reason: p.reason.as_deref().cloned(),
                attempts: p.attempts.into(),
            });
        }
        out.sort_by_key(|s| s.id);
        out
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

    fn delete(&mut self, id: u64) -> bool {
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
            return true;
        }
        match self.messages.get(&id) {
            Some(m) if m.in_flight == 0 && !m.bounce_pending => {
                self.delete_active(id);
                true
            }
            Some(_) => {
                self.admin.doomed.insert(id, Doom::Delete);
                true
            }
            None => false,
        }
    }

    fn hold(&mut self, id: u64) -> bool {
        if !self.parked.contains_key(id) && !self.messages.contains_key(&id) {
            return false;
        }
        self.admin.held.insert(id);
        // For the shadow copy: a peer that claims it holds it too.
        self.spool
            .record_marks(id, crate::message::flags::MARK_HELD);
        self.ready.retain(|r| *r != id);
        log!(self.logger, "qmgr", "{}: placed on hold", qid(id));
        true
    }

    fn release(&mut self, id: u64) -> bool {
        if !self.admin.held.remove(&id) {
            return false;
        }
        // A quarantined message is not held again after a restart.
        self.spool
            .record_marks(id, crate::message::flags::MARK_RELEASED);
        if self.parked.contains_key(id) {
            self.ready.push_back(id);
        }
        log!(self.logger, "qmgr", "{}: released from hold", qid(id));
        true
    }

    /// Returns the message's open recipients to the sender now.
    fn bounce_now(&mut self, id: u64) -> bool {
        if !self.parked.contains_key(id) && !self.messages.contains_key(&id) {
            return false;
        }
        self.admin.held.remove(&id);
        self.admin.doomed.insert(id, Doom::Bounce);
        if self.parked.contains_key(id) && !self.ready.contains(&id) {
            self.ready.push_back(id);
        }
        if let Some(m) = self.messages.get(&id) {
            if m.in_flight == 0 && !m.bounce_pending {
                self.finish_round(id);
            }
        }
        true
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
                let why = "5.0.0 returned to the sender by the administrator";
                msg.failed
                    .push((i as u16, Failure::from_bounce("none", why)));
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
