//! What the simulation knows besides the core: its random numbers, a
//! model of what the spool was told and what of it is durable
//! ([`Records`]), the cluster's caps as the seed sets them ([`FakeCaps`]),
//! and the invariants the core holds after every step
//! (`QueueCore::check`).
//!
//! Crash model: the spool's writer takes what is queued for it in order
//! (one channel, first in first out) and a write that reached the file
//! survives a SIGKILL (it is in the page cache; `sync: false` only skips
//! the disk flush, which matters for a power cut, not a crash). So what a
//! crash keeps is a prefix of the records queued: the simulation holds
//! the records the core asked for in its own queue ([`Records::queued`])
//! as the writer's channel, hands them to the spool when the writer
//! "takes a batch" (or before a store, which waits for everything ahead
//! of it), and at a crash hands over a prefix the seed chooses and drops
//! the rest.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_spool::{Attempt, Spool};

use crate::queue::dispatch::QueueCore;
use crate::queue::job::Job;
use crate::queue::leases::Caps;

/// A small, fast, seedable generator (xorshift64*).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A spool write the core asked for, not yet taken by the writer.
pub(super) enum Write {
    Outcome {
        id: u64,
        rcpts: Vec<u16>,
        complete: bool,
    },
    Attempt {
        id: u64,
        attempt: Attempt,
    },
    Marks {
        id: u64,
        marks: u32,
    },
}

/// What the spool was told, per message, and what of it is durable.
#[derive(Default)]
pub(super) struct Records {
    /// Messages stored (durably: a store resolves once written), with
    /// their number of recipients.
    pub stored: BTreeMap<u64, usize>,
    /// Those the queue should hold: not complete (in this epoch or
    /// durably).
    pub live: BTreeSet<u64>,
    /// Recipients whose final record reached the spool, and messages
    /// whose "complete" did.
    pub durable: BTreeMap<u64, BTreeSet<u16>>,
    pub durable_complete: BTreeSet<u64>,
    /// Recorded final (or complete) since the last crash, durable or not.
    pub epoch: BTreeMap<u64, BTreeSet<u16>>,
    pub epoch_complete: BTreeSet<u64>,
    /// The writer's channel.
    pub queued: VecDeque<Write>,
    pub errors: Vec<String>,
    /// Grown leases not yet told to the core (`Input::Leased` to come),
    /// by destination key.
    pub leasing: BTreeMap<String, usize>,
    /// Recipients recorded final and messages complete, in all epochs.
    pub finals: usize,
    pub completes: usize,
}

impl Records {
    /// The core recorded these recipients final (and maybe the message
    /// complete): never twice in one epoch, never after a durable record.
    pub fn record(&mut self, id: u64, rcpts: Vec<u16>, complete: bool) {
        for &i in &rcpts {
            if self.durable.get(&id).is_some_and(|d| d.contains(&i)) {
                let e =
                    format!("{id:x}: recipient {i} recorded final again after a durable record");
                self.errors.push(e);
            }
            if !self.epoch.entry(id).or_default().insert(i) {
                let e = format!("{id:x}: recipient {i} recorded final twice in one epoch");
                self.errors.push(e);
            }
            self.finals += 1;
        }
        if complete {
            self.completes += 1;
            self.live.remove(&id);
            if !self.epoch_complete.insert(id) || self.durable_complete.contains(&id) {
                self.errors.push(format!("{id:x}: recorded complete twice"));
            }
        }
        let write = Write::Outcome {
            id,
            rcpts,
            complete,
        };
        self.queued.push_back(write);
    }

    /// A worker is handed `job`: none of its recipients may be final.
    pub fn take_job(&mut self, job: &Job) {
        for i in &job.rcpts {
            let durable = self.durable.get(&job.msg).is_some_and(|d| d.contains(i));
            let now = self.epoch.get(&job.msg).is_some_and(|d| d.contains(i));
            if durable || now {
                let e = format!("{:x}: recipient {i} handed out after final", job.msg);
                self.errors.push(e);
            }
        }
    }

    /// The writer takes the first `n` queued records (all, if fewer).
    pub fn flush(&mut self, spool: &Spool, n: usize) {
        for _ in 0..n {
            let Some(write) = self.queued.pop_front() else {
                return;
            };
            match write {
                Write::Outcome {
                    id,
                    rcpts,
                    complete,
                } => {
                    self.durable.entry(id).or_default().extend(&rcpts);
                    if complete {
                        self.durable_complete.insert(id);
                    }
                    spool.record_outcome(id, rcpts, complete);
                }
                Write::Attempt { id, attempt } => spool.record_attempt(id, attempt),
                Write::Marks { id, marks } => spool.record_marks(id, marks),
            }
        }
    }

    /// A crash: the writer had taken `kept` more records; the rest and
    /// everything of the epoch not durable are gone.
    pub fn crash(&mut self, spool: &Spool, kept: usize) {
        self.flush(spool, kept);
        self.queued.clear();
        self.leasing.clear();
        self.epoch.clear();
        self.epoch_complete.clear();
        let stored = self.stored.keys();
        self.live = stored
            .filter(|&&id| self.durably_live(id))
            .copied()
            .collect();
    }

    /// A message was stored (durably) with `n` recipients.
    pub fn stored(&mut self, id: u64, n: usize) {
        self.stored.insert(id, n);
        self.live.insert(id);
    }

    /// Whether the spool still holds `id` as live mail (durably).
    pub fn durably_live(&self, id: u64) -> bool {
        let all = self.stored.get(&id).copied().unwrap_or(0);
        let done = self.durable.get(&id).map_or(0, BTreeSet::len);
        !self.durable_complete.contains(&id) && done < all
    }

