//! Compact forms of what a parked message keeps in memory, for backlogs
//! of a million messages (issue 22): where its record is without a copy of
//! its ID ([`Spot`]) and one shared copy of each deferral reason
//! ([`Reasons`]); its done flags are the spool's [`sluice_spool::DoneSet`].
//!
//! Invariants: `Spot::of(r).body_ref(r.id) == r` for every `BodyRef` the
//! spool hands out (a body never starts 4 GiB or more after its record:
//! checked in debug builds).

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
        // The envelope before a body is far below 4 GiB: at most 65,535
        // recipients (`MAX_RECIPIENTS`) of at most ~1 KiB each with their
        // DSN parameters, so about 64 MiB. Checked in debug builds.
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
    fn a_reason_is_shared() {
        let mut r = Reasons::default();
        let a = r.get("451 4.4.1 connection refused");
        let b = r.get("451 4.4.1 connection refused");
        assert!(Arc::ptr_eq(&a, &b));
    }
}
