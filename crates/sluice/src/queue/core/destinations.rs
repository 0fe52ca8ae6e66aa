//! All destinations by key, the pacing wake-ups of rate-limited ones, the
//! list of those delivered locally (their queues are local delivery's
//! backlog, `intake/flow.rs`), and the pruning of idle ones.
//!
//! A destination is made on its first job and, before issue 36, was
//! dropped only at a reload. Now one with nothing queued, running,
//! closing or looked up, not marked dead and with no rate-limit slot to
//! come, that has been unused for [`PRUNE_IDLE`], is forgotten (looked at
//! every [`PRUNE_EVERY`]); it is made again on its next job, with a fresh
//! (slow-start) window, as Postfix's qmgr drops an empty queue. A dead
//! destination is kept while dead, so its mark still defers its mail; an
//! MX group's is kept until a reload forgets the groups (its members find
//! it by key, `Destination::prunable`).
//!
//! Invariants: a destination with `wake_pending` has an entry in
//! `pacing` (a stale one, of a destination dropped and made again, only
//! pumps it once more); every local destination's key is in `local`, and `local`
//! holds no key twice.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;

use super::destination::Destination;
use crate::config::hop::NextHop;

/// The map's hasher: random in the daemon (keys come from mail), fixed in
/// tests so that the simulation's runs repeat exactly (reloads and
/// flushes walk the map).
#[cfg(not(test))]
type Keyed = std::hash::RandomState;
#[cfg(test)]
type Keyed = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// How long an empty destination is kept.
pub const PRUNE_IDLE: Duration = Duration::from_secs(300);
/// How often empty destinations are looked for.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct Destinations {
    map: HashMap<Arc<str>, Destination, Keyed>,
    /// Rate-limited destinations to pump again, soonest first.
    pacing: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    /// The destinations delivered locally (Maildir, LMTP).
    local: Vec<Arc<str>>,
    /// When to look for idle destinations next.
    next_prune: Option<Instant>,
}

impl Destinations {
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Destination> {
        self.map.get_mut(key)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Adds a destination made for `key`.
    pub fn insert(&mut self, key: Arc<str>, dest: Destination) {
        if matches!(
            *dest.hop,
            NextHop::Maildir | NextHop::System | NextHop::Lmtp(_)
        ) && !self.local.contains(&key)
        {
            self.local.push(key.clone());
        }
        self.map.insert(key, dest);
    }

    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.map.keys()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Destination)> {
        self.map.iter()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Destination> {
        self.map.values_mut()
    }

    /// Keeps only the destinations `keep` says to (a reload).
    pub fn retain(&mut self, mut keep: impl FnMut(&Destination) -> bool) {
        self.map.retain(|_, d| keep(d));
        self.forget_gone();
    }

    fn forget_gone(&mut self) {
        let map = &self.map;
        self.local.retain(|k| map.contains_key(k));
    }

    /// Pumps `key` again at `at`, unless a wake-up is already due for it.
    pub fn wake_at(&mut self, key: &Arc<str>, at: Instant) {
        let Some(dest) = self.map.get_mut(key) else {
            return;
        };
        if !dest.wake_pending {
            dest.wake_pending = true;
            self.pacing.push(Reverse((at, key.clone())));
        }
    }

    /// When the soonest pacing wake-up is due.
    pub fn next_wake(&self) -> Option<Instant> {
        self.pacing.peek().map(|Reverse((at, _))| *at)
    }

    /// A destination whose pacing wake-up has come, to be pumped.
    pub fn pop_due_wake(&mut self, now: Instant) -> Option<Arc<str>> {
        match self.pacing.peek() {
            Some(Reverse((at, _))) if *at <= now => {}
            _ => return None,
        }
        let Reverse((_, key)) = self.pacing.pop()?;
        if let Some(dest) = self.map.get_mut(&key) {
            dest.wake_pending = false;
        }
        Some(key)
    }

    /// Jobs waiting for local delivery.
    pub fn local_backlog(&self) -> usize {
        self.local
            .iter()
            .filter_map(|k| self.map.get(k))
            .map(|d| d.queue.len())
            .sum()
    }

    /// Forgets destinations idle for [`PRUNE_IDLE`] (at most every
    /// [`PRUNE_EVERY`]); returns how many.
    pub fn prune_idle(&mut self, now: Instant) -> usize {
        match self.next_prune {
            Some(at) if now < at => return 0,
            _ => self.next_prune = Some(now + PRUNE_EVERY),
        }
        let before = self.map.len();
        self.map.retain(|_, d| !d.prunable(now, PRUNE_IDLE));
        let pruned = before - self.map.len();
        if pruned > 0 {
            self.forget_gone();
        }
        pruned
    }

    /// The invariants of the head comment, for the simulation.
    #[cfg(test)]
    pub fn check(&self) -> Result<(), String> {
        for (key, d) in &self.map {
            let entries = self
                .pacing
                .iter()
                .filter(|Reverse((_, k))| k == key)
                .count();
            if d.wake_pending && entries == 0 {
                return Err(format!("{key}: wake pending with {entries} entries"));
            }
            if !d.idle.iter().all(|w| d.workers.contains(w)) {
                return Err(format!("{key}: an idle worker that is not live"));
            }
            if d.window == 0 || d.window > d.limit {
                return Err(format!("{key}: window {} of {}", d.window, d.limit));
            }
            let local = matches!(
                *d.hop,
                NextHop::Maildir | NextHop::System | NextHop::Lmtp(_)
            );
            if local && !self.local.contains(key) {
                return Err(format!("{key}: local but not listed"));
            }
        }
        let mut keys = self.local.clone();
        keys.sort();
        keys.dedup();
        if keys.len() != self.local.len() {
            return Err("a local destination listed twice".into());
        }
        Ok(())
    }
}
