//! The writer thread (group commit) and start-up recovery.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use crate::record::{self, Damage, Envelope, Record};
use crate::{
    segment_path, BodyRef, Recovered, RecoveryReport, SegmentReader, SpoolConfig, SpoolError,
    SpoolStats,
};

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

/// What recovery hands to the writer.
pub(crate) struct RecoveredState {
    pub max_id: u64,
    /// Live (incomplete) message count per existing segment.
    live: BTreeMap<u32, usize>,
}

pub(crate) fn recover(
    dir: &Path,
) -> Result<(Vec<Recovered>, RecoveryReport, RecoveredState), SpoolError> {
    let mut numbers: Vec<u32> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".seg")?.parse().ok()
        })
        .collect();
    numbers.sort_unstable();
    let mut report = RecoveryReport {
        segments: numbers.len(),
        ..Default::default()
    };
    let mut messages: HashMap<u64, Recovered> = HashMap::new();
    let mut max_id = 0;
    for (i, &segment) in numbers.iter().enumerate() {
        let path = segment_path(dir, segment);
        let data = std::fs::read(&path)?;
        let mut pos = 0;
        while pos < data.len() {
            match record::decode(&data[pos..]) {
                Ok((
                    Record::Message {
                        envelope,
                        body_at,
                        body_len,
                    },
                    len,
                )) => {
                    max_id = max_id.max(envelope.id);
                    let done = vec![false; envelope.recipients.len()];
                    let body = BodyRef {
                        segment,
                        offset: (pos + body_at) as u64,
                        len: body_len,
                    };
                    messages.insert(
                        envelope.id,
                        Recovered {
                            envelope,
                            body,
                            done,
                        },
                    );
                    pos += len;
                }
                Ok((Record::Outcome { id, recipients }, len)) => {
                    if let Some(msg) = messages.get_mut(&id) {
                        for r in recipients {
                            if let Some(slot) = msg.done.get_mut(r as usize) {
                                *slot = true;
                            }
                        }
                    }
                    pos += len;
                }
                Err(damage) => {
                    let what = match damage {
                        Damage::Torn => "torn record".to_string(),
                        Damage::Corrupt(why) => format!("corrupt record ({why})"),
                    };
                    report.damage.push(format!(
                        "{}: {what} at offset {pos}; {} bytes after it ignored",
                        path.display(),
                        data.len() - pos
                    ));
                    if i + 1 == numbers.len() {
                        // The newest segment's tail is a write cut short by a crash.
                        let file = OpenOptions::new().write(true).open(&path)?;
                        file.set_len(pos as u64)?;
                        file.sync_all()?;
                    }
                    break;
                }
            }
        }
    }
    let mut live: BTreeMap<u32, usize> = numbers.iter().map(|&n| (n, 0)).collect();
    let mut pending: Vec<Recovered> = Vec::new();
    for msg in messages.into_values() {
        if msg.done.iter().all(|d| *d) {
            report.messages_complete += 1;
        } else {
            *live.entry(msg.body.segment).or_default() += 1;
            pending.push(msg);
        }
    }
    pending.sort_by_key(|m| m.envelope.id);
    report.messages_pending = pending.len();
    Ok((pending, report, RecoveredState { max_id, live }))
}

struct Writer {
    dir: PathBuf,
    sync: bool,
    segment_bytes: u64,
    live: BTreeMap<u32, usize>,
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
    File::open(dir)?.sync_all().map_err(SpoolError::from_io)
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
                    let body_at = record::encode_message(&envelope, &body, buf);
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
            if oldest == self.current || live > 0 {
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
    }
}
