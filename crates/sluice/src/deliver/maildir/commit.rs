//! Group commit for Maildir deliveries, as the spool group-commits
//! receipts: workers hand their messages here. A writing thread takes
//! whatever has gathered and writes each into its mailbox's `tmp/`
//! (creating new mailboxes); a syncing thread takes whatever has been
//! written meanwhile and makes it durable with two syncs per file system
//! instead of two per message (the two threads overlap: one writes the
//! next batch while the other waits for the disk):
//!
//! 1. `syncfs` of each file system the batch touches: every file's data,
//!    and the directories of new mailboxes, are on disk;
//! 2. each file renamed from `tmp/` into `new/`;
//! 3. `syncfs` again: the renames are on disk.
//!
//! Only then is each delivery reported delivered. The order keeps the
//! Maildir promise: a file appears in `new/` only with its data durable,
//! and "delivered" is recorded only once its name in `new/` is durable.
//! A failed sync fails every delivery of the batch on that file system
//! (temporary: the messages stay queued; files already renamed are
//! removed again, so a retry does not duplicate them). While a batch is
//! being synced the next one gathers, so the busier the agent, the fewer
//! syncs per message.
//!
//! Trust: staged files come from `write::stage`, inside checked Maildirs.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::dirs::MaildirPolicy;
use super::write::{stage, Staged, SyncStats};
use super::MaildirError;

/// Files per batch at most (a batch is synced while the next gathers).
const MAX_BATCH: usize = 1024;

type Results = Vec<Result<String, MaildirError>>;

/// A message to write into one mailbox.
pub struct ToWrite {
    pub maildir: PathBuf,
    pub hostname: Arc<str>,
    pub sender: Arc<str>,
    pub recipient: String,
    pub body: Arc<Vec<u8>>,
}

struct Request {
    items: Vec<ToWrite>,
    reply: oneshot::Sender<Results>,
}

/// The door to the writing and syncing threads; they end when the last
/// `Committer` is dropped.
pub struct Committer {
    tx: mpsc::Sender<Request>,
}

impl Committer {
    pub fn start(policy: Arc<MaildirPolicy>, stats: Arc<SyncStats>) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel::<Request>();
        let (written_tx, written_rx) = mpsc::channel::<Vec<Written>>();
        let syncer_policy = policy.clone();
        std::thread::Builder::new()
            .name("maildir-sync".into())
            .spawn(move || run_syncer(written_rx, &syncer_policy, &stats))?;
        std::thread::Builder::new()
            .name("maildir-write".into())
            .spawn(move || run_writer(rx, written_tx, &policy))?;
        Ok(Committer { tx })
    }

    /// Writes `items` and makes them durable in `new/`; one result per
    /// item, in order: the file's name, or why it is not delivered. (The
    /// writing thread writes a whole batch per wake-up: a hand-off of
    /// each message to the blocking pool and back costs more.)
    pub async fn deliver(&self, items: Vec<ToWrite>) -> Results {
        let n = items.len();
        let (reply, wait) = oneshot::channel();
        if self.tx.send(Request { items, reply }).is_ok() {
            if let Ok(results) = wait.await {
                return results;
            }
        }
        let gone = || std::io::Error::other("maildir commit thread stopped");
        (0..n)
            .map(|_| Err(MaildirError::Io("(all)".into(), gone())))
            .collect()
    }
}

/// A request written into `tmp/`: what was staged, and per item whether
/// its write worked.
struct Written {
    staged: Vec<Staged>,
    slots: Vec<Result<(), MaildirError>>,
    reply: oneshot::Sender<Results>,
}

/// The writing thread: gathers requests, writes them, hands them on.
fn run_writer(rx: mpsc::Receiver<Request>, tx: mpsc::Sender<Vec<Written>>, policy: &MaildirPolicy) {
    while let Ok(first) = rx.recv() {
        let mut files = first.items.len();
        let mut batch = vec![first];
        while files < MAX_BATCH {
            match rx.try_recv() {
                Ok(more) => {
                    files += more.items.len();
                    batch.push(more);
                }
                Err(_) => break,
            }
        }
        let written = batch
            .into_iter()
            .map(|req| write_one(req, policy))
            .collect();
        if tx.send(written).is_err() {
            return;
        }
    }
}

