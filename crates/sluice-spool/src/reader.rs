//! Reading bodies back for delivery, from any thread, while the writer
//! appends, relocates and deletes.
//!
//! Trusts: the writer to publish a message's new place (`relocate`) before
//! it deletes the segment that held the old one, and to call `settle` only
//! once the message is complete.
//!
//! Invariants: a `BodyRef` handed out for a live message stays readable
//! however often compaction moves the message. Resolving a reference and
//! opening its segment happen under one lock, so a reader either sees the
//! new place or opens the old file before it is unlinked (and an open
//! descriptor keeps the bytes readable).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::record::{self, Damage, Record};
use crate::salt::Salt;
use crate::{segment_path, BodyRef, Envelope, IdTable};

/// Holds open read handles to segments so delivery can `pread` bodies.
pub(crate) struct SegmentReader {
    dir: PathBuf,
    salt: Salt,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: HashMap<u32, Arc<File>>,
    /// Where compaction moved live messages, by queue ID (an `IdTable`:
    /// a drain after a long outage may move hundreds of thousands).
    moved: IdTable<BodyRef>,
}

impl SegmentReader {
    pub fn new(dir: PathBuf, salt: Salt) -> SegmentReader {
        SegmentReader {
            dir,
            salt,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current place of `body` and an open handle to its segment.
    pub fn locate(&self, body: BodyRef) -> std::io::Result<(BodyRef, Arc<File>)> {
        let mut state = self.state();
        let body = state.moved.get(body.id).copied().unwrap_or(body);
        if let Some(file) = state.open.get(&body.segment) {
            return Ok((body, file.clone()));
        }
        let file = Arc::new(File::open(segment_path(&self.dir, body.segment))?);
        state.open.insert(body.segment, file.clone());
        Ok((body, file))
    }

    pub fn read(&self, body: BodyRef) -> std::io::Result<Vec<u8>> {
        let (body, file) = self.locate(body)?;
        let mut buf = vec![0u8; body.len as usize];
        file.read_exact_at(&mut buf, body.offset)?;
        Ok(buf)
    }

    /// Reads and checks the whole message record `body` belongs to (the
    /// body is the last field of its record) and returns its envelope.
    pub fn read_envelope(&self, body: BodyRef) -> std::io::Result<Envelope> {
        let (body, file) = self.locate(body)?;
        let invalid =
            |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
        let Some(body_at) = body.offset.checked_sub(body.record) else {
            return Err(invalid("body reference before its record"));
        };
        let mut buf = vec![0u8; (body_at + body.len) as usize];
        file.read_exact_at(&mut buf, body.record)?;
        match record::decode(&self.salt, &buf) {
            Ok((Record::Message { envelope, .. }, len))
                if len == buf.len() && envelope.id == body.id =>
            {
                Ok(envelope)
            }
            Ok(_) => Err(invalid("not the message record of this body")),
            Err(Damage::Torn) => Err(invalid("message record cut short")),
            Err(Damage::Corrupt(why)) => Err(invalid(why)),
        }
    }

    /// Publishes a live message's new place after compaction copied it.
    pub fn relocate(&self, to: BodyRef) {
        self.state().moved.insert(to.id, to);
    }

    /// Forgets where a completed message moved.
    pub fn settle(&self, id: u64) {
        self.state().moved.remove(id);
    }

    /// Drops the handle to a deleted segment.
    pub fn forget(&self, segment: u32) {
        self.state().open.remove(&segment);
    }
}
