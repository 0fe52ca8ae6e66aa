//! Sluice's durable spool: an append-only segment log with group commit.
//!
//! # Contract
//! [`Spool::store`] resolves only after the message's record (envelope and
//! body) has been written *and* `fdatasync`ed; that is what lets the SMTP
//! session say `250`. One writer thread owns the log and commits every
//! request that queued up while the previous sync ran with a single sync,
//! so under load one disk flush covers many messages (group commit).
//! At most 8,192 stores are queued or being written at once; further
//! sessions await their turn (first come, first served, woken once, never
//! polling). [`Spool::record_outcome`] is fire-and-forget: its record goes
//! out with the next commit, and is retried on its own (every second) if
//! the write fails; it blocks only while the writer is behind on outcomes
//! (half the writer's queue is theirs alone). Completing a message twice
//! is harmless.
//!
//! # Format
//! The spool directory holds segment files `00000001.seg`, `00000002.seg`, …
//! Each is a sequence of records: `magic u32 | kind u8 | len u32 | crc32 u32 |
//! payload[len]` (little-endian). The checksum is `crc32(salt ‖ payload)`,
//! keyed with 16 secret random bytes kept in the file `salt` (created with
//! the spool, mode 0600), so that bytes a client put in a message body can
//! never pass for a record when recovery resynchronises after damage. A
//! spool written before salts existed (segments but no `salt` file) is read
//! and written with an empty salt, the old plain CRC32, until a start-up
//! finds it holding no mail: its segments are then deleted and a salt
//! created. A `salt` file of the wrong size stops the spool from opening,
//! and so does a missing one when the segments' records are keyed (the
//! file was lost: restore it). Kinds: a *message* (queue ID, arrival,
//! flags, sender, recipients, body, the body last), an *outcome* (queue
//! ID, `u16` indices of recipients that reached a final state) and, since
//! kind 3 was added, *marks* (queue ID, `u32` bits the daemon set on the
//! message after storing it, united at recovery; an older build reads a
//! marks record as damage and quarantines it, losing only the mark) and,
//! since kind 4, *attempts* (queue ID, `u32` count, `u64` Unix seconds of
//! the attempt and of the next one, the deferral reason: the newest one
//! counts; spools without them load as before, and an older build
//! quarantines them, losing only the count and the retry time).
//! Hence at most [`MAX_RECIPIENTS`] recipients and 65,535-byte addresses;
//! anything larger is refused with [`SpoolError::Invalid`], never cut or
//! wrapped.
//! A message is complete once every recipient has an outcome; a complete
//! message's last outcome record names every recipient not yet named.
//!
//! # Reclaiming space
//! A segment is deleted when no live message has its newest copy in it and
//! every older segment is gone; the second rule keeps outcome records alive
//! as long as the messages they refer to. New records always go to a fresh
//! segment after start-up, so a torn tail is never appended to.
//!
//! # Compaction
//! So that one deferred message (or a burst for a next hop that is down)
//! does not pin its segment and every newer one, the writer copies the live
//! messages of the oldest segment forward (record verbatim, then an outcome
//! record with its done recipients and a marks record with its marks) once
//! emptying it would free at least twice the bytes copied: its own size
//! plus that of the dead segments directly behind it. A bounded amount is
//! copied per commit or while idle; the segment then holds nothing live and
//! is reclaimed, with the dead ones behind it. A backlog that is all live is never copied. A message may
//! therefore appear more than once in the log: recovery takes the last
//! copy and unites every outcome and mark recorded for it, wherever it lies.
//! [`BodyRef`]s handed out before a move keep working: the spool looks up
//! the message's new place by its ID.
//!
//! # Damage and quarantine
//! A record whose length or CRC does not check out does not end its
//! segment: recovery copies the damaged bytes to
//! `corrupt/<segment>-<offset>.bin` (synced) and resumes at the next offset
//! where a whole record checks out. Only a torn tail of the newest segment
//! (a write cut short by a crash, never acknowledged) is cut off, after
//! being saved unless it is no longer than a header. A segment whose
//! damaged bytes could not be saved is pinned: never reclaimed. Starting
//! again finds the saved ranges and does not report them twice.
//!
//! # Free-space reserve
//! Stores are refused with [`SpoolError::Full`] when writing them would
//! leave less than [`SpoolConfig::reserve_bytes`] free; outcome records
//! may use the reserve (compaction up to half of it), so a spool that
//! filled up can still record deliveries, reclaim segments and drain.
//!
//! Trust: the files are our own but may be truncated or corrupted by a
//! crash, a full disk or bit rot; nothing read from them is trusted without
//! its CRC. A record whose keyed CRC checks out is trusted: message bodies
//! come from SMTP clients, who do not know the salt.