fn write_one(req: Request, policy: &MaildirPolicy) -> Written {
    let (mut staged, mut slots) = (Vec::new(), Vec::with_capacity(req.items.len()));
    for it in &req.items {
        let (h, s) = (&*it.hostname, &*it.sender);
        match stage(policy, &it.maildir, h, s, &it.recipient, &it.body, false) {
            Ok(st) => {
                staged.push(st);
                slots.push(Ok(()));
            }
            Err(e) => slots.push(Err(e)),
        }
    }
    Written {
        staged,
        slots,
        reply: req.reply,
    }
}

/// The syncing thread: gathers what was written, commits it, answers.
fn run_syncer(rx: mpsc::Receiver<Vec<Written>>, policy: &MaildirPolicy, stats: &SyncStats) {
    let mut devices = Devices::new();
    while let Ok(mut batch) = rx.recv() {
        let mut files: usize = batch.iter().map(|w| w.staged.len()).sum();
        while files < MAX_BATCH {
            match rx.try_recv() {
                Ok(more) => {
                    files += more.iter().map(|w| w.staged.len()).sum::<usize>();
                    batch.extend(more);
                }
                Err(_) => break,
            }
        }
        let (mut staged, mut rest) = (Vec::with_capacity(batch.len()), Vec::new());
        for w in batch {
            staged.push(w.staged);
            rest.push((w.slots, w.reply));
        }
        let committed = commit_batch(staged, policy, stats, &mut devices);
        for ((slots, reply), done) in rest.into_iter().zip(committed) {
            let mut done = done.into_iter();
            let results = slots
                .into_iter()
                .map(|s| s.and_then(|()| done.next().unwrap_or_else(|| Err(lost()))))
                .collect();
            let _ = reply.send(results);
        }
    }
}

fn lost() -> MaildirError {
    MaildirError::Io(
        "(all)".into(),
        std::io::Error::other("commit result missing"),
    )
}

/// One open descriptor per file system, kept by the syncing thread for its
/// life: `syncfs` through a descriptor reports every write-back error on
/// that file system since the previous call through it (Linux 5.8 and
/// later), so an error between two batches is not missed.
type Devices = HashMap<u64, std::fs::File>;

/// `syncfs` of each device in `devs`; the devices whose sync failed.
fn sync_devices(
    devices: &Devices,
    devs: &std::collections::BTreeSet<u64>,
) -> HashMap<u64, std::io::Error> {
    let mut failed = HashMap::new();
    for dev in devs {
        let Some(file) = devices.get(dev) else {
            continue;
        };
        // SAFETY: syncfs takes a valid open descriptor, which `file` holds.
        if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
            failed.insert(*dev, std::io::Error::last_os_error());
        }
    }
    failed
}

/// The file system of a staged file, with a descriptor for it in
/// `devices`; the directories of a new mailbox that lie on another file
/// system (above a mount point) are synced one by one here, counted in
/// `syncs`. An error means the file cannot be made durable: not delivered.
fn prepare_item(staged: &Staged, devices: &mut Devices, syncs: &mut u64) -> std::io::Result<u64> {
    let dev = staged.file.metadata()?.dev();
    if let std::collections::hash_map::Entry::Vacant(e) = devices.entry(dev) {
        e.insert(staged.file.try_clone()?);
    }
    for dir in &staged.dirs {
        if std::fs::metadata(dir)?.dev() != dev {
            std::fs::File::open(dir)?.sync_all()?;
            *syncs += 1;
        }
    }
    Ok(dev)
}

fn copy(e: &std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), e.to_string())
}

