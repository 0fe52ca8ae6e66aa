//! Writing one message into a Maildir, by the Maildir rules: a unique
//! name in `tmp/`, data synced, rename into `new/`, directory synced.
//! `Return-Path:` and `Delivered-To:` are prepended.
//!
//! Blocking file I/O: call from a blocking task. A full disk, quota or
//! file-size limit is [`MaildirError::Full`]; any other failure is
//! [`MaildirError::Io`]; both are temporary (the message stays queued).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::dirs::MaildirPolicy;

/// Why a Maildir delivery failed (all are temporary: the message stays
/// queued and is retried).
#[derive(Debug, thiserror::Error)]
pub enum MaildirError {
    #[error("4.2.2 mailbox full or no space left: {0}")]
    Full(std::io::Error),
    #[error("4.3.0 cannot write to maildir {0}: {1}")]
    Io(String, std::io::Error),
    /// The path breaks the mailbox policy (a configuration or directory error).
    #[error("4.3.5 maildir {0} refused: {1}")]
    Refused(String, String),
}

impl MaildirError {
    pub fn from_io(maildir: &Path, e: std::io::Error) -> MaildirError {
        if matches!(
            e.raw_os_error(),
            Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
        ) {
            MaildirError::Full(e)
        } else {
            MaildirError::Io(maildir.display().to_string(), e)
        }
    }
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Delivers one message into `maildir`, which `policy` checks and
/// creates if needed (blocking: call from a blocking task).
pub fn deliver_maildir(
    policy: &MaildirPolicy,
    maildir: &Path,
    hostname: &str,
    sender: &str,
    recipient: &str,
    body: &[u8],
) -> Result<String, MaildirError> {
    let fail = |e: std::io::Error| MaildirError::from_io(maildir, e);
    policy.prepare(maildir)?;
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
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(header.as_bytes())?;
        file.write_all(body)?;
        file.sync_data()?;
        std::fs::rename(&tmp, maildir.join("new").join(&name))?;
        std::fs::File::open(maildir.join("new"))?.sync_all()
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        policy.forget(maildir);
        return Err(fail(e));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maildir_delivery_writes_new_with_headers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let md = dir.join("a/Maildir");
        let policy = MaildirPolicy::new(dir.clone(), false);
        let name = deliver_maildir(
            &policy,
            &md,
            "mx",
            "s@x",
            "a@y",
            b"Subject: t\r\n\r\nhi\r\n",
        )
        .unwrap();
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
        let err = deliver_maildir(&policy, &dir.join("file/Maildir"), "mx", "s@x", "a@y", b"x");
        assert!(matches!(err, Err(MaildirError::Io(..))), "{err:?}");
    }
}
