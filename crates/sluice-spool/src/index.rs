//! The writer's index of live messages: where each one's record is, which
//! recipients are done, and per segment which live messages it holds.
//!
//! Trusts: its callers to insert only records that are durably written and
//! to record outcomes only once they are durably written.
//!
//! Invariants:
//! - A message is live (in the index) from its store until the outcome
//!   that completes it; completing is idempotent (a second complete finds
//!   nothing and changes nothing).
//! - Every live message counts in exactly one segment's `live`, the
//!   segment holding its newest copy, and that segment's `live_bytes`
//!   counts its record length once.
//!
//! Memory (issue 22): a live message costs its 8-byte ID and a 64-byte
//! [`LiveMsg`] in an [`IdTable`], about 81 bytes with the table's spare
//! room (its last attempt's reason is not kept here: only on disk); segments count their messages instead of listing them
//! (compaction finds a segment's messages with one scan of the index).

use std::collections::BTreeMap;

use crate::{BodyRef, DoneSet, IdTable};

/// One live message (64 bytes). Its body runs to the record's end. The
/// body's offset within its record fits 32 bits: `record::check` keeps a
/// whole record, header included, within `u32::MAX` bytes (records of
/// older builds could exceed that only with an envelope of 4 GiB, which
/// no SMTP session can send).
#[derive(Debug, Clone)]
pub(crate) struct LiveMsg {
    /// Offset of the message record in its segment.
    pub record: u64,
    /// Length of the whole record, header included.
    pub record_len: u64,
    /// Per recipient: a final outcome is recorded.
    pub done: DoneSet,
    pub segment: u32,
    /// Offset of the body within the record.
    pub body_at: u32,
    /// The daemon's mark bits recorded for it so far (see
    /// [`crate::Spool::record_marks`]).
    pub marks: u32,
    /// Its envelope's flags, as stored (for [`crate::Recovered`]).
    pub flags: u32,
    /// Its newest attempt record without the reason, carried by
    /// compaction (times in Unix seconds, saturated to 32 bits).
    pub tried: Tried,
}

/// An [`crate::Attempt`] without its reason, in 12 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tried {
    pub count: u32,
    pub at: u32,
    pub next: u32,
}

impl Tried {
    pub fn of(a: &crate::Attempt) -> Tried {
        let secs = |t: u64| t.min(u32::MAX as u64) as u32;
        Tried {
            count: a.count,
            at: secs(a.at),
            next: secs(a.next),
        }
    }

    /// Nothing was ever recorded.
    pub fn is_none(&self) -> bool {
        *self == Tried::default()
    }

    pub fn attempt(&self, reason: String) -> crate::Attempt {
        crate::Attempt {
            count: self.count,
            at: self.at.into(),
            next: self.next.into(),
            reason,
        }
    }
}

impl LiveMsg {
    pub fn body_ref(&self, id: u64) -> BodyRef {
        BodyRef {
            id,
            segment: self.segment,
            record: self.record,
            offset: self.record + self.body_at as u64,
            len: self.record_len - self.body_at as u64,
        }
    }

    /// Indices of the recipients already done.
    pub fn done_indices(&self) -> Vec<u16> {
        self.done.indices(true)
    }

    /// Indices of the recipients not yet done.
    pub fn open_indices(&self) -> Vec<u16> {
        self.done.indices(false)
    }
}

/// What the writer knows about one existing segment.
#[derive(Debug, Default)]
pub(crate) struct SegInfo {
    /// Live messages whose newest copy is in this segment.
    pub live: usize,
    /// Sum of their record lengths.
    pub live_bytes: u64,
    /// File size.
    pub size: u64,
}

#[derive(Debug, Default)]
pub(crate) struct LiveIndex {
    msgs: IdTable<LiveMsg>,
    segs: BTreeMap<u32, SegInfo>,
}

