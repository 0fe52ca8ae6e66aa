//! The spool's secret salt, which keys every record's checksum:
//! `crc32(salt ‖ payload)`.
//!
//! Why: message bodies are chosen by SMTP clients (BDAT takes binary), so a
//! body can hold bytes that form a whole record with a valid *unkeyed*
//! CRC32. Recovery resynchronises after damage by looking for the next
//! offset where a record checks out, and would take such a record for mail.
//! A client does not know the checksum keyed with a salt it never sees.
//!
//! How much that is worth: 32 bits per record length, not the salt's 128.
//! A CRC is affine: for payloads of one length, `crc32(salt ‖ payload)` is
//! the unkeyed CRC of the payload XOR a 32-bit value that depends only on
//! the salt and that length. A forged record is therefore a guess of one
//! 32-bit value (one chance in 2^32 per try), and anyone who learned the
//! checksum of one record of some length (read from the spool) can forge
//! any record of that length. CRC32 is not a MAC: it guards against forged
//! records in bodies, not against anyone who can read the spool directory.
//!
//! Trusts: the kernel's `/dev/urandom`; the salt file is ours (mode 0600).
//!
//! Invariants:
//! - A spool directory with no segment files gets a fresh salt, written to
//!   `salt.tmp`, synced, renamed to [`SALT_FILE`] and the directory synced,
//!   before any segment exists; so no segment is ever written with a salt
//!   that is not durably on disk, and a crash leaves no half-written salt.
//! - A directory that has segments but no salt file is a *legacy* spool
//!   (written before salts existed): its salt is empty, which is the old
//!   unkeyed format, so an upgraded server keeps reading its old mail.
//!   Unless its records do not check out unkeyed: then the salt file was
//!   lost, and the spool is refused rather than opened, since recovery
//!   would take every record for damage and quarantine it. An empty salt
//!   file says "legacy" explicitly (the way out should a legacy spool's
//!   every segment start with a damaged record).
//! - A legacy spool switches to a fresh salt at a start-up that finds no
//!   message with work left and no unsaved damage: its segments, holding
//!   nothing needed, are deleted first, so no segment is ever read with a
//!   salt it was not written with.
//! - A salt file of any other length than [`SALT_LEN`] (or empty) is
//!   refused (the spool does not open): guessing would make every record
//!   look damaged.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

pub(crate) use crate::record::Salt;
use crate::record::{self, HEADER_LEN};
use crate::{replace_file, segment_path, sync_dir};

/// The salt's file name in the spool directory.
pub(crate) const SALT_FILE: &str = "salt";
/// Bytes of salt.
pub(crate) const SALT_LEN: usize = 16;

/// The salt of the spool in `dir`, whose segments are `segments`: read
/// from its salt file, empty for a legacy spool (segments and no file), or
/// created for a new one.
pub(crate) fn load_or_create(dir: &Path, segments: &[u32]) -> io::Result<Salt> {
    let path = dir.join(SALT_FILE);
    match std::fs::read(&path) {
        Ok(bytes) if bytes.len() == SALT_LEN || bytes.is_empty() => Ok(Salt::from_bytes(bytes)),
        Ok(bytes) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} holds {} bytes, not {SALT_LEN}: without the right salt no \
                 record checks out, so the spool is not opened",
                path.display(),
                bytes.len()
            ),
        )),
        Err(err) if err.kind() == io::ErrorKind::NotFound && segments.is_empty() => create(dir),
        Err(err) if err.kind() == io::ErrorKind::NotFound => legacy_or_lost(dir, segments),
        Err(err) => Err(err),
    }
}

/// The salt of a spool with segments and no salt file: empty if it is a
/// legacy spool, which is so if the first whole record of some segment
/// checks out unkeyed, or if no segment starts with a whole record (there
/// is nothing to tell by). Otherwise its salt file was lost: refused.
fn legacy_or_lost(dir: &Path, segments: &[u32]) -> io::Result<Salt> {
    let legacy = Salt::legacy();
    let mut judged = false;
    for &segment in segments {
        let Some(first) = first_record(&segment_path(dir, segment))? else {
            continue;
        };
        if record::decode(&legacy, &first).is_ok() {
            return Ok(legacy);
        }
        judged = true;
    }
    if !judged {
        return Ok(legacy);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is missing but the spool's records are keyed: restore the \
             salt file (opening without it would quarantine every record); \
             if the spool predates salts and every segment starts with a \
             damaged record, an empty salt file opens it unkeyed",
            dir.join(SALT_FILE).display()
        ),
    ))
}

/// The bytes of the first record of a segment file, if it is whole.
fn first_record(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let mut file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut header = [0u8; HEADER_LEN];
    if size < HEADER_LEN as u64 {
        return Ok(None);
    }
    file.read_exact(&mut header)?;
    let len = u32::from_le_bytes([header[5], header[6], header[7], header[8]]) as u64;
    if HEADER_LEN as u64 + len > size {
        return Ok(None);
    }
    let mut record = header.to_vec();
    record.resize(HEADER_LEN + len as usize, 0);
    file.read_exact(&mut record[HEADER_LEN..])?;
    Ok(Some(record))
}

/// What recovery found, as far as a legacy spool's switch to a salt
/// depends on it (recovery computes it: this module knows nothing of its
/// state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LegacyVerdict {
    /// Keyed already, or holding mail (a message with work left, or
    /// damage that could not be set aside): stays as it is.
    Keep,
    /// A legacy spool that holds nothing needed: its segments, oldest
    /// first, may go.
    Empty(Vec<u32>),
}

/// How far a switch went: the segments deleted, and the new salt once
/// every one of them is gone.
#[derive(Debug, Default)]
pub(crate) struct Switch {
    pub deleted: Vec<u32>,
    pub salt: Option<Salt>,
}

/// Switches a legacy spool that holds no mail ([`LegacyVerdict::Empty`])
/// to a fresh salt: deletes its segments oldest first, then creates the
/// salt. If a segment cannot be deleted the spool stays legacy (those
/// already deleted are said, for recovery's index).
pub(crate) fn upgrade_when_empty(dir: &Path, verdict: LegacyVerdict) -> io::Result<Switch> {
    let LegacyVerdict::Empty(segments) = verdict else {
        return Ok(Switch::default());
    };
    let mut switch = Switch::default();
    for segment in segments {
        match std::fs::remove_file(segment_path(dir, segment)) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Ok(switch),
            _ => switch.deleted.push(segment),
        }
    }
    sync_dir(dir)?;
    switch.salt = Some(create(dir)?);
    Ok(switch)
}

/// Writes a fresh random salt durably (mode 0600) and returns it.
fn create(dir: &Path) -> io::Result<Salt> {
    let mut bytes = vec![0u8; SALT_LEN];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    replace_file(dir, SALT_FILE, &bytes, 0o600)?;
    Ok(Salt::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_is_keyed() {
        let payload = b"a record payload";
        assert_eq!(Salt::legacy().checksum(payload), crc32fast::hash(payload));
        let salt = Salt::from_bytes(vec![7; SALT_LEN]);
        assert_ne!(salt.checksum(payload), crc32fast::hash(payload));
        let mut joined = vec![7; SALT_LEN];
        joined.extend_from_slice(payload);
        assert_eq!(salt.checksum(payload), crc32fast::hash(&joined));
    }
}