mod done;
mod durable;
mod idtable;
mod index;
mod reader;
mod record;
mod recover;
mod salt;
mod space;
mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

pub use done::DoneSet;
pub use durable::{replace_file, sync_dir};
pub use idtable::IdTable;
use reader::SegmentReader;
pub use record::{Attempt, Dsn, Envelope, Unfit, MAX_REASON, MAX_RECIPIENTS, SPOOL_FLAGS};
pub use space::{filesystem_space, FsSpace};

/// Errors the spool reports; the SMTP layer maps them to replies
/// (`Invalid` is permanent for that message, the others are temporary).
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("spool is full (free space below the reserve, or none left)")]
    Full,
    #[error("spool writer has stopped")]
    Stopped,
    #[error("spool directory {0} is locked by another process")]
    Locked(PathBuf),
    /// The message cannot be represented in the spool's format (too many
    /// recipients, an address over 65,535 bytes, …). Nothing was written.
    #[error("message refused by the spool: {0}")]
    Invalid(#[from] record::Unfit),
}

impl SpoolError {
    fn from_io(err: std::io::Error) -> Self {
        // Out of space, out of quota, or past the file size limit: all "full".
        if matches!(
            err.raw_os_error(),
            Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
        ) {
            SpoolError::Full
        } else {
            SpoolError::Io(err)
        }
    }
}

/// Where a stored body lives, to read it back for delivery. Set by the
/// spool; stays valid while the message is live even if compaction moves
/// the message (the spool looks up its new place by `id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyRef {
    /// The message's queue ID.
    pub id: u64,
    pub segment: u32,
    /// Offset of the message's record in the segment (its envelope).
    pub record: u64,
    pub offset: u64,
    pub len: u64,
}

/// A message found in the spool at start-up that still has work to do.
#[derive(Debug)]
pub struct Recovered {
    /// Queue ID. The envelope is not kept (a big spool would fill memory
    /// with them): read it back with [`Spool::read_envelope`] when needed.
    pub id: u64,
    pub body: BodyRef,
    /// Per recipient: whether a final outcome was already recorded.
    pub done: DoneSet,
    /// The union of the mark bits recorded for it ([`Spool::record_marks`]).
    pub marks: u32,
    /// Its envelope's flags ([`Envelope::flags`]), as stored.
    pub flags: u32,
    /// The newest attempt recorded for it ([`Spool::record_attempt`]);
    /// none for mail never deferred, or stored by a build without them.
    pub attempt: Option<Attempt>,
}

/// What start-up found, for the log.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub segments: usize,
    pub messages_pending: usize,
    pub messages_complete: usize,
    /// One line per damaged range found this time: segment, offset,
    /// length, torn or corrupt, and what became of it (quarantined in
    /// `corrupt/`, cut off, or not saved and its segment pinned).
    pub damage: Vec<String>,
    /// Damaged ranges found again that an earlier start-up already
    /// quarantined; they are not repeated in `damage`.
    pub known_damage: usize,
    /// Segments kept on disk because damaged bytes in them could not be
    /// quarantined; they and every newer segment are not reclaimed.
    pub pinned: Vec<u32>,
}

#[derive(Debug, Clone)]
pub struct SpoolConfig {
    pub dir: PathBuf,
    /// Sync before acknowledging. Turning this off loses acknowledged mail
    /// on power failure; it exists only for operators who accept that.
    pub sync: bool,
    /// Start a new segment once the current one is this large.
    pub segment_bytes: u64,
    /// Free space kept for outcome records: a store is refused with
    /// [`SpoolError::Full`] when writing it would leave less than this many
    /// bytes free on the spool's file system. Outcome records (and so
    /// completion and reclaiming) may use the reserve, so a spool that
    /// filled up can always drain. The daemon fits it to the file system
    /// (two segments, at least 4 MiB or an eighth of the file system).
    pub reserve_bytes: u64,
}

