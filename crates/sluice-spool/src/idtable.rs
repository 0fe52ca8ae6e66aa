//! A map from queue ID to a small value, for the per-message tables that
//! a backlog of a million messages keeps in memory (the spool's index of
//! live messages, the queue's parked messages): one vector sorted by ID,
//! grown by an eighth at a time, instead of a hash map whose table doubles
//! (at a million entries a `HashMap` has two million buckets, so each
//! entry costs more than twice its size). Issue 22 asked for 1,000,000
//! queued messages in 200 MB.
//!
//! Queue IDs come from a counter, but a message's ID is taken when its
//! transaction starts and it is stored when its data ends, so overlapping
//! sessions store slightly out of order (and deferred or recovered
//! messages come back far below the end). An entry whose ID falls before
//! the end goes to a side map (a `BTreeMap`), merged into the main vector
//! once it holds an eighth as many entries as the main vector (at least
//! [`SIDE_MIN`]): a merge moves the whole table, so merging only after
//! that many inserts keeps the cost per insert constant, whatever the
//! order of IDs. A removed entry leaves a vacant slot, which a later
//! insert of the same ID reuses in place; vacant slots are dropped at the
//! next merge, or when they outnumber half the live entries.
//!
//! Trusts: nothing; any sequence of IDs works in amortised O(log n) per
//! operation.
//!
//! Invariants: `main` is sorted by ID with no ID twice, no ID is in both
//! `main` and `side`, and `live` counts the occupied slots of both.

use std::collections::BTreeMap;

/// The side map is merged once it holds this many entries, or an eighth of
/// the main vector's, whichever is more.
const SIDE_MIN: usize = 4096;

/// Vacant slots tolerated beyond half the live entries before they are
/// dropped.
const VACANT_SLACK: usize = 1024;

/// A map from queue ID to `V`, kept sorted by ID (see the module notes).
#[derive(Debug, Clone)]
pub struct IdTable<V> {
    main: Vec<(u64, Option<V>)>,
    side: BTreeMap<u64, V>,
    live: usize,
    /// Entries moved by merges so far (tests bound the cost per insert).
    #[cfg(test)]
    moved: usize,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            main: Vec::new(),
            side: BTreeMap::new(),
            live: 0,
            #[cfg(test)]
            moved: 0,
        }
    }
}

impl<V> IdTable<V> {
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn find(&self, id: u64) -> Result<usize, usize> {
        self.main.binary_search_by_key(&id, |(k, _)| *k)
    }

    /// Inserts or replaces; returns the value replaced.
    pub fn insert(&mut self, id: u64, value: V) -> Option<V> {
        let after = |last: Option<u64>| last.is_none_or(|last| last < id);
        let side_last = self.side.last_key_value().map(|(k, _)| *k);
        if after(self.main.last().map(|e| e.0)) && after(side_last) {
            grow_by_an_eighth(&mut self.main);
            self.main.push((id, Some(value)));
            self.live += 1;
            return None;
        }
        if let Ok(i) = self.find(id) {
            let old = self.main[i].1.replace(value);
            self.live += old.is_none() as usize;
            return old;
        }
        let old = self.side.insert(id, value);
        if old.is_none() {
            self.live += 1;
            if self.side.len() >= SIDE_MIN.max(self.main.len() / 8) {
                self.merge();
            }
        }
        old
    }

    pub fn get(&self, id: u64) -> Option<&V> {
        match self.find(id) {
            Ok(i) => self.main[i].1.as_ref(),
            Err(_) => self.side.get(&id),
        }
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        match self.find(id) {
            Ok(i) => self.main[i].1.as_mut(),
            Err(_) => self.side.get_mut(&id),
        }
    }

    pub fn contains_key(&self, id: u64) -> bool {
        self.get(id).is_some()
    }

    /// Removes an entry, leaving its slot vacant for a later insert of the
    /// same ID.
    pub fn remove(&mut self, id: u64) -> Option<V> {
        let old = match self.find(id) {
            Ok(i) => self.main[i].1.take(),
            Err(_) => self.side.remove(&id),
        };
        if old.is_some() {
            self.live -= 1;
            let vacant = self.main.len() + self.side.len() - self.live;
            if vacant > self.live / 2 + VACANT_SLACK {
                self.merge();
            }
        }
        old
    }

    /// Keeps only the entries for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &V) -> bool) {
        for (id, slot) in self.main.iter_mut() {
            if slot.as_ref().is_some_and(|v| !keep(*id, v)) {
                *slot = None;
                self.live -= 1;
            }
        }
        let before = self.side.len();
        self.side.retain(|id, v| keep(*id, v));
        self.live -= before - self.side.len();
        self.merge();
    }

    /// Live entries in ID order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        let mut main = (self.main.iter())
            .filter_map(|(id, v)| v.as_ref().map(|v| (*id, v)))
            .peekable();
        let mut side = self.side.iter().map(|(id, v)| (*id, v)).peekable();
        std::iter::from_fn(move || match (main.peek(), side.peek()) {
            (Some((a, _)), Some((b, _))) if b < a => side.next(),
            (Some(_), _) => main.next(),
            (None, _) => side.next(),
        })
    }

    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.iter().map(|(id, _)| id)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Drops vacant slots and merges the side map into the main vector (in
    /// place, from the back), then gives back spare capacity.
    fn merge(&mut self) {
        self.main.retain(|(_, v)| v.is_some());
        let side = std::mem::take(&mut self.side);
        let old_len = self.main.len();
        self.main.reserve_exact(side.len());
        // Fill the new tail with placeholders, then merge from the back so
        // that every entry moves at most once.
        self.main.extend(side.keys().map(|id| (*id, None)));
        let (mut a, mut w) = (old_len, self.main.len());
        let mut side = side.into_iter().rev().peekable();
        while let Some((sid, _)) = side.peek() {
            w -= 1;
            if a > 0 && self.main[a - 1].0 > *sid {
                a -= 1;
                self.main.swap(a, w);
            } else if let Some((sid, v)) = side.next() {
                self.main[w] = (sid, Some(v));
            }
        }
        #[cfg(test)]
        {
            self.moved += self.main.len();
        }
        let spare = self.main.capacity() - self.main.len();
        if spare > self.main.len() / 4 + SIDE_MIN {
            self.main.shrink_to(self.main.len() + self.main.len() / 8);
        }
    }
}