    /// What recovery found is exactly what was durable: every live
    /// message (nothing lost), none complete, each with its durable
    /// finals done.
    pub fn check_recovered(&mut self, found: &[sluice_spool::Recovered]) {
        let ids: BTreeSet<u64> = found.iter().map(|r| r.id).collect();
        for &id in self.stored.keys() {
            if self.durably_live(id) != ids.contains(&id) {
                let e = format!(
                    "{id:x}: live {} but recovered {}",
                    !ids.contains(&id),
                    ids.contains(&id)
                );
                self.errors.push(e);
            }
        }
        for r in found {
            let done: BTreeSet<u16> = (0..r.done.len() as u16)
                .filter(|&i| r.done.get(i as usize))
                .collect();
            let durable = self.durable.get(&r.id).cloned().unwrap_or_default();
            if done != durable {
                let e = format!("{:x}: recovered done {done:?}, durable {durable:?}", r.id);
                self.errors.push(e);
            }
        }
    }
}

/// The cluster's caps as the seed sets them: per destination key, the
/// cluster-wide cap and this node's allowance (no entry: no cap).
#[derive(Default)]
pub(super) struct FakeCaps {
    pub grants: Mutex<BTreeMap<String, (usize, usize)>>,
}

impl FakeCaps {
    /// What the destination `key` may hold now (`None`: no cap).
    pub fn allowed(&self, key: &str) -> Option<usize> {
        let grants = self.grants.lock().unwrap();
        grants.get(key).map(|&(cap, allowance)| allowance.min(cap))
    }
}

impl Caps for FakeCaps {
    fn cap_for(&self, key: &str) -> usize {
        let grants = self.grants.lock().unwrap();
        grants.get(key).map_or(0, |&(cap, _)| cap)
    }

    fn allowance(&self, key: &Arc<str>, _cap: usize, _want: usize, _held: usize) -> usize {
        self.allowed(key).unwrap_or(usize::MAX)
    }

    fn rate_for(&self, _key: &str) -> u32 {
        0
    }

    fn take_slot(&self, _key: &Arc<str>, _per_minute: u32) -> Result<(), Option<Instant>> {
        Ok(())
    }
}

impl QueueCore {
    /// The invariants the queue's core holds after every step.
    pub(super) fn check(&self, records: &Records) -> Result<(), String> {
        self.messages.check()?;
        self.dests.check()?;
        for (id, _) in self.messages.iter() {
            if self.admission.contains(id) {
                return Err(format!("{id:x} both active and parked"));
            }
            if !records.live.contains(&id) {
                return Err(format!("{id:x} recorded complete, still active"));
            }
        }
        for (id, _) in self.admission.iter() {
            if !records.live.contains(&id) {
                return Err(format!("{id:x} recorded complete, still parked"));
            }
        }
        // Nothing lost: every stored message not complete is in the queue.
        for &id in &records.live {
            if !self.messages.contains(id) && !self.admission.contains(id) {
                return Err(format!("{id:x} stored, not complete, not in the queue"));
            }
        }
        for id in self.notices.ids() {
            match self.messages.get(id) {
                Some(m) if m.in_flight() == 0 => {}
                Some(_) => return Err(format!("{id:x} bouncing with jobs out")),
                None => return Err(format!("{id:x} bouncing, not active")),
            }
        }
        let now = self.clock.at;
        for (key, d) in self.dests.iter() {
            // No destination starves: queued jobs have a worker coming,
            // or a reason to wait (dead, looked up, paced, capped).
            let waits = d.resolving || d.wake_pending || d.dead_until.is_some_and(|u| u > now);
            let leasing = records.leasing.contains_key(&**key);
            let capped = leasing || self.caps_allow(key).is_some_and(|a| d.held() >= a);
            if !d.queue.is_empty() && d.workers.is_empty() && !waits && !capped {
                return Err(format!("{key}: {} jobs queued, no worker", d.queue.len()));
            }
            // (While its domain's mail hosts are looked up again, a
            // destination's jobs wait for the answer, idle worker or not.)
            if !d.queue.is_empty() && !d.idle.is_empty() && !d.resolving {
                return Err(format!("{key}: jobs queued beside an idle worker"));
            }
        }
        let held = self.admission.loading() + self.messages.len();
        if held > self.admission.limit() {
            return Err(format!(
                "{held} active or loading over the limit {}",
                self.admission.limit()
            ));
        }
        Ok(())
    }

    /// The allowance of destination `key` under the caps (`None`: none).
    pub(super) fn caps_allow(&self, key: &Arc<str>) -> Option<usize> {
        let caps = self.caps.as_deref()?;
        match caps.cap_for(key) {
            0 => None,
            cap => Some(caps.allowance(key, cap, 0, 0)),
        }
    }

    /// A destination the caps hold below what it has keeps no idle
    /// connection (checked after the core looked at it).
    pub(super) fn check_shed(&self, key: &Arc<str>) -> Result<(), String> {
        let d = self.dests.iter().find(|(k, _)| *k == key).map(|(_, d)| d);
        let (Some(d), Some(allowed)) = (d, self.caps_allow(key)) else {
            return Ok(());
        };
        if d.held() > allowed && !d.idle.is_empty() {
            let idle = d.idle.len();
            return Err(format!(
                "{key}: holds {} over {allowed}, {idle} idle (resolving {})",
                d.held(),
                d.resolving
            ));
        }
        Ok(())
    }
}
