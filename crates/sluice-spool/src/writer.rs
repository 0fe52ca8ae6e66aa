//! The writer thread: group commit, segment rotation and reclaiming.
//!
//! Trusts: recovery's account of which segments hold live messages and
//! which are pinned.
//!
//! Invariants:
//! - A store is acknowledged only after its record is written and synced.
//! - Records are only ever appended to the current segment, which is never
//!   one that existed before start-up.
//! - A segment is deleted only when it is not the current one, is not
//!   pinned, holds no live message and every older segment is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use crate::record::{self, Envelope};
use crate::recover::RecoveredState;
use crate::{segment_path, BodyRef, SegmentReader, SpoolConfig, SpoolError, SpoolStats};

/// Stop gathering a batch past this many bytes, so one commit stays short.
const MAX_BATCH_BYTES: usize = 32 << 20;

pub(crate) enum Command {
    Store {
        envelope: Envelope,
        body: Arc<Vec<u8>>,
        reply: tokio::sync::oneshot::Sender<Result<BodyRef, SpoolError>>,
    },
    Outcome {
        id: u64,
        segment: u32,
        recipients: Vec<u16>,
        complete: bool,
    },
    Shutdown {
        reply: mpsc::Sender<()>,
    },
}

struct Writer {
    dir: PathBuf,
    sync: bool,
    segment_bytes: u64,
    live: BTreeMap<u32, usize>,
    /// Segments recovery could not fully save; never reclaimed.
    pinned: BTreeSet<u32>,
    current: u32,
    file: File,
    len: u64,
    reader: Arc<SegmentReader>,
    stats: Arc<SpoolStats>,
    /// Outcome records whose write failed; retried with the next batch.
    unwritten: Vec<Command>,
    _lock: File,
}

pub(crate) fn start(
    config: SpoolConfig,
    state: RecoveredState,
    reader: Arc<SegmentReader>,
    lock: File,
    stats: Arc<SpoolStats>,
) -> Result<mpsc::Sender<Command>, SpoolError> {
    let current = state.live.keys().next_back().copied().unwrap_or(0) + 1;
    let file = create_segment(&config.dir, current)?;
    let mut live = state.live;
    live.insert(current, 0);
    let mut writer = Writer {
        dir: config.dir,
        sync: config.sync,
        segment_bytes: config.segment_bytes.max(1 << 16),
        live,
        pinned: state.pinned,
        current,
        file,
        len: 0,
        reader,
        stats,
        unwritten: Vec::new(),
        _lock: lock,
    };
    writer.reclaim();
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("spool-writer".into())
        .spawn(move || writer.run(rx))?;
    Ok(tx)
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
        while let Ok(first) = rx.recv() {
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
            if let Some(reply) = self.commit(&mut batch, &mut buf) {
                // Release the files and the spool lock before saying we stopped.
                drop(self);
                let _ = reply.send(());
                return;
            }
        }
    }

    /// Writes and syncs one batch; returns the reply channel of a shutdown request.
    fn commit(&mut self, batch: &mut Vec<Command>, buf: &mut Vec<u8>) -> Option<mpsc::Sender<()>> {
        if self.len >= self.segment_bytes {
            if let Err(err) = self.rotate() {
                return self.fail_batch(batch, &err);
            }
        }
        buf.clear();
        let base = self.len;
        let mut stored = Vec::new();
        let mut shutdown = None;
        let mut outcomes = std::mem::take(&mut self.unwritten);
        for cmd in batch.drain(..) {
            match cmd {
                Command::Store {
                    envelope,
                    body,
                    reply,
                } => {
                    let record_at = buf.len();
                    let body_at = match record::encode_message(&envelope, &body, buf) {
                        Ok(body_at) => body_at,
                        Err(why) => {
                            let _ = reply.send(Err(SpoolError::Invalid(why)));
                            continue;
                        }
                    };
                    let body_ref = BodyRef {
                        segment: self.current,
                        offset: base + (record_at + body_at) as u64,
                        len: body.len() as u64,
                    };
                    stored.push((reply, body_ref));
                }
                Command::Outcome { .. } => outcomes.push(cmd),
                Command::Shutdown { reply } => shutdown = Some(reply),
            }
        }
        for cmd in &outcomes {
            if let Command::Outcome { id, recipients, .. } = cmd {
                record::encode_outcome(*id, recipients, buf);
            }
        }
        let result = self.write(base, buf);
        match result {
            Ok(()) => {
                self.len += buf.len() as u64;
                self.stats
                    .messages
                    .fetch_add(stored.len() as u64, Ordering::Relaxed);
                self.stats
                    .bytes
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                if self.sync && !buf.is_empty() {
                    self.stats.syncs.fetch_add(1, Ordering::Relaxed);
                }
                *self.live.entry(self.current).or_default() += stored.len();
                for (reply, body_ref) in stored {
                    let _ = reply.send(Ok(body_ref));
                }
                for cmd in outcomes {
                    if let Command::Outcome {
                        segment,
                        complete: true,
                        ..
                    } = cmd
                    {
                        if let Some(n) = self.live.get_mut(&segment) {
                            *n = n.saturating_sub(1);
                        }
                    }
                }
                self.reclaim();
            }
            Err(err) => {
                // Cut the partial write off so later records stay readable.
                if self.file.set_len(base).is_err() {
                    let _ = self.rotate();
                }
                for (reply, _) in stored {
                    let _ = reply.send(Err(clone_error(&err)));
                }
                self.unwritten = outcomes;
            }
        }
        shutdown
    }

    /// Refuses every store of a batch that could not be written; outcome
    /// records wait for the next batch. Returns a pending shutdown's reply.
    fn fail_batch(
        &mut self,
        batch: &mut Vec<Command>,
        err: &SpoolError,
    ) -> Option<mpsc::Sender<()>> {
        let mut shutdown = None;
        for cmd in batch.drain(..) {
            match cmd {
                Command::Store { reply, .. } => {
                    let _ = reply.send(Err(clone_error(err)));
                }
                Command::Outcome { .. } => self.unwritten.push(cmd),
                Command::Shutdown { reply } => shutdown = Some(reply),
            }
        }
        shutdown
    }

    fn write(&mut self, at: u64, buf: &[u8]) -> Result<(), SpoolError> {
        if buf.is_empty() {
            return Ok(());
        }
        self.file
            .write_all_at(buf, at)
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
        self.live.insert(next, 0);
        Ok(())
    }

    /// Deletes the oldest segments while they hold no live message.
    fn reclaim(&mut self) {
        let mut removed = false;
        while let Some((&oldest, &live)) = self.live.iter().next() {
            if oldest == self.current || live > 0 || self.pinned.contains(&oldest) {
                break;
            }
            if std::fs::remove_file(segment_path(&self.dir, oldest)).is_err() {
                break;
            }
            self.reader.forget(oldest);
            self.live.remove(&oldest);
            removed = true;
        }
        if removed {
            let _ = sync_dir(&self.dir);
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