/// Grows a full vector by an eighth (at least 64 slots) instead of
/// doubling it, so spare capacity stays under about 12 % of the table.
fn grow_by_an_eighth<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 8).max(64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A small deterministic generator (no dependency for one test).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    fn agrees(t: &IdTable<u64>, model: &BTreeMap<u64, u64>) {
        assert_eq!(t.len(), model.len());
        let mut seen: Vec<(u64, u64)> = t.iter().map(|(k, v)| (k, *v)).collect();
        seen.sort();
        let want: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn behaves_like_a_map_under_mixed_operations() {
        let mut t = IdTable::default();
        let mut model = BTreeMap::new();
        let mut rng = Lcg(7);
        let mut next_id = 1_000u64;
        for step in 0..200_000u64 {
            let op = rng.next() % 10;
            let id = match op {
                // Mostly new IDs from a counter, some from the past.
                0..=3 => {
                    next_id += 1 + rng.next() % 3;
                    next_id
                }
                _ => 1_000 + rng.next() % (next_id - 999),
            };
            match op {
                0..=5 => assert_eq!(t.insert(id, step), model.insert(id, step)),
                6..=8 => assert_eq!(t.remove(id), model.remove(&id)),
                _ => {
                    assert_eq!(t.get(id), model.get(&id));
                    if let Some(v) = t.get_mut(id) {
                        *v += 1;
                        *model.get_mut(&id).unwrap() += 1;
                    }
                }
            }
            if step % 20_000 == 0 {
                agrees(&t, &model);
            }
        }
        agrees(&t, &model);
    }

    #[test]
    fn out_of_order_inserts_are_merged_in_order() {
        let mut t = IdTable::default();
        for id in (0..10_000u64).rev() {
            t.insert(id, id * 2);
        }
        assert_eq!(t.len(), 10_000);
        assert!(t.side.len() < SIDE_MIN);
        assert!(t.main.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(t.keys().eq(0..10_000), "iterated in ID order");
        for id in 0..10_000u64 {
            assert_eq!(t.get(id), Some(&(id * 2)));
        }
    }

    #[test]
    fn retain_keeps_what_it_is_told() {
        let mut t = IdTable::default();
        for id in (0..5_000u64).chain((5_000..6_000).rev()) {
            t.insert(id, id);
        }
        t.retain(|id, _| id % 3 == 0);
        assert_eq!(t.len(), 2_000);
        assert!(t.iter().all(|(id, v)| id % 3 == 0 && *v == id));
        assert_eq!(t.get(3_000), Some(&3_000));
        assert_eq!(t.get(5_997), Some(&5_997));
        assert_eq!(t.get(3_001), None);
    }

    #[test]
    fn a_removed_id_comes_back_in_its_own_slot() {
        let mut t = IdTable::default();
        for id in 0..100u64 {
            t.insert(id, id);
        }
        assert_eq!(t.remove(40), Some(40));
        assert_eq!(t.get(40), None);
        assert_eq!(t.insert(40, 41), None);
        assert!(t.side.is_empty(), "reused the vacant slot");
        assert_eq!(t.get(40), Some(&41));
        assert_eq!(t.len(), 100);
    }

    #[test]
    fn vacant_slots_do_not_pile_up() {
        let mut t = IdTable::default();
        for id in 0..100_000u64 {
            t.insert(id, id);
        }
        for id in 0..99_000u64 {
            t.remove(id);
        }
        assert_eq!(t.len(), 1_000);
        assert!(t.main.len() <= 1_000 + 500 + VACANT_SLACK + 1);
        assert!(t.main.capacity() < 10_000, "spare capacity given back");
        assert_eq!(t.keys().next(), Some(99_000));
    }

    #[test]
    fn inserts_out_of_order_cost_the_same_in_a_big_table() {
        // As stores arrive: every other ID below the newest (sessions
        // overlap), at 100,000 and at 1,000,000 entries.
        let moved_per_insert = |n: u64| {
            let mut t = IdTable::default();
            for i in 0..n / 2 {
                t.insert(2 * i + 1, 0u8);
                t.insert(2 * i, 0u8);
            }
            assert_eq!(t.len() as u64, n);
            t.moved as f64 / n as f64
        };
        let (small, big) = (moved_per_insert(100_000), moved_per_insert(1_000_000));
        assert!(big < 20.0, "{big} entries moved per insert");
        assert!(
            big < small * 1.5,
            "{small} then {big}: grows with the table"
        );
    }

    #[test]
    fn spare_capacity_stays_small_while_growing() {
        let mut t = IdTable::default();
        for id in 0..1_000_000u64 {
            t.insert(id, 0u64);
        }
        let spare = t.main.capacity() - t.main.len();
        assert!(spare <= t.main.len() / 8 + 64, "spare {spare}");
    }
}
