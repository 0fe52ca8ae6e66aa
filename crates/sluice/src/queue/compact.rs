//! Compact forms of what a parked message keeps in memory, for backlogs
//! of a million messages (issue 22): where its record is without a copy of
//! its ID ([`Spot`]), its recipients' done flags without a heap allocation
//! when there are at most 64 of them ([`DoneSet`]), and one shared copy of
//! each deferral reason ([`Reasons`]).
//!
//! Invariants: `Spot::of(r).body_ref(r.id) == r` for every `BodyRef` the
//! spool hands out (a body never starts 4 GiB or more after its record:
//! otherwise the spot keeps the whole reference); `DoneSet::from(v).to_vec()
//! == v`.

use std::collections::HashSet;
use std::sync::Arc;

use sluice_spool::BodyRef;

/// A [`BodyRef`] without its ID (the parked map's key): 24 bytes, not 40.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spot {
    record: u64,
    len: u64,
    segment: u32,
    /// The body's offset after the record's (its envelope's length).
    body_at: u32,
}

impl Spot {
    pub fn of(r: BodyRef) -> Spot {
        // The envelope before a body is far below 4 GiB (the spool's
        // records are bounded well under that); saturating would break the
        // invariant, so it is checked in debug builds and tests.
        let body_at = r.offset - r.record;
        debug_assert!(body_at <= u32::MAX as u64);
        Spot {
            record: r.record,
            len: r.len,
            segment: r.segment,
            body_at: body_at as u32,
        }
    }

    pub fn body_ref(self, id: u64) -> BodyRef {
        BodyRef {
            id,
            segment: self.segment,
            record: self.record,
            offset: self.record + self.body_at as u64,
            len: self.len,
        }
    }
}

/// Per recipient, whether it is done: bits inline for up to 64 recipients
/// (16 bytes, no allocation), boxed beyond (a thin pointer, so the enum
/// stays 16 bytes).
#[derive(Debug, Clone)]
pub(super) enum DoneSet {
    Bits {
        bits: u64,
        len: u8,
    },
    // Boxed on purpose: a thin pointer keeps every DoneSet at 16 bytes; the
    // extra allocation is paid only past 64 recipients.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<bool>>),
}

impl From<Vec<bool>> for DoneSet {
    fn from(v: Vec<bool>) -> DoneSet {
        if v.len() > 64 {
            return DoneSet::Many(Box::new(v));
        }
        let bits = v
            .iter()
            .enumerate()
            .fold(0u64, |b, (i, &d)| b | ((d as u64) << i));
        DoneSet::Bits {
            bits,
            len: v.len() as u8,
        }
    }
}

impl DoneSet {
    pub fn len(&self) -> usize {
        match self {
            DoneSet::Bits { len, .. } => *len as usize,
            DoneSet::Many(v) => v.len(),
        }
    }

    pub fn to_vec(&self) -> Vec<bool> {
        match self {
            DoneSet::Bits { bits, len } => (0..*len).map(|i| bits & (1 << i) != 0).collect(),
            DoneSet::Many(v) => v.as_ref().clone(),
        }
    }
}

/// Distinct deferral reasons kept at most before the set is emptied.
const REASONS_MAX: usize = 10_000;

/// One copy of each deferral reason of parked messages: a backlog for a
/// dead next hop is many messages with the same reason.
#[derive(Default)]
pub(super) struct Reasons(HashSet<Arc<str>>);

impl Reasons {
    pub fn get(&mut self, reason: &str) -> Arc<str> {
        if let Some(r) = self.0.get(reason) {
            return r.clone();
        }
        if self.0.len() >= REASONS_MAX {
            // The messages keep theirs; only the sharing starts again.
            self.0.clear();
        }
        let r: Arc<str> = reason.into();
        self.0.insert(r.clone());
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spot_gives_back_the_body_ref() {
        let r = BodyRef {
            id: 7,
            segment: 3,
            record: (5 << 32) + 11,
            offset: (5 << 32) + 11 + 300,
            len: 9_000_000_000,
        };
        assert_eq!(Spot::of(r).body_ref(7), r);
        assert_eq!(std::mem::size_of::<Spot>(), 24);
    }

    #[test]
    fn done_sets_round_trip_at_every_size() {
        for n in [0usize, 1, 2, 63, 64, 65, 300] {
            let v: Vec<bool> = (0..n).map(|i| i % 3 == 1).collect();
            let d = DoneSet::from(v.clone());
            assert_eq!((d.len(), d.to_vec()), (n, v), "{n} recipients");
        }
        assert_eq!(std::mem::size_of::<DoneSet>(), 16);
    }

    #[test]
    fn a_reason_is_shared() {
        let mut r = Reasons::default();
        let a = r.get("451 4.4.1 connection refused");
        let b = r.get("451 4.4.1 connection refused");
        assert!(Arc::ptr_eq(&a, &b));
    }
}
