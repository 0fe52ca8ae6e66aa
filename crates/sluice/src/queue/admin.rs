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

use sluice_spool::{BodyRef, Envelope};
use tokio::sync::oneshot;

use super::compact::Deferral;
use super::scheduler::{RcptState, Scheduler};
use crate::log::qid;
use crate::message::status::{find_status, Failure};
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

/// The queue at a glance.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QueueStats {
    pub active: usize,
    pub deferred: usize,
    pub hold: usize,
    /// The 20 destinations with the most mail queued, in flight or
    /// deferred.
    pub destinations: Vec<DestinationStats>,
    /// The 10 commonest causes mail is waiting for, commonest first.
    pub reasons: Vec<ReasonStats>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DestinationStats {
    pub name: String,
    pub queued: usize,
    pub in_flight: usize,
    pub window: usize,
    /// Waiting messages last deferred by it (a message counts once, for
    /// its first deferred recipient).
    pub deferred: usize,
}

/// One cause mail waits for: deferrals by one destination with one
/// enhanced status code, however their texts are worded ("connect to …
/// refused" and "… is not responding" are one cause).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReasonStats {
    /// None: no route (or not known since a restart).
    pub destination: Option<String>,
    /// RFC 3463 status (`4.0.0` when the text has none).
    pub dsn: String,
    /// The commonest text of the cause (its first 80 characters).
    pub text: String,
    pub messages: usize,
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
    /// For waiting mail: when it was last tried and when it will be
    /// next (Unix seconds), if known.
    pub last_attempt: Option<u64>,
    pub next_retry: Option<u64>,
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

    fn stats(&self) -> QueueStats {
        let hold = self.admin.held.len();
        // Waiting messages by their deferral (each reason is shared, so
        // counted per reason first, then grouped), at most 100,000.
        let mut by_reason: HashMap<*const Deferral, (&Deferral, usize)> = HashMap::new();
        for (id, p) in self.parked.iter().take(100_000) {
            if let Some(r) = p
                .reason
                .as_deref()
                .filter(|_| !self.admin.held.contains(&id))
            {
                by_reason.entry(std::ptr::from_ref(r)).or_insert((r, 0)).1 += 1;
            }
        }
        let mut deferred_at: HashMap<&str, usize> = HashMap::new();
        for (r, n) in by_reason.values() {
            if let Some(name) = r.dest.as_deref() {
                *deferred_at.entry(name).or_default() += n;
            }
        }
        let mut destinations: Vec<DestinationStats> = self
            .dests
            .iter()
            .map(|(name, d)| DestinationStats {
                name: name.to_string(),
                queued: d.queue.len(),
                in_flight: d.workers.len(),
                window: d.window,
                deferred: deferred_at.remove(&**name).unwrap_or(0),
            })
            .collect();
        // Those left have no entry now (only deferred mail).
        destinations.extend(deferred_at.into_iter().map(|(name, n)| DestinationStats {
            name: name.to_string(),
            queued: 0,
            in_flight: 0,
            window: 0,
            deferred: n,
        }));
        destinations.retain(|d| d.queued + d.in_flight + d.deferred > 0);
        destinations.sort_by_key(|d| std::cmp::Reverse(d.queued + d.in_flight + d.deferred));
        destinations.truncate(20);
        QueueStats {
            active: self.messages.len(),
            deferred: self.parked.len().saturating_sub(hold),
            hold,
            destinations,
            reasons: causes(by_reason.into_values()),
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
                last_attempt: None,
                next_retry: None,
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
                last_reason: p.reason.as_ref().map(|r| r.text.clone()),
                attempts: p.attempts.into(),
                last_attempt: (p.last_at != 0).then_some(p.last_at.into()),
                next_retry: (p.next_at != 0 && !self.admin.held.contains(&id))
                    .then_some(p.next_at.into()),
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

/// The ten commonest causes among `reasons` (each with its messages): by
/// destination and enhanced status code, each shown with its commonest
/// text (cut to 80 characters).
fn causes<'a>(reasons: impl Iterator<Item = (&'a Deferral, usize)>) -> Vec<ReasonStats> {
    type Cause<'a> = (Option<&'a str>, &'a str);
    let mut groups: HashMap<Cause<'a>, (usize, &'a str, usize)> = HashMap::new();
    for (r, n) in reasons {
        let key = (r.dest.as_deref(), find_status(&r.text, "4.0.0"));
        let group = groups.entry(key).or_insert((0, &r.text, 0));
        group.0 += n;
        // The commonest text (of equals, the first in sort order).
        if n > group.2 || (n == group.2 && r.text.as_str() < group.1) {
            (group.1, group.2) = (&r.text, n);
        }
    }
    let mut out: Vec<ReasonStats> = groups
        .into_iter()
        .map(|((dest, dsn), (messages, text, _))| ReasonStats {
            destination: dest.map(str::to_string),
            dsn: dsn.to_string(),
            text: text.chars().take(80).collect(),
            messages,
        })
        .collect();
    out.sort_by(|a, b| {
        (b.messages, &a.destination, &a.dsn).cmp(&(a.messages, &b.destination, &b.dsn))
    });
    out.truncate(10);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_group_by_destination_and_status_not_wording() {
        let dead: Option<Arc<str>> = Some("smtp:[192.0.2.1]:25".into());
        let d = |dest: &Option<Arc<str>>, text: &str| Deferral {
            text: text.into(),
            dest: dest.clone(),
        };
        let refused = d(&dead, "4.4.1 connect to 192.0.2.1[192.0.2.1]:25: refused");
        let dead_mark = d(&dead, "4.4.1 smtp:[192.0.2.1]:25 is not responding");
        let full = d(&dead, "4.2.2 192.0.2.1 said: 452 4.2.2 mailbox full");
        let no_route = d(&None, "4.3.0 no route");
        let got = causes([(&refused, 1), (&dead_mark, 5), (&full, 2), (&no_route, 1)].into_iter());
        let row = |dest: Option<&str>, dsn: &str, text: &str, messages| ReasonStats {
            destination: dest.map(str::to_string),
            dsn: dsn.into(),
            text: text.into(),
            messages,
        };
        assert_eq!(
            got,
            [
                row(dead.as_deref(), "4.4.1", &dead_mark.text, 6),
                row(dead.as_deref(), "4.2.2", &full.text, 2),
                row(None, "4.3.0", "4.3.0 no route", 1),
            ]
        );
    }
}