/// Handle to the spool; cheap to clone, shared by every session.
#[derive(Clone)]
pub struct Spool {
    queue: writer::Queue,
    reader: Arc<SegmentReader>,
    next_id: Arc<AtomicU64>,
    stats: Arc<SpoolStats>,
    /// Told of every [`Spool::record_outcome`] (set once).
    observer: Arc<std::sync::OnceLock<OutcomeObserver>>,
}

/// Called with each outcome as it is recorded: queue ID, recipients,
/// complete. It runs on the caller's thread and must not block.
/// Told of each outcome (id, final recipients, complete) and of each
/// mark recorded (id, no recipients, false, the mark bits; 0 for outcomes).
pub type OutcomeObserver = Arc<dyn Fn(u64, &[u16], bool, u32) + Send + Sync>;

/// Counters that show group commit at work.
#[derive(Debug, Default)]
pub struct SpoolStats {
    /// Messages stored.
    pub messages: AtomicU64,
    /// Disk syncs (one per batch or compaction step).
    pub syncs: AtomicU64,
    /// Bytes written.
    pub bytes: AtomicU64,
    /// Outcome records written.
    pub outcomes: AtomicU64,
    /// Live messages copied forward by compaction.
    pub compacted: AtomicU64,
}

impl Spool {
    /// Opens (creating if needed) the spool, recovers what it holds and
    /// starts the writer thread.
    pub fn open(
        config: SpoolConfig,
    ) -> Result<(Spool, Vec<Recovered>, RecoveryReport), SpoolError> {
        Spool::open_with(config, space::Disk::real())
    }

    /// [`Spool::open`] with a given view of the disk (tests simulate a
    /// full one).
    pub(crate) fn open_with(
        config: SpoolConfig,
        disk: space::Disk,
    ) -> Result<(Spool, Vec<Recovered>, RecoveryReport), SpoolError> {
        std::fs::create_dir_all(&config.dir)?;
        let lock = lock_dir(&config.dir)?;
        let segments = recover::list_segments(&config.dir)?;
        let salt = salt::load_or_create(&config.dir, &segments)?;
        let (recovered, report, mut state) = recover::recover(&config.dir, salt)?;
        let verdict = state.legacy_verdict(recovered.len());
        state.switched(salt::upgrade_when_empty(&config.dir, verdict)?);
        let max_id = state.max_id;
        let reader = Arc::new(SegmentReader::new(config.dir.clone(), state.salt.clone()));
        let stats = Arc::new(SpoolStats::default());
        let queue = writer::start(config, disk, state, reader.clone(), lock, stats.clone())?;
        let now_micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let spool = Spool {
            queue,
            reader,
            next_id: Arc::new(AtomicU64::new(now_micros.max(max_id + 1))),
            stats,
            observer: Arc::default(),
        };
        Ok((spool, recovered, report))
    }

    pub fn stats(&self) -> &SpoolStats {
        &self.stats
    }

    /// A new queue ID, unique across restarts of this spool: above every
    /// ID any record (message or outcome) held at start-up, even if the
    /// clock stepped back, and otherwise the clock in microseconds.
    pub fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Stores a message durably. Resolves once it is synced to disk.
    pub async fn store(
        &self,
        envelope: Envelope,
        body: Arc<Vec<u8>>,
    ) -> Result<BodyRef, SpoolError> {
        // At most `STORE_PERMITS` stores are queued or being written at
        // once; a session beyond that awaits a permit, first come first
        // served, and is woken once, when it gets one.
        let permit = (self.queue.store_permits.clone())
            .acquire_owned()
            .await
            .map_err(|_| SpoolError::Stopped)?;
        let (tx, wait) = tokio::sync::oneshot::channel();
        let cmd = writer::Command::Store {
            envelope,
            body,
            reply: writer::StoreReply { tx, permit },
        };
        self.send_store(cmd).await?;
        wait.await.map_err(|_| SpoolError::Stopped)?
    }

    /// Queues a store command. Stores take at most half the queue, so there
    /// is room unless outcome records fill the other half and more; then
    /// it waits until the writer takes its next batch off the queue (the
    /// writer wakes such waiters after every batch, and when it stops).
    async fn send_store(&self, mut cmd: writer::Command) -> Result<(), SpoolError> {
        loop {
            let mut room = std::pin::pin!(self.queue.room.notified());
            // Registered before trying, so a wake-up in between is not lost.
            room.as_mut().enable();
            match self.queue.tx.try_send(cmd) {
                Ok(()) => return Ok(()),
                Err(mpsc::TrySendError::Full(back)) => cmd = back,
                Err(mpsc::TrySendError::Disconnected(_)) => return Err(SpoolError::Stopped),
            }
            room.await;
        }
    }

