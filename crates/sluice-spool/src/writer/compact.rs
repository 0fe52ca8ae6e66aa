//! Compaction: copies the live messages of the oldest segment forward, so
//! that one deferred message, or a burst of mail for a next hop that is
//! down, does not pin its segment (and, by the reclaim rule, every newer
//! one) until it is delivered or expires.
//!
//! Trusts: the live index for where each live record is and which of its
//! recipients are done; re-reads every record and checks its CRC before
//! copying it.
//!
//! Invariants:
//! - Only the oldest segment is compacted, only when it is not the current
//!   one, not pinned, and emptying it frees at least [`FREED_PER_COPIED`]
//!   times the bytes copied. What emptying it frees is its own size plus
//!   that of the directly following segments that hold nothing live (and
//!   are neither current nor pinned): the ordinary reclaim deletes them all
//!   once it is empty. So a mostly dead oldest segment is copied (as
//!   before), and so is a fully live one that holds back dead segments
//!   behind it; a backlog that is all live is never copied (emptying the
//!   oldest would free only what is copied). Every byte copied frees at
//!   least one dead byte, so compaction writes at most as much as was
//!   written and died.
//! - A record is copied verbatim, followed by an outcome record with the
//!   message's done recipients and a marks record with its marks, and synced before the index and the reader
//!   are told of its new place; the old copy is deleted only afterwards, by
//!   the ordinary reclaim. A crash in between leaves two copies, which
//!   recovery resolves (the later one wins, done sets are united).
//! - One step copies at most [`STEP_BYTES`] and [`STEP_RECORDS`] (but at
//!   least one record), so stores queued behind it wait for one bounded
//!   write and sync.
//! - Copies may not eat into more than half of the free-space reserve.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use super::Writer;
use crate::index::LiveMsg;
use crate::record::{self, Record};
use crate::segment_path;

/// Emptying the oldest segment must free at least this many times the
/// bytes it copies.
const FREED_PER_COPIED: u64 = 2;

/// Most bytes one compaction step copies.
const STEP_BYTES: u64 = 8 << 20;
/// Most records one compaction step copies (tests use a small step so
/// that compaction takes several).
#[cfg(not(test))]
const STEP_RECORDS: usize = 1024;
#[cfg(test)]
const STEP_RECORDS: usize = 4;

impl Writer {
    /// The oldest segment, if it should be compacted now.
    pub(super) fn compaction_due(&self) -> Option<u32> {
        let (oldest, seg) = self.index.oldest()?;
        let allowed = oldest != self.current
            && !self.pinned.contains(&oldest)
            && !self.uncopyable.contains(&oldest);
        if !allowed || seg.live == 0 {
            return None;
        }
        let worth_it =
            self.freed_by_emptying(oldest) >= seg.live_bytes.saturating_mul(FREED_PER_COPIED);
        worth_it.then_some(oldest)
    }

    /// Bytes reclaimed once `oldest` holds nothing live: its size and that
    /// of the directly following segments that the reclaim would delete
    /// with it (no live message, not current, not pinned).
    fn freed_by_emptying(&self, oldest: u32) -> u64 {
        let reclaimable =
            |n: u32, empty: bool| empty && n != self.current && !self.pinned.contains(&n);
        let following: u64 = self
            .index
            .segments_from(oldest)
            .skip(1)
            .take_while(|(n, seg)| reclaimable(*n, seg.live == 0))
            .map(|(_, seg)| seg.size)
            .sum();
        self.index
            .segment(oldest)
            .map_or(0, |seg| seg.size)
            .saturating_add(following)
    }

