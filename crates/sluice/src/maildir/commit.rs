//! Group commit for Maildir deliveries, as the spool group-commits
//! receipts: workers write their messages into `tmp/` in parallel, then
//! hand them here; one thread takes whatever has gathered and makes the
//! whole batch durable with two syncs per file system instead of two per
//! message:
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

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::dirs::MaildirPolicy;
use super::write::{MaildirError, Staged, SyncStats};

/// Files per batch at most (a batch is synced while the next gathers).
const MAX_BATCH: usize = 1024;

type Results = Vec<Result<String, MaildirError>>;

struct Request {
    staged: Vec<Staged>,
    reply: oneshot::Sender<Results>,
}

/// The committing thread's door; the thread ends when the last
/// `Committer` is dropped.
pub struct Committer {
    tx: mpsc::Sender<Request>,
}

impl Committer {
    pub fn start(policy: Arc<MaildirPolicy>, stats: Arc<SyncStats>) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("maildir-commit".into())
            .spawn(move || run(rx, &policy, &stats))?;
        Ok(Committer { tx })
    }

    /// Makes `staged` durable in `new/`; one result per file, in order:
    /// the file's name, or why it is not delivered.
    pub async fn commit(&self, staged: Vec<Staged>) -> Results {
        let n = staged.len();
        let (reply, wait) = oneshot::channel();
        if self.tx.send(Request { staged, reply }).is_ok() {
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

fn run(rx: mpsc::Receiver<Request>, policy: &MaildirPolicy, stats: &SyncStats) {
    while let Ok(first) = rx.recv() {
        let mut files = first.staged.len();
        let mut batch = vec![first];
        while files < MAX_BATCH {
            match rx.try_recv() {
                Ok(more) => {
                    files += more.staged.len();
                    batch.push(more);
                }
                Err(_) => break,
            }
        }
        commit_batch(batch, policy, stats);
    }
}

/// `syncfs` once per file system of `handles` (device → an open file on
/// it); returns the devices whose sync failed, with the error.
fn sync_devices(handles: &HashMap<u64, std::fs::File>) -> HashMap<u64, std::io::Error> {
    let mut failed = HashMap::new();
    for (dev, file) in handles {
        // SAFETY: syncfs takes a valid open descriptor, which `file` holds.
        if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
            failed.insert(*dev, std::io::Error::last_os_error());
        }
    }
    failed
}

fn device(file: &std::fs::File) -> u64 {
    file.metadata().map(|m| m.dev()).unwrap_or(0)
}

fn commit_batch(batch: Vec<Request>, policy: &MaildirPolicy, stats: &SyncStats) {
    // 1. Data and new directories, on every file system they are on.
    let mut handles: HashMap<u64, std::fs::File> = HashMap::new();
    let mut devs: Vec<Vec<u64>> = Vec::with_capacity(batch.len());
    for req in &batch {
        let mut of_req = Vec::with_capacity(req.staged.len());
        for staged in &req.staged {
            let dev = device(&staged.file);
            if let Ok(f) = staged.file.try_clone() {
                handles.entry(dev).or_insert(f);
            }
            for dir in &staged.dirs {
                if let Ok(d) = std::fs::File::open(dir) {
                    handles.entry(device(&d)).or_insert(d);
                }
            }
            of_req.push(dev);
        }
        devs.push(of_req);
    }
    let first = sync_devices(&handles);
    let mut syncs = handles.len() as u64;
    // 2. Into new/.
    let mut renamed: Vec<Vec<Result<(), MaildirError>>> = Vec::with_capacity(batch.len());
    for (req, req_devs) in batch.iter().zip(&devs) {
        let outcomes = req.staged.iter().zip(req_devs).map(|(staged, dev)| {
            let err = match first.get(dev) {
                Some(e) => std::io::Error::new(e.kind(), e.to_string()),
                None => match std::fs::rename(&staged.tmp, staged.new_path()) {
                    Ok(()) => return Ok(()),
                    Err(e) => e,
                },
            };
            staged.abandon(policy);
            Err(MaildirError::from_io(&staged.maildir, err))
        });
        renamed.push(outcomes.collect());
    }
    // 3. The renames (only file systems where something was renamed).
    let touched: HashMap<u64, std::fs::File> = handles
        .into_iter()
        .filter(|(dev, _)| !first.contains_key(dev))
        .collect();
    let second = sync_devices(&touched);
    syncs += touched.len() as u64;
    let mut files = 0u64;
    for ((req, req_devs), outcomes) in batch.into_iter().zip(&devs).zip(renamed) {
        let results = req
            .staged
            .into_iter()
            .zip(req_devs)
            .zip(outcomes)
            .map(|((staged, dev), renamed)| {
                renamed?;
                if let Some(e) = second.get(dev) {
                    // Not known to be durable: not delivered, and not left
                    // in new/ to be delivered twice.
                    let _ = std::fs::remove_file(staged.new_path());
                    policy.forget(&staged.maildir);
                    let e = std::io::Error::new(e.kind(), e.to_string());
                    return Err(MaildirError::from_io(&staged.maildir, e));
                }
                Ok(staged.name)
            })
            .collect::<Results>();
        files += results.iter().filter(|r| r.is_ok()).count() as u64;
        let _ = req.reply.send(results);
    }
    stats.count(files, syncs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maildir::write::stage;

    #[tokio::test]
    async fn a_batch_of_new_mailboxes_costs_two_syncs() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("mail");
        let policy = Arc::new(MaildirPolicy::new(base.clone(), false));
        let stats = Arc::new(SyncStats::default());
        let committer = Committer::start(policy.clone(), stats.clone()).unwrap();
        let staged: Vec<Staged> = (0..64)
            .map(|i| {
                let md = base.join(format!("ex.test/u{i}/Maildir"));
                stage(
                    &policy,
                    &md,
                    "mx",
                    "s@x",
                    "u@ex.test",
                    b"Subject: t\r\n\r\nhi\r\n",
                    false,
                )
                .unwrap()
            })
            .collect();
        assert!(
            staged.iter().all(|s| !s.dirs.is_empty()),
            "new mailboxes leave their directories to the commit"
        );
        let results = committer.commit(staged).await;
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
    async fn a_file_that_cannot_be_renamed_is_not_delivered_and_leaves_tmp() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("mail");
        let policy = Arc::new(MaildirPolicy::new(base.clone(), false));
        let committer = Committer::start(policy.clone(), Arc::default()).unwrap();
        let (good, bad) = (
            base.join("ex.test/a/Maildir"),
            base.join("ex.test/b/Maildir"),
        );
        let body = b"Subject: t\r\n\r\nhi\r\n";
        let one = stage(&policy, &good, "mx", "s@x", "a@ex.test", body, false).unwrap();
        let two = stage(&policy, &bad, "mx", "s@x", "b@ex.test", body, false).unwrap();
        // b's new/ is gone by the time of the commit.
        std::fs::remove_dir(bad.join("new")).unwrap();
        let results = committer.commit(vec![one, two]).await;
        assert!(results[0].is_ok());
        assert!(
            matches!(results[1], Err(MaildirError::Io(..))),
            "{:?}",
            results[1]
        );
        assert_eq!(std::fs::read_dir(bad.join("tmp")).unwrap().count(), 0);
    }
}