/// Makes staged files durable in `new/` (steps 1 to 3 above); results
/// in the order given.
fn commit_batch(
    batch: Vec<Vec<Staged>>,
    policy: &MaildirPolicy,
    stats: &SyncStats,
    devices: &mut Devices,
) -> Vec<Results> {
    // 1. Data and new directories, on every file system they are on.
    let mut syncs = 0u64;
    let devs: Vec<Vec<std::io::Result<u64>>> = batch
        .iter()
        .map(|req| {
            let items = req.iter();
            items
                .map(|st| prepare_item(st, devices, &mut syncs))
                .collect()
        })
        .collect();
    let used: std::collections::BTreeSet<u64> = devs.iter().flatten().flatten().copied().collect();
    let first = sync_devices(devices, &used);
    syncs += used.len() as u64;
    // 2. Into new/ (only files whose data is known to be on disk).
    let renamed: Vec<Vec<Result<u64, MaildirError>>> = batch
        .iter()
        .zip(&devs)
        .map(|(req, req_devs)| {
            let items = req.iter().zip(req_devs);
            items
                .map(|(staged, dev)| {
                    let done = match dev {
                        Err(e) => Err(copy(e)),
                        Ok(dev) => match first.get(dev) {
                            Some(e) => Err(copy(e)),
                            None => std::fs::rename(&staged.tmp, staged.new_path()).map(|()| *dev),
                        },
                    };
                    done.map_err(|e| {
                        staged.abandon(policy);
                        MaildirError::from_io(&staged.maildir, e)
                    })
                })
                .collect()
        })
        .collect();
    // 3. The renames (only file systems where something was renamed).
    let touched: std::collections::BTreeSet<u64> = renamed
        .iter()
        .flatten()
        .filter_map(|r| r.as_ref().ok())
        .copied()
        .collect();
    let second = sync_devices(devices, &touched);
    syncs += touched.len() as u64;
    let mut files = 0u64;
    let mut all = Vec::with_capacity(batch.len());
    for (req, outcomes) in batch.into_iter().zip(renamed) {
        let results = req
            .into_iter()
            .zip(outcomes)
            .map(|(staged, renamed)| {
                let dev = renamed?;
                if let Some(e) = second.get(&dev) {
                    // Not known to be durable: not delivered, and not left
                    // in new/ to be delivered twice.
                    let _ = std::fs::remove_file(staged.new_path());
                    policy.forget(&staged.maildir);
                    return Err(MaildirError::from_io(&staged.maildir, copy(e)));
                }
                Ok(staged.name)
            })
            .collect::<Results>();
        files += results.iter().filter(|r| r.is_ok()).count() as u64;
        all.push(results);
    }
    stats.count(files, syncs);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_of_new_mailboxes_costs_two_syncs() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("mail");
        let policy = Arc::new(MaildirPolicy::new(base.clone(), false));
        let stats = Arc::new(SyncStats::default());
        let committer = Committer::start(policy.clone(), stats.clone()).unwrap();
        let items = (0..64)
            .map(|i| item(base.join(format!("ex.test/u{i}/Maildir"))))
            .collect();
        let results = committer.deliver(items).await;
        assert_eq!(results.len(), 64);
        for (i, r) in results.iter().enumerate() {
            let name = r.as_ref().unwrap();
            let md = base.join(format!("ex.test/u{i}/Maildir"));
            assert!(md.join("new").join(name).is_file());
            assert_eq!(std::fs::read_dir(md.join("tmp")).unwrap().count(), 0);
        }
        assert_eq!(stats.files.load(std::sync::atomic::Ordering::Relaxed), 64);
        assert_eq!(
            stats.syncs.load(std::sync::atomic::Ordering::Relaxed),
            2,
            "one file system: one sync before the renames, one after"
        );
    }

    #[tokio::test]
    async fn failures_are_per_message_and_leave_tmp_clean() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("mail");
        let policy = Arc::new(MaildirPolicy::new(base.clone(), false));
        let committer = Committer::start(policy.clone(), Arc::default()).unwrap();
        let good = base.join("ex.test/a/Maildir");
        // b's mailbox is known, but its new/ has gone: the rename fails.
        let bad = base.join("ex.test/b/Maildir");
        policy.prepare(&bad, true).unwrap();
        std::fs::remove_dir(bad.join("new")).unwrap();
        // c's cannot even be made: its parent is a file.
        std::fs::write(base.join("ex.test/c"), b"x").unwrap();
        let unwritable = base.join("ex.test/c/Maildir");
        let items = vec![item(good.clone()), item(bad.clone()), item(unwritable)];
        let results = committer.deliver(items).await;
        assert!(results[0].is_ok(), "{:?}", results[0]);
        assert!(good
            .join("new")
            .join(results[0].as_ref().unwrap())
            .is_file());
        for r in &results[1..] {
            assert!(matches!(r, Err(MaildirError::Io(..))), "{r:?}");
        }
        assert_eq!(std::fs::read_dir(bad.join("tmp")).unwrap().count(), 0);
    }

    fn item(maildir: PathBuf) -> ToWrite {
        ToWrite {
            maildir,
            hostname: "mx".into(),
            sender: "s@x".into(),
            recipient: "u@ex.test".into(),
            body: Arc::new(b"Subject: t\r\n\r\nhi\r\n".to_vec()),
        }
    }
}
