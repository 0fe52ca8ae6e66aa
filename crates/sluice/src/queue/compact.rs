//! Compact forms of what a parked message keeps in memory, for backlogs
//! of a million messages (issue 22): where its record is without a copy of
//! its ID ([`Spot`]) and one shared copy of each deferral reason with its destination
//! ([`Reasons`]); its done flags are the spool's [`sluice_spool::DoneSet`].
//!
//! Invariants: `Spot::of(r).body_ref(r.id) == r` for every `BodyRef` the
//! spool hands out (a body never starts 4 GiB or more after its record,
//! nor is 4 GiB long: checked in debug builds).

use std::collections::HashMap;
use std::sync::Arc;

use sluice_spool::BodyRef;

use crate::message::status::Reply;

/// A [`BodyRef`] without its ID (the parked map's key), in 20 bytes, not
/// 40: 32-bit words only, so that it packs beside the other fields of a
/// parked message without padding.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spot {
    /// The record's offset in its segment, low and high words.
    record: [u32; 2],
    segment: u32,
    /// The body's offset after the record's (its envelope's length).
    body_at: u32,
    /// The body's length.
    len: u32,
}

impl Spot {
    pub fn of(r: BodyRef) -> Spot {
        // A record's payload, envelope and body together, is at most
        // u32::MAX bytes (the spool's format refuses bigger ones), so the
        // body's length and its offset after the record's header fit 32
        // bits. Checked in debug builds.
        let body_at = r.offset - r.record;
        debug_assert!(body_at <= u32::MAX as u64 && r.len <= u32::MAX as u64);
        Spot {
            record: [r.record as u32, (r.record >> 32) as u32],
            segment: r.segment,
            body_at: body_at as u32,
            len: r.len as u32,
        }
    }

    pub fn body_ref(self, id: u64) -> BodyRef {
        let record = self.record[0] as u64 | (self.record[1] as u64) << 32;
        BodyRef {
            id,
            segment: self.segment,
            record,
            offset: record + self.body_at as u64,
            len: self.len as u64,
        }
    }
}

/// Why a parked message was last deferred, and where: shared by the
/// parked messages deferred for it (a thin pointer: 8 bytes).
pub(super) type Reason = Arc<Deferral>;

/// A deferral reason and the destination that gave it.
#[derive(Debug, PartialEq, Eq)]
pub struct Deferral {
    pub reply: Reply,
    /// None: the message had no route.
    pub dest: Option<Arc<str>>,
}

/// Distinct deferral reasons kept at most before the set is emptied.
const REASONS_MAX: usize = 10_000;

/// One copy of each deferral reason of parked messages, by destination: a
/// backlog for a dead next hop is many messages with the same reason.
#[derive(Default)]
pub(super) struct Reasons {
    by_dest: HashMap<Option<Arc<str>>, HashMap<Reply, Reason>>,
    len: usize,
}

impl Reasons {
    pub fn get(&mut self, dest: &Option<Arc<str>>, reply: &Reply) -> Reason {
        // Found by the reply itself: no text is made for a deferral
        // already known.
        if let Some(r) = self.by_dest.get(dest).and_then(|m| m.get(reply)) {
            return r.clone();
        }
        if self.len >= REASONS_MAX {
            // The messages keep theirs; only the sharing starts again.
            self.by_dest.clear();
            self.len = 0;
        }
        let r = Arc::new(Deferral {
            reply: reply.clone(),
            dest: dest.clone(),
        });
        let replies = self.by_dest.entry(dest.clone()).or_default();
        replies.insert(reply.clone(), r.clone());
        self.len += 1;
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
            len: 4_000_000_000,
        };
        assert_eq!(Spot::of(r).body_ref(7), r);
        assert_eq!(std::mem::size_of::<Spot>(), 20);
    }

    use crate::message::status::Enhanced;

    #[test]
    fn a_reason_is_shared() {
        let mut r = Reasons::default();
        let mx: Option<Arc<str>> = Some("smtp:mx.test".into());
        let refused = Reply::smtp(451, Enhanced::new(4, 4, 1), "connection refused");
        let a = r.get(&mx, &refused);
        let b = r.get(&mx, &refused.clone());
        assert!(Arc::ptr_eq(&a, &b));
        let elsewhere = r.get(&Some("smtp:other.test".into()), &refused);
        assert!(!Arc::ptr_eq(&a, &elsewhere));
        assert_eq!(elsewhere.dest.as_deref(), Some("smtp:other.test"));
    }
}
