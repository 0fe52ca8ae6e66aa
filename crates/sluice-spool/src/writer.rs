//! The writer thread: group commit, the free-space reserve, segment
//! rotation, reclaiming and (in `compact`) compaction.
//!
//! Trusts: recovery's index of live messages and its list of pinned
//! segments; the free-space figure the disk probe reports.
//!
//! Invariants:
//! - A store is acknowledged only after its record is written and synced;
//!   the index learns of records and outcomes only once they are synced.
//! - Stores are refused rather than written into the reserve; outcome
//!   records are always attempted (in the current segment if rotating
//!   fails) and kept for retry until written.
//! - Records are only ever appended to the current segment, which is never
//!   one that existed before start-up; a failed write is cut back off.
//! - A segment is deleted only when it is not the current one, is not
//!   pinned, holds no live message and every older segment is gone.
//! - Stores hold at most [`STORE_PERMITS`] places in the queue (a permit
//!   travels with each store and is released once it is answered), so
//!   outcome records always have the rest: a blocking outcome send waits
//!   only while at least `QUEUE_CAPACITY - STORE_PERMITS` outcome records
//!   are queued, that is while the writer is behind on outcomes.
//! - After taking a batch off the queue the writer wakes the stores that
//!   found it full; when it stops, it closes the permits and wakes them
//!   again, so no store waits for a writer that is gone.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::index::{LiveIndex, LiveMsg};
use crate::record::{self, Envelope};
use crate::recover::RecoveredState;
use crate::salt::Salt;
use crate::space::Disk;

mod compact;
use crate::{segment_path, BodyRef, SegmentReader, SpoolConfig, SpoolError, SpoolStats};

/// Stop gathering a batch past this many bytes, so one commit stays short.
const MAX_BATCH_BYTES: usize = 32 << 20;

/// How long unwritten outcome records wait for new traffic before the
/// writer retries them on its own.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Commands waiting for the writer at most; senders wait beyond it.
#[cfg(not(test))]
const QUEUE_CAPACITY: usize = 16_384;
#[cfg(test)]
pub(crate) const QUEUE_CAPACITY: usize = 16;

/// Stores queued or being written at most; half the queue, so that
/// outcome records always have the other half.
pub(crate) const STORE_PERMITS: usize = QUEUE_CAPACITY / 2;

/// Where a store's answer goes, with the permit it holds until then.
pub(crate) struct StoreReply {
    pub tx: tokio::sync::oneshot::Sender<Result<BodyRef, SpoolError>>,
    pub permit: OwnedSemaphorePermit,
}

impl StoreReply {
    /// Answers the store and releases its permit.
    fn send(self, result: Result<BodyRef, SpoolError>) -> Result<(), ()> {
        let sent = self.tx.send(result).map_err(|_| ());
        drop(self.permit);
        sent
    }
}

/// The sending side of the writer's queue, shared by every spool handle.
#[derive(Clone)]
pub(crate) struct Queue {
    pub tx: mpsc::SyncSender<Command>,
    /// [`STORE_PERMITS`] permits; closed when the writer stops.
    pub store_permits: Arc<Semaphore>,
    /// Woken when the writer has taken a batch off the queue, and when it
    /// stops.
    pub room: Arc<Notify>,
}

pub(crate) enum Command {
    Store {
        envelope: Envelope,
        body: Arc<Vec<u8>>,
        reply: StoreReply,
    },
    Outcome(Outcome),
    Shutdown {
        reply: mpsc::Sender<()>,
    },
}

/// Recipients of one message that reached a final state, or mark bits
/// the daemon set on it (either may be empty): both are small records
/// about a live message, written and retried alike.
pub(crate) struct Outcome {
    pub id: u64,
    pub recipients: Vec<u16>,
    /// The whole message is done.
    pub complete: bool,
    /// Mark bits to add (0: none).
    pub marks: u32,
    /// A delivery attempt to note.
    pub attempt: Option<Box<crate::Attempt>>,
}

/// A store encoded into the batch buffer, awaiting the write.
struct Encoded {
    id: u64,
    msg: LiveMsg,
    reply: StoreReply,
}

/// An outcome encoded into the batch buffer, awaiting the write.
struct Recorded {
    id: u64,
    recipients: Vec<u16>,
    complete: bool,
    marks: u32,
    tried: Option<crate::index::Tried>,
}