    /// Records that these recipients reached a final state (delivered or
    /// bounced). `complete` says the whole message is done, so its space
    /// may be reclaimed; a message whose every recipient is done is
    /// complete too. Completing twice is harmless. Written with the next
    /// group commit. The writer finds the message by `id`.
    ///
    /// Does not wait, except while the writer's bounded queue is full:
    /// stores hold at most half of it, so that happens only while the
    /// other half, thousands of outcome records, waits for the writer, that
    /// is while the writer is behind on outcomes. The caller (the
    /// scheduler) then blocks until the writer takes its next batch; that
    /// is the back-pressure that keeps outcomes from growing memory.
    pub fn record_outcome(&self, id: u64, recipients: Vec<u16>, complete: bool) {
        if let Some(observe) = self.observer.get() {
            observe(id, &recipients, complete, 0);
        }
        let _ = self
            .queue
            .tx
            .send(writer::Command::Outcome(writer::Outcome {
                id,
                recipients,
                complete,
                marks: 0,
                attempt: None,
            }));
    }

    /// Sets what is told of every outcome recorded from now on (a
    /// cluster node forwards them to the peer holding a copy). Only the
    /// first call counts.
    pub fn observe_outcomes(&self, observer: OutcomeObserver) {
        let _ = self.observer.set(observer);
    }

    /// Records mark bits for a live message: facts the daemon learns after
    /// the store and must not forget across a restart (that the sender
    /// was warned about a delay, …). Bits are only ever added; recovery
    /// hands back their union in [`Recovered::marks`], and compaction
    /// carries them with the message. Like [`Spool::record_outcome`] it
    /// does not wait (except for back-pressure) and is written with the
    /// next group commit, after everything already queued: a mark
    /// recorded once a store has resolved is never durable before it.
    /// Marks for a message that is no longer live are dropped.
    pub fn record_marks(&self, id: u64, marks: u32) {
        if let Some(observe) = self.observer.get() {
            observe(id, &[], false, marks);
        }
        let _ = self
            .queue
            .tx
            .send(writer::Command::Outcome(writer::Outcome {
                id,
                recipients: Vec::new(),
                complete: false,
                marks,
                attempt: None,
            }));
    }

    /// Records a delivery attempt that left message `id` waiting: the
    /// count, when, when the next is due, why. Only the newest counts;
    /// recovery hands it back in [`Recovered::attempt`] and compaction
    /// carries it (without its reason) with the message. Written like
    /// [`Spool::record_outcome`]: no wait, next group commit; dropped for
    /// a message that is no longer live. Not told to the outcome observer.
    pub fn record_attempt(&self, id: u64, attempt: Attempt) {
        let _ = self
            .queue
            .tx
            .send(writer::Command::Outcome(writer::Outcome {
                id,
                recipients: Vec::new(),
                complete: false,
                marks: 0,
                attempt: Some(Box::new(attempt)),
            }));
    }

    /// Reads a stored body back (blocking; call from a blocking context).
    pub fn read_body(&self, body: BodyRef) -> std::io::Result<Vec<u8>> {
        self.reader.read(body)
    }

    /// Reads back the envelope of the message `body` belongs to, checking
    /// the whole record's CRC (blocking; call from a blocking context).
    /// Follows the message if compaction moved it.
    pub fn read_envelope(&self, body: BodyRef) -> std::io::Result<Envelope> {
        self.reader.read_envelope(body)
    }

    /// Flushes outstanding records and stops the writer thread.
    pub fn shutdown(&self) {
        let (reply, wait) = mpsc::channel();
        if self
            .queue
            .tx
            .send(writer::Command::Shutdown { reply })
            .is_ok()
        {
            let _ = wait.recv();
        }
    }
}

pub(crate) fn segment_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("{segment:08}.seg"))
}

/// Takes an exclusive lock (`flock` on Linux) so two servers never share
/// one spool. The lock lives as long as the returned file.
fn lock_dir(dir: &Path) -> Result<File, SpoolError> {
    let file = File::create(dir.join("spool.lock"))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(SpoolError::Locked(dir.to_path_buf())),
        Err(std::fs::TryLockError::Error(err)) => Err(SpoolError::Io(err)),
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
