//! Start-up recovery: rebuilds the set of messages that still have work to
//! do from the segment files, without ever throwing acknowledged mail away
//! because of one bad record.
//!
//! Trusts: nothing read from a segment without its CRC; the directory
//! listing for which segments exist.
//!
//! Invariants:
//! - A record that fails to decode never ends the scan of its segment. The
//!   scan resynchronises at the next offset where a whole record (magic,
//!   length and CRC keyed with the spool's salt) decodes, so every valid
//!   record after the damage counts, and bytes from a client's message body
//!   (which cannot carry a keyed CRC) never do. The search's checksum work
//!   is bounded per segment (see `resync`); if it gives up, the rest of the
//!   segment is one damaged range, quarantined and kept in place.
//! - Damaged bytes are copied to `<spool>/corrupt/<segment>-<offset>.bin`
//!   (file and directory fsynced) before anything else happens to them.
//! - Only the newest segment is ever cut, only at a torn tail (no valid
//!   record after the damage, the search having run to the end without
//!   giving up), and only after the tail is quarantined,
//!   unless it is no longer than a record header.
//! - A segment whose damaged bytes could not be quarantined is pinned: the
//!   writer never reclaims it (nor, by the reclaim rule, anything newer).
//! - Recovery is idempotent: a range already quarantined with the same
//!   bytes is counted in `known_damage`, not reported again.
//! - `max_id` is at least every queue ID a valid record carries, outcome
//!   records included, so a new message never gets the ID of an outcome
//!   still on disk (which recovery would apply to it). IDs in damaged
//!   bytes are not trusted and not counted.

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::index::{LiveIndex, LiveMsg, Tried};
use crate::record::{self, Damage, Record, HEADER_LEN};
use crate::salt::{LegacyVerdict, Salt, Switch};

mod resync;
use crate::{segment_path, sync_dir, DoneSet, IdTable, Recovered, RecoveryReport, SpoolError};
#[cfg(test)]
pub(crate) use resync::CHECKSUMMED;
use resync::{Next, Resync};

/// What recovery hands to the writer.
pub(crate) struct RecoveredState {
    pub max_id: u64,
    /// Every existing segment and the live messages in it.
    pub index: LiveIndex,
    /// Segments holding damaged bytes that could not be quarantined.
    pub pinned: BTreeSet<u32>,
    /// The salt every record was checked with, and new ones are keyed with.
    pub salt: Salt,
}

impl RecoveredState {
    /// Whether this spool may switch to a salt (`salt.rs`): a legacy one
    /// holding no mail (`pending` messages with work left, no damage kept).
    pub(crate) fn legacy_verdict(&self, pending: usize) -> LegacyVerdict {
        if !self.salt.is_legacy() || pending > 0 || !self.pinned.is_empty() {
            return LegacyVerdict::Keep;
        }
        LegacyVerdict::Empty(self.index.segments_from(0).map(|(s, _)| s).collect())
    }

    /// What a switch did: its deleted segments out of the index, its salt.
    pub(crate) fn switched(&mut self, switch: Switch) {
        for segment in switch.deleted {
            self.index.drop_segment(segment);
        }
        if let Some(salt) = switch.salt {
            self.salt = salt;
        }
    }
}

/// Messages found so far, by queue ID.
#[derive(Default)]
struct Found {
    /// Where each message's newest copy is, its done set and marks so far:
    /// once the scan ends, the live ones are the writer's index as they
    /// are (no copy, for a backlog of a million messages).
    messages: IdTable<LiveMsg>,
    /// Outcomes seen before any record of their message; most belong to
    /// messages completed and reclaimed long ago and are dropped at the end.
    early: HashMap<u64, Vec<u16>>,
    /// Marks seen before any record of their message, likewise.
    early_marks: HashMap<u64, u32>,
    /// Attempts seen before any record of their message, likewise.
    early_tried: HashMap<u64, Tried>,
    /// The reason of each message's newest attempt record that had one
    /// (compaction's copies carry none: the index does not keep it).
    reasons: HashMap<u64, String>,
    /// The highest queue ID any valid record carries (message or outcome):
    /// new IDs start above it.
    max_id: u64,
}

