//! Writing one message into a Maildir, by the Maildir rules: a unique
//! name in `tmp/`, data synced, rename into `new/`, directory synced.
//! `Return-Path:` and `Delivered-To:` are prepended. Writing ([`stage`])
//! and making durable are separate steps, so many deliveries can share
//! their syncs (`commit.rs`); [`finish`] does one on its own.
//!
//! Blocking file I/O: call from a blocking task. A full disk, quota or
//! file-size limit is [`MaildirError::Full`]; any other failure is
//! [`MaildirError::Io`]; both are temporary (the message stays queued).
//!
//! A file is given to the Maildir owner (`owner.rs`) through its open
//! descriptor before it is written, so it enters `new/` already the
//! owner's.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::dirs::MaildirPolicy;
use super::MaildirError;

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Disk syncs and files of one Maildir agent (for the log at shutdown).
#[derive(Debug, Default)]
pub struct SyncStats {
    pub files: AtomicU64,
    pub syncs: AtomicU64,
}

impl SyncStats {
    pub fn count(&self, files: u64, syncs: u64) {
        self.files.fetch_add(files, Ordering::Relaxed);
        self.syncs.fetch_add(syncs, Ordering::Relaxed);
        metrics::counter!("sluice_maildir_files_total").increment(files);
        metrics::counter!("sluice_maildir_syncs_total").increment(syncs);
    }
}

/// A message written into a Maildir's `tmp/`, not yet delivered: it must
/// be made durable, renamed into `new/`, and the rename made durable.
pub struct Staged {
    pub maildir: PathBuf,
    pub name: String,
    pub tmp: PathBuf,
    /// The file, open (its data is synced through it).
    pub file: std::fs::File,
    /// Directories of a new mailbox whose entries are not synced yet (see
    /// [`MaildirPolicy::prepare`]).
    pub dirs: Vec<PathBuf>,
    /// Directories synced while staging (a new mailbox, `sync_dirs`).
    pub dirs_synced: u64,
}

impl Staged {
    pub fn new_path(&self) -> PathBuf {
        self.maildir.join("new").join(&self.name)
    }

    /// Gives up: the file leaves `tmp/` and the mailbox is looked at
    /// afresh next time (it may have gone).
    pub fn abandon(&self, policy: &MaildirPolicy) {
        let _ = std::fs::remove_file(&self.tmp);
        policy.forget(&self.maildir);
    }
}

/// Writes one message into `maildir`'s `tmp/` (which `policy` checks and
/// creates if needed; with `sync_dirs` a new mailbox's directories are
/// synced now, otherwise the caller's commit covers them). Blocking.
pub fn stage(
    policy: &MaildirPolicy,
    maildir: &Path,
    hostname: &str,
    sender: &str,
    recipient: &str,
    body: &[u8],
    sync_dirs: bool,
) -> Result<Staged, MaildirError> {
    let dirs = policy.prepare(maildir, sync_dirs)?;
    let header = format!("Return-Path: <{sender}>\r\nDelivered-To: {recipient}\r\n");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let name = format!(
        "{}.M{}P{}Q{}.{},S={}",
        now.as_secs(),
        now.subsec_micros(),
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed),
        hostname.replace(['/', ':'], "_"),
        header.len() + body.len()
    );
    let tmp = maildir.join("tmp").join(&name);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        policy.ownership.apply(&file, false)?;
        file.write_all(header.as_bytes())?;
        file.write_all(body)?;
        Ok(file)
    })();
    match written {
        Ok(file) => Ok(Staged {
            maildir: maildir.to_path_buf(),
            name,
            tmp,
            file,
            dirs_synced: if sync_dirs { dirs.len() as u64 } else { 0 },
            dirs: if sync_dirs { Vec::new() } else { dirs },
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            policy.forget(maildir);
            Err(MaildirError::from_io(maildir, e))
        }
    }
}

/// Finishes one staged message on its own: data synced, renamed into
/// `new/`, `new/` synced (two disk syncs per message; see `commit.rs` for
/// the shared way). Blocking.
pub fn finish(staged: Staged, policy: &MaildirPolicy) -> Result<String, MaildirError> {
    let result = (|| {
        // A new owner or mode is inode metadata, which fdatasync may skip.
        match policy.ownership.changes() {
            true => staged.file.sync_all()?,
            false => staged.file.sync_data()?,
        }
        std::fs::rename(&staged.tmp, staged.new_path())?;
        std::fs::File::open(staged.maildir.join("new"))?.sync_all()
    })();
    match result {
        Ok(()) => Ok(staged.name),
        Err(e) => {
            staged.abandon(policy);
            Err(MaildirError::from_io(&staged.maildir, e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One message on its own: staged, then finished.
    fn deliver_maildir(
        policy: &MaildirPolicy,
        maildir: &Path,
        sender: &str,
        recipient: &str,
        body: &[u8],
    ) -> Result<String, MaildirError> {
        let staged = stage(policy, maildir, "mx", sender, recipient, body, true)?;
        finish(staged, policy)
    }

    #[test]
    fn maildir_delivery_writes_new_with_headers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let md = dir.join("a/Maildir");
        let policy = MaildirPolicy::new(dir.clone(), false);
        let name =
            deliver_maildir(&policy, &md, "s@x", "a@y", b"Subject: t\r\n\r\nhi\r\n").unwrap();
        let text = std::fs::read_to_string(md.join("new").join(&name)).unwrap();
        assert_eq!(
            text,
            "Return-Path: <s@x>\r\nDelivered-To: a@y\r\nSubject: t\r\n\r\nhi\r\n"
        );
        assert!(std::fs::read_dir(md.join("tmp")).unwrap().next().is_none());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(md.join("new"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        // An unwritable place is an error, not a panic or a lost message.
        std::fs::write(dir.join("file"), b"x").unwrap();
        let err = deliver_maildir(&policy, &dir.join("file/Maildir"), "s@x", "a@y", b"x");
        assert!(matches!(err, Err(MaildirError::Io(..))), "{err:?}");
    }
}