impl LiveIndex {
    /// The index of the messages recovery found live, in segments of the
    /// given sizes.
    pub fn build(msgs: IdTable<LiveMsg>, sizes: impl IntoIterator<Item = (u32, u64)>) -> Self {
        let mut segs: BTreeMap<u32, SegInfo> = (sizes.into_iter())
            .map(|(n, size)| {
                (
                    n,
                    SegInfo {
                        size,
                        ..SegInfo::default()
                    },
                )
            })
            .collect();
        for (_, msg) in msgs.iter() {
            let seg = segs.entry(msg.segment).or_default();
            seg.live += 1;
            seg.live_bytes += msg.record_len;
        }
        LiveIndex { msgs, segs }
    }

    /// Registers an existing segment (no-op if known) and sets its size.
    pub fn add_segment(&mut self, segment: u32, size: u64) {
        self.segs.entry(segment).or_default().size = size;
    }

    pub fn grow(&mut self, segment: u32, by: u64) {
        if let Some(seg) = self.segs.get_mut(&segment) {
            seg.size += by;
        }
    }

    /// Adds a live message, or moves it if it is already live elsewhere.
    pub fn insert(&mut self, id: u64, msg: LiveMsg) {
        self.detach(id);
        let seg = self.segs.entry(msg.segment).or_default();
        seg.live += 1;
        seg.live_bytes += msg.record_len;
        self.msgs.insert(id, msg);
    }

    pub fn get(&self, id: u64) -> Option<&LiveMsg> {
        self.msgs.get(id)
    }

    /// The live messages whose newest copy is in `segment`, in file order
    /// (one scan of the whole index).
    pub fn in_segment(&self, segment: u32) -> Vec<(u64, u64)> {
        let mut found: Vec<(u64, u64)> = (self.msgs.iter())
            .filter(|(_, m)| m.segment == segment)
            .map(|(id, m)| (m.record, id))
            .collect();
        found.sort_unstable();
        found
    }

    /// Marks recipients done; returns whether the message is now done for
    /// every recipient (false for a message that is not live).
    pub fn record_done(&mut self, id: u64, recipients: &[u16]) -> bool {
        let Some(msg) = self.msgs.get_mut(id) else {
            return false;
        };
        for &r in recipients {
            msg.done.set(r as usize);
        }
        msg.done.all()
    }

    /// Adds mark bits to a live message (nothing for one that is not).
    pub fn add_marks(&mut self, id: u64, marks: u32) {
        if let Some(msg) = self.msgs.get_mut(id) {
            msg.marks |= marks;
        }
    }

    /// Notes a live message's newest attempt (nothing for one that is not).
    pub fn set_tried(&mut self, id: u64, tried: Tried) {
        if let Some(msg) = self.msgs.get_mut(id) {
            msg.tried = tried;
        }
    }

    /// Forgets a message that is complete; `None` if it was not live.
    pub fn remove(&mut self, id: u64) -> Option<LiveMsg> {
        self.detach(id);
        self.msgs.remove(id)
    }

    fn detach(&mut self, id: u64) {
        let Some(old) = self.msgs.get(id) else {
            return;
        };
        if let Some(seg) = self.segs.get_mut(&old.segment) {
            seg.live = seg.live.saturating_sub(1);
            seg.live_bytes = seg.live_bytes.saturating_sub(old.record_len);
        }
    }

    /// The oldest existing segment.
    pub fn oldest(&self) -> Option<(u32, &SegInfo)> {
        self.segs.iter().next().map(|(n, s)| (*n, s))
    }

    /// Existing segments from `first` on, oldest first.
    pub fn segments_from(&self, first: u32) -> impl Iterator<Item = (u32, &SegInfo)> {
        self.segs.range(first..).map(|(n, s)| (*n, s))
    }

    pub fn segment(&self, segment: u32) -> Option<&SegInfo> {
        self.segs.get(&segment)
    }

    pub fn newest_segment(&self) -> Option<u32> {
        self.segs.keys().next_back().copied()
    }

    /// Forgets a deleted segment (which must hold no live message).
    pub fn drop_segment(&mut self, segment: u32) {
        self.segs.remove(&segment);
    }
}

// The size the memory figures above assume.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<LiveMsg>() == 64);