pub(crate) fn recover(
    dir: &Path,
    salt: Salt,
) -> Result<(Vec<Recovered>, RecoveryReport, RecoveredState), SpoolError> {
    let numbers = list_segments(dir)?;
    let mut report = RecoveryReport {
        segments: numbers.len(),
        ..Default::default()
    };
    let mut found = Found::default();
    let mut sizes = Vec::with_capacity(numbers.len());
    let mut pinned = BTreeSet::new();
    for (i, &segment) in numbers.iter().enumerate() {
        let newest = i + 1 == numbers.len();
        let scanned = scan_segment(dir, &salt, segment, newest, &mut found, &mut report)?;
        sizes.push((segment, scanned.size));
        if scanned.pinned {
            pinned.insert(segment);
        }
    }
    report.pinned = pinned.iter().copied().collect();
    let mut messages = std::mem::take(&mut found.messages);
    let before = messages.len();
    messages.retain(|_, msg| !msg.done.all());
    report.messages_complete = before - messages.len();
    let mut pending: Vec<Recovered> = Vec::with_capacity(messages.len());
    let reasons = &mut found.reasons;
    pending.extend(messages.iter().map(|(id, msg)| {
        Recovered {
            id,
            body: msg.body_ref(id),
            done: msg.done.clone(),
            marks: msg.marks,
            flags: msg.flags,
            attempt: (!msg.tried.is_none())
                .then(|| msg.tried.attempt(reasons.remove(&id).unwrap_or_default())),
        }
    }));
    pending.sort_by_key(|m| m.id);
    report.messages_pending = pending.len();
    let index = LiveIndex::build(messages, sizes);
    let state = RecoveredState {
        max_id: found.max_id,
        index,
        pinned,
        salt,
    };
    Ok((pending, report, state))
}

/// Segment numbers present in the spool directory, oldest first.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u32>, SpoolError> {
    let mut numbers: Vec<u32> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".seg")?.parse().ok()
        })
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// What scanning one segment found out about it.
struct Scanned {
    /// Its size once any torn tail is cut.
    size: u64,
    /// Damaged bytes in it could not be quarantined.
    pinned: bool,
}

/// Reads one segment into `found`.
fn scan_segment(
    dir: &Path,
    salt: &Salt,
    segment: u32,
    newest: bool,
    found: &mut Found,
    report: &mut RecoveryReport,
) -> Result<Scanned, SpoolError> {
    let data = std::fs::read(segment_path(dir, segment))?;
    let mut scanned = Scanned {
        size: data.len() as u64,
        pinned: false,
    };
    let mut resync = Resync::new(salt, &data);
    let mut pos = 0;
    while pos < data.len() {
        match record::decode(salt, &data[pos..]) {
            Ok((record, len)) => {
                found.apply(segment, pos as u64, len as u64, record);
                pos += len;
            }
            Err(damage) => {
                let next = resync.next(pos + 1);
                let end = match next {
                    Next::At(at) => at,
                    Next::None | Next::GaveUp => data.len(),
                };
                let bad = Bad {
                    segment,
                    offset: pos,
                    bytes: &data[pos..end],
                    what: describe(&damage, &next),
                    // Past a give-up there may be good records: keep them.
                    cut: newest && next == Next::None,
                };
                match bad.handle(dir, report) {
                    Handled::Pinned => scanned.pinned = true,
                    Handled::Cut => scanned.size = pos as u64,
                    Handled::Kept => {}
                }
                match next {
                    Next::At(at) => pos = at,
                    Next::None | Next::GaveUp => break,
                }
            }
        }
    }
    Ok(scanned)
}

/// What the damaged range is, for the report.
fn describe(damage: &Damage, next: &Next) -> String {
    let what = match (damage, next) {
        (Damage::Torn, Next::None) => "torn tail".to_string(),
        (Damage::Torn, _) => "corrupt record (length runs into the records after it)".to_string(),
        (Damage::Corrupt(why), _) => format!("corrupt record ({why})"),
    };
    if *next != Next::GaveUp {
        return what;
    }
    format!(
        "{what}; resynchronisation gave up after checksumming {}x the segment's size \
         in candidates, so the rest of the segment is treated as damaged",
        resync::BUDGET_PER_BYTE
    )
}

impl Found {
    /// Adds one record. A message may appear more than once (compaction
    /// copies it forward): the later copy's place wins and the done sets
    /// and marks are united. An outcome may come before its message's record (whose
    /// older copy was reclaimed): it is kept and applied when it appears.
    fn apply(&mut self, segment: u32, at: u64, record_len: u64, record: Record) {
        match record {
            Record::Message {
                envelope,
                body_at,
                body_len,
            } => {
                let id = envelope.id;
                self.max_id = self.max_id.max(id);
                let mut msg = LiveMsg {
                    record: at,
                    record_len,
                    done: DoneSet::none(envelope.recipients.len()),
                    segment,
                    // Fits: see `LiveMsg`.
                    body_at: body_at as u32,
                    marks: self.early_marks.remove(&id).unwrap_or(0),
                    flags: envelope.flags,
                    tried: self.early_tried.remove(&id).unwrap_or_default(),
                };
                debug_assert_eq!(record_len - body_at as u64, body_len);
                if let Some(earlier) = self.messages.get(id) {
                    msg.marks |= earlier.marks;
                    if msg.tried.is_none() {
                        msg.tried = earlier.tried;
                    }
                    unite(&mut msg.done, earlier.done.indices(true));
                }
                if let Some(early) = self.early.remove(&id) {
                    unite(&mut msg.done, early);
                }
                self.messages.insert(id, msg);
            }
            Record::Outcome { id, recipients } => {
                // Its message may be long gone, but while this record is
                // on disk its ID must not be issued again: a new message
                // with it would take this outcome as its own.
                self.max_id = self.max_id.max(id);
                match self.messages.get_mut(id) {
                    Some(found) => unite(&mut found.done, recipients),
                    None => self.early.entry(id).or_default().extend(recipients),
                }
            }
            Record::Marks { id, marks } => {
                self.max_id = self.max_id.max(id);
                match self.messages.get_mut(id) {
                    Some(found) => found.marks |= marks,
                    None => *self.early_marks.entry(id).or_default() |= marks,
                }
            }
            Record::Attempt { id, attempt } => {
                // The newest wins; a copy without its reason keeps the
                // reason of the record it copies.
                self.max_id = self.max_id.max(id);
                let tried = Tried::of(&attempt);
                let known = match self.messages.get_mut(id) {
                    Some(found) => std::mem::replace(&mut found.tried, tried),
                    None => self.early_tried.insert(id, tried).unwrap_or_default(),
                };
                if !attempt.reason.is_empty() {
                    self.reasons.insert(id, attempt.reason);
                } else if known != tried {
                    self.reasons.remove(&id);
                }
            }
        }
    }
}