    /// Copies one step's worth of the oldest segment's live messages to the
    /// current segment; returns whether it copied anything.
    pub(super) fn compact_step(&mut self, buf: &mut Vec<u8>) -> bool {
        let Some(oldest) = self.compaction_due() else {
            self.plan = None;
            return false;
        };
        if self.len >= self.segment_bytes && self.rotate().is_err() {
            return false;
        }
        let picked = self.pick(oldest);
        let bytes: u64 = picked
            .iter()
            .map(|(_, msg)| {
                msg.record_len
                    + record::outcome_len(msg.done.len())
                    + record::marks_len()
                    + record::attempt_len(0)
            })
            .sum();
        // On any failure below, the picked messages are no longer in the
        // plan: drop it, so the next step scans the segment afresh.
        let free = (self.disk.free_bytes)(&self.dir).unwrap_or(0);
        if free < bytes.saturating_add(self.reserve / 2) {
            self.plan = None;
            return false;
        }
        buf.clear();
        let copies = match self.copy_out(oldest, &picked, buf) {
            Ok(copies) => copies,
            Err(_) => {
                // A live record no longer checks out: leave the segment be.
                self.uncopyable.insert(oldest);
                self.plan = None;
                return false;
            }
        };
        if self.write(buf).is_err() {
            self.plan = None;
            return false;
        }
        let written = buf.len() as u64;
        self.len += written;
        self.index.grow(self.current, written);
        self.stats.bytes.fetch_add(written, Ordering::Relaxed);
        self.stats
            .compacted
            .fetch_add(copies.len() as u64, Ordering::Relaxed);
        if self.sync {
            self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        }
        for (id, msg) in copies {
            self.reader.relocate(msg.body_ref(id));
            self.index.insert(id, msg);
        }
        self.reclaim();
        true
    }

    /// The live messages of `segment` one step copies, in file order.
    /// The segment's messages are found with one scan of the index when
    /// its compaction starts; each step takes the next ones still live
    /// there.
    fn pick(&mut self, segment: u32) -> Vec<(u64, LiveMsg)> {
        if self.plan.as_ref().is_none_or(|(n, _)| *n != segment) {
            self.plan = Some((segment, self.index.in_segment(segment).into()));
        }
        let Some((_, todo)) = self.plan.as_mut() else {
            return Vec::new();
        };
        let mut bytes = 0;
        let mut picked = Vec::new();
        while let Some(&(record, id)) = todo.front() {
            let Some(msg) = self.index.get(id) else {
                todo.pop_front();
                continue;
            };
            if msg.segment != segment || msg.record != record {
                // Completed, or already moved by an earlier step.
                todo.pop_front();
                continue;
            }
            let full = picked.len() >= STEP_RECORDS || bytes + msg.record_len > STEP_BYTES;
            if full && !picked.is_empty() {
                break;
            }
            bytes += msg.record_len;
            picked.push((id, msg.clone()));
            todo.pop_front();
        }
        if todo.is_empty() {
            self.plan = None;
        }
        picked
    }

    /// Appends verified copies of the picked records, each followed by its
    /// done set and marks, to `buf`; returns each message's place once `buf` is
    /// written at the end of the current segment.
    fn copy_out(
        &self,
        segment: u32,
        picked: &[(u64, LiveMsg)],
        buf: &mut Vec<u8>,
    ) -> std::io::Result<Vec<(u64, LiveMsg)>> {
        let file = File::open(segment_path(&self.dir, segment))?;
        let mut copies = Vec::with_capacity(picked.len());
        for (id, msg) in picked {
            let at = buf.len();
            buf.resize(at + msg.record_len as usize, 0);
            file.read_exact_at(&mut buf[at..], msg.record)?;
            match record::decode(&self.salt, &buf[at..]) {
                Ok((Record::Message { envelope, .. }, len))
                    if envelope.id == *id && len as u64 == msg.record_len => {}
                _ => return Err(std::io::Error::other("live record fails its check")),
            }
            let done = msg.done_indices();
            if !done.is_empty() {
                record::encode_outcome(&self.salt, *id, &done, buf);
            }
            if msg.marks != 0 {
                record::encode_marks(&self.salt, *id, msg.marks, buf);
            }
            if !msg.tried.is_none() {
                let attempt = msg.tried.attempt(String::new());
                record::encode_attempt(&self.salt, *id, &attempt, buf);
            }
            let copy = LiveMsg {
                segment: self.current,
                record: self.len + at as u64,
                ..msg.clone()
            };
            copies.push((*id, copy));
        }
        Ok(copies)
    }
}