struct Writer {
    dir: PathBuf,
    sync: bool,
    segment_bytes: u64,
    /// Free bytes stores must leave for outcome records.
    reserve: u64,
    disk: Disk,
    /// Keys every record's checksum.
    salt: Salt,
    index: LiveIndex,
    /// Segments recovery could not fully save; never reclaimed.
    pinned: BTreeSet<u32>,
    /// Segments holding a live record that no longer checks out; never
    /// compacted.
    uncopyable: BTreeSet<u32>,
    /// The segment being compacted and its live messages not yet copied
    /// (record offset, ID), from one scan of the index (`compact.rs`).
    plan: Option<(u32, std::collections::VecDeque<(u64, u64)>)>,
    current: u32,
    file: File,
    len: u64,
    reader: Arc<SegmentReader>,
    stats: Arc<SpoolStats>,
    /// Outcomes whose write failed; retried with the next batch.
    unwritten: Vec<Outcome>,
    /// Stores that found the queue full wait on this.
    room: Arc<Notify>,
    _lock: File,
}

pub(crate) fn start(
    config: SpoolConfig,
    disk: Disk,
    state: RecoveredState,
    reader: Arc<SegmentReader>,
    lock: File,
    stats: Arc<SpoolStats>,
) -> Result<Queue, SpoolError> {
    let mut index = state.index;
    let current = index.newest_segment().unwrap_or(0) + 1;
    let file = create_segment(&config.dir, current)?;
    index.add_segment(current, 0);
    let mut writer = Writer {
        dir: config.dir,
        sync: config.sync,
        segment_bytes: config.segment_bytes.max(1 << 16),
        reserve: config.reserve_bytes,
        disk,
        salt: state.salt,
        index,
        pinned: state.pinned,
        uncopyable: BTreeSet::new(),
        plan: None,
        current,
        file,
        len: 0,
        reader,
        stats,
        unwritten: Vec::new(),
        room: Arc::new(Notify::new()),
        _lock: lock,
    };
    writer.reclaim();
    let (tx, rx) = mpsc::sync_channel(QUEUE_CAPACITY);
    let queue = Queue {
        tx,
        store_permits: Arc::new(Semaphore::new(STORE_PERMITS)),
        room: writer.room.clone(),
    };
    let (permits, room) = (queue.store_permits.clone(), queue.room.clone());
    std::thread::Builder::new()
        .name("spool-writer".into())
        .spawn(move || {
            writer.run(rx);
            // The queue's receiver is gone: waiting stores see "stopped".
            permits.close();
            room.notify_waiters();
        })?;
    Ok(queue)
}

fn create_segment(dir: &Path, number: u32) -> Result<File, SpoolError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(segment_path(dir, number))
        .map_err(SpoolError::from_io)?;
    sync_dir(dir)?;
    Ok(file)
}

fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    crate::sync_dir(dir).map_err(SpoolError::from_io)
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Command>) {
        let mut batch = Vec::new();
        let mut buf = Vec::with_capacity(1 << 20);
        let mut compacting = self.compaction_due().is_some();
        loop {
            // None: nothing arrived, but there is work of our own to do.
            let first = if compacting {
                match rx.try_recv() {
                    Ok(cmd) => Some(cmd),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => break,
                }
            } else if !self.unwritten.is_empty() {
                match rx.recv_timeout(RETRY_AFTER) {
                    Ok(cmd) => Some(cmd),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(cmd) => Some(cmd),
                    Err(_) => break,
                }
            };
            if let Some(first) = first {
                gather(&rx, first, &mut batch);
                self.room.notify_waiters();
            }
            if let Some(reply) = self.commit(&mut batch, &mut buf) {
                // Release the files and the spool lock before saying we stopped.
                drop(self);
                let _ = reply.send(());
                return;
            }
            compacting = self.compact_step(&mut buf) && self.compaction_due().is_some();
        }
        // Every handle is gone: one last try for what is unwritten.
        if !self.unwritten.is_empty() {
            self.commit(&mut batch, &mut buf);
        }
    }

    /// Writes and syncs one batch; returns the reply channel of a shutdown request.
    fn commit(&mut self, batch: &mut Vec<Command>, buf: &mut Vec<u8>) -> Option<mpsc::Sender<()>> {
        let started = std::time::Instant::now();
        let mut stores = Vec::new();
        let mut outcomes = std::mem::take(&mut self.unwritten);
        let mut shutdown = None;
        for cmd in batch.drain(..) {
            match cmd {
                Command::Store {
                    envelope,
                    body,
                    reply,
                } => stores.push((envelope, body, reply)),
                Command::Outcome(outcome) => outcomes.push(outcome),
                Command::Shutdown { reply } => shutdown = Some(reply),
            }
        }
        buf.clear();
        let encoded = match self.room_for_stores(stores.is_empty()) {
            Ok(room) => self.encode_stores(stores, room, buf),
            Err(err) => {
                for (_, _, reply) in stores {
                    let _ = reply.send(Err(clone_error(&err)));
                }
                Vec::new()
            }
        };
        let recorded = self.encode_outcomes(&outcomes, buf);
        match self.write(buf) {
            Ok(()) => {
                // Write and sync, as the daemon's /metrics shows them.
                metrics::histogram!("sluice_spool_commit_seconds").record(started.elapsed());
                metrics::histogram!("sluice_spool_batch_messages").record(encoded.len() as f64);
                self.apply(buf.len() as u64, encoded, recorded)
            }
            Err(err) => {
                let had_stores = !encoded.is_empty();
                for store in encoded {
                    let _ = store.reply.send(Err(clone_error(&err)));
                }
                if had_stores {
                    // Outcome records are small: try them again alone.
                    buf.clear();
                    let recorded = self.encode_outcomes(&outcomes, buf);
                    if self.write(buf).is_ok() {
                        self.apply(buf.len() as u64, Vec::new(), recorded);
                        return shutdown;
                    }
                }
                self.unwritten = outcomes;
            }
        }
        shutdown
    }

    /// Rotates to a new segment if the current one is full, and says how
    /// many bytes of stores this batch may write without eating into the
    /// reserve. Outcome records need neither: if rotating fails they go to
    /// the current segment, and they may use the reserve.
    fn room_for_stores(&mut self, no_stores: bool) -> Result<u64, SpoolError> {
        if self.len >= self.segment_bytes {
            self.rotate()?;
        }
        if no_stores {
            return Ok(0);
        }
        let free = (self.disk.free_bytes)(&self.dir).map_err(SpoolError::Io)?;
        Ok(free.saturating_sub(self.reserve))
    }

    /// Encodes message records into `buf` (which will be written at
    /// `self.len`), at most `room` bytes of them; refuses the rest with
    /// [`SpoolError::Full`] and those the format cannot hold as invalid.
    fn encode_stores(
        &self,
        stores: Vec<(Envelope, Arc<Vec<u8>>, StoreReply)>,
        room: u64,
        buf: &mut Vec<u8>,
    ) -> Vec<Encoded> {
        let mut encoded = Vec::with_capacity(stores.len());
        for (envelope, body, reply) in stores {
            let record_at = buf.len();
            let body_at = match record::encode_message(&self.salt, &envelope, &body, buf) {
                Ok(_) if buf.len() as u64 > room => {
                    buf.truncate(record_at);
                    let _ = reply.send(Err(SpoolError::Full));
                    continue;
                }
                Ok(body_at) => body_at,
                Err(why) => {
                    let _ = reply.send(Err(SpoolError::Invalid(why)));
                    continue;
                }
            };
            encoded.push(Encoded {
                id: envelope.id,
                msg: LiveMsg {
                    segment: self.current,
                    record: self.len + record_at as u64,
                    record_len: (buf.len() - record_at) as u64,
                    // Fits: see `LiveMsg`.
                    body_at: body_at as u32,
                    done: crate::DoneSet::none(envelope.recipients.len()),
                    marks: 0,
                    flags: envelope.flags,
                    tried: Default::default(),
                },
                reply,
            });
        }
        encoded
    }

    /// Encodes outcome (and marks) records for live messages into `buf`.
    /// A complete message's record also names every recipient not yet
    /// done, so that recovery agrees it is complete. Outcomes for messages that are not
    /// live (already complete) are dropped: completing is idempotent.
    fn encode_outcomes(&self, outcomes: &[Outcome], buf: &mut Vec<u8>) -> Vec<Recorded> {
        let mut recorded = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            let Some(msg) = self.index.get(outcome.id) else {
                continue;
            };
            let mut recipients = outcome.recipients.clone();
            if outcome.complete {
                recipients.extend(msg.open_indices());
                recipients.sort_unstable();
                recipients.dedup();
            }
            if !recipients.is_empty() {
                record::encode_outcome(&self.salt, outcome.id, &recipients, buf);
            }
            // Marks a complete message no longer needs, or has already.
            let marks = match outcome.complete {
                true => 0,
                false => outcome.marks & !msg.marks,
            };
            if marks != 0 {
                record::encode_marks(&self.salt, outcome.id, marks, buf);
            }
            let attempt = outcome.attempt.as_deref().filter(|_| !outcome.complete);
            if let Some(attempt) = attempt {
                record::encode_attempt(&self.salt, outcome.id, attempt, buf);
            }
            recorded.push(Recorded {
                id: outcome.id,
                recipients,
                complete: outcome.complete,
                marks,
                tried: attempt.map(crate::index::Tried::of),
            });
        }
        recorded
    }

    /// Brings the index up to date with a batch that is now on disk.
    fn apply(&mut self, written: u64, encoded: Vec<Encoded>, recorded: Vec<Recorded>) {
        self.len += written;
        self.index.grow(self.current, written);
        let stats = &self.stats;
        stats
            .messages
            .fetch_add(encoded.len() as u64, Ordering::Relaxed);
        let outcome_records = recorded.iter().filter(|r| !r.recipients.is_empty());
        stats
            .outcomes
            .fetch_add(outcome_records.count() as u64, Ordering::Relaxed);
        stats.bytes.fetch_add(written, Ordering::Relaxed);
        if self.sync && written > 0 {
            stats.syncs.fetch_add(1, Ordering::Relaxed);
        }
        for store in encoded {
            let _ = store.reply.send(Ok(store.msg.body_ref(store.id)));
            self.index.insert(store.id, store.msg);
        }
        for outcome in recorded {
            self.index.add_marks(outcome.id, outcome.marks);
            if let Some(tried) = outcome.tried {
                self.index.set_tried(outcome.id, tried);
            }
            let all_done = self.index.record_done(outcome.id, &outcome.recipients);
            if (outcome.complete || all_done) && self.index.remove(outcome.id).is_some() {
                self.reader.settle(outcome.id);
            }
        }
        self.reclaim();
    }

    /// Appends `buf` to the current segment and syncs it. On failure the
    /// segment is cut back so that later records follow whole ones.
    fn write(&mut self, buf: &[u8]) -> Result<(), SpoolError> {
        if buf.is_empty() {
            return Ok(());
        }
        let result = self.write_at_end(buf);
        if result.is_err() && self.file.set_len(self.len).is_err() {
            let _ = self.rotate();
        }
        result
    }

    fn write_at_end(&mut self, buf: &[u8]) -> Result<(), SpoolError> {
        #[cfg(test)]
        if self.disk.take_failure() {
            let half = &buf[..buf.len() / 2];
            self.file.write_all_at(half, self.len)?;
            return Err(SpoolError::Full);
        }
        self.file
            .write_all_at(buf, self.len)
            .map_err(SpoolError::from_io)?;
        if self.sync {
            self.file.sync_data().map_err(SpoolError::from_io)?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), SpoolError> {
        let next = self.current + 1;
        self.file = create_segment(&self.dir, next)?;
        self.current = next;
        self.len = 0;
        self.index.add_segment(next, 0);
        Ok(())
    }

    /// Deletes the oldest segments while they hold no live message.
    fn reclaim(&mut self) {
        let mut removed = false;
        while let Some((oldest, seg)) = self.index.oldest() {
            if oldest == self.current || seg.live != 0 || self.pinned.contains(&oldest) {
                break;
            }
            if std::fs::remove_file(segment_path(&self.dir, oldest)).is_err() {
                break;
            }
            self.reader.forget(oldest);
            self.index.drop_segment(oldest);
            removed = true;
        }
        if removed {
            let _ = sync_dir(&self.dir);
        }
    }
}

/// Adds to `batch` the first command and whatever else is already queued,
/// up to [`MAX_BATCH_BYTES`].
fn gather(rx: &mpsc::Receiver<Command>, first: Command, batch: &mut Vec<Command>) {
    let mut bytes = command_bytes(&first);
    batch.push(first);
    while bytes < MAX_BATCH_BYTES {
        match rx.try_recv() {
            Ok(cmd) => {
                bytes += command_bytes(&cmd);
                batch.push(cmd);
            }
            Err(_) => break,
        }
    }
}

fn command_bytes(cmd: &Command) -> usize {
    match cmd {
        Command::Store { body, .. } => body.len() + 256,
        _ => 32,
    }
}

fn clone_error(err: &SpoolError) -> SpoolError {
    match err {
        SpoolError::Full => SpoolError::Full,
        SpoolError::Io(e) => SpoolError::Io(std::io::Error::new(e.kind(), e.to_string())),
        SpoolError::Stopped => SpoolError::Stopped,
        SpoolError::Locked(p) => SpoolError::Locked(p.clone()),
        SpoolError::Invalid(why) => SpoolError::Invalid(why.clone()),
    }
}