/// Marks these recipients done; indices out of range are ignored.
fn unite(done: &mut DoneSet, recipients: impl IntoIterator<Item = u16>) {
    for r in recipients {
        done.set(r as usize);
    }
}

/// A damaged byte range found in a segment.
struct Bad<'a> {
    segment: u32,
    offset: usize,
    bytes: &'a [u8],
    what: String,
    /// The range is the torn tail of the newest segment: cut it off.
    cut: bool,
}

/// What became of a damaged range.
enum Handled {
    /// Saved (or known) and left in place.
    Kept,
    /// Saved (or too short to be worth saving) and cut off.
    Cut,
    /// Not saved: the segment must be kept.
    Pinned,
}

impl Bad<'_> {
    /// Quarantines the range, cuts it if due, and reports it.
    fn handle(&self, dir: &Path, report: &mut RecoveryReport) -> Handled {
        let place = format!(
            "segment {:08} offset {}: {} bytes, {}",
            self.segment,
            self.offset,
            self.bytes.len(),
            self.what
        );
        let saved = if self.cut && self.bytes.len() <= HEADER_LEN {
            Ok(None)
        } else {
            quarantine(dir, self.segment, self.offset, self.bytes).map(Some)
        };
        let note = match saved {
            Err(err) => {
                report.damage.push(format!(
                    "{place}; could not be quarantined ({err}): segment pinned, \
                     it and every newer segment are kept"
                ));
                return Handled::Pinned;
            }
            Ok(Some(Saved::Known(_))) if !self.cut => {
                report.known_damage += 1;
                return Handled::Kept;
            }
            Ok(Some(Saved::Known(path))) => format!("already quarantined in {}", path.display()),
            Ok(Some(Saved::New(path))) => format!("quarantined in {}", path.display()),
            Ok(None) => "a torn header, nothing to keep".to_string(),
        };
        let (handled, action) = if !self.cut {
            (Handled::Kept, String::new())
        } else {
            match cut(&segment_path(dir, self.segment), self.offset as u64) {
                Ok(()) => (Handled::Cut, "; cut off".to_string()),
                Err(err) => (Handled::Kept, format!("; could not be cut off ({err})")),
            }
        };
        report.damage.push(format!("{place}; {note}{action}"));
        handled
    }
}

fn cut(path: &Path, len: u64) -> std::io::Result<()> {
    let file = OpenOptions::new().write(true).open(path)?;
    file.set_len(len)?;
    file.sync_all()
}

/// Where quarantined bytes went.
enum Saved {
    /// Written now.
    New(PathBuf),
    /// An earlier start-up already saved exactly these bytes here.
    Known(PathBuf),
}

/// Copies damaged bytes to `<dir>/corrupt/<segment>-<offset>.bin`, durably.
/// A file of that name with other contents (a segment number reused after
/// the spool emptied) gets a `.1`, `.2`, … suffix instead.
fn quarantine(dir: &Path, segment: u32, offset: usize, bytes: &[u8]) -> std::io::Result<Saved> {
    let corrupt = dir.join("corrupt");
    if !corrupt.is_dir() {
        std::fs::create_dir(&corrupt)?;
        sync_dir(dir)?;
    }
    for n in 0..100 {
        let name = match n {
            0 => format!("{segment:08}-{offset}.bin"),
            n => format!("{segment:08}-{offset}.{n}.bin"),
        };
        let path = corrupt.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => {
                return match write_synced(file, bytes).and_then(|()| sync_dir(&corrupt)) {
                    Ok(()) => Ok(Saved::New(path)),
                    Err(err) => {
                        let _ = std::fs::remove_file(&path);
                        Err(err)
                    }
                };
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                if std::fs::read(&path)? == bytes {
                    return Ok(Saved::Known(path));
                }
            }
            Err(err) => return Err(err),
        }
    }
    Err(std::io::Error::other(
        "too many quarantine files for one offset",
    ))
}

fn write_synced(mut file: File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.sync_all()
}
