//! Local delivery into virtual mailboxes (Maildir): confined directories
//! (dirs.rs), the writer (write.rs), batched syncs (commit.rs), the agent;
//! here the error they all return, [`MaildirError`] (every one temporary).

mod agent;
pub mod commit;
pub mod dirs;
pub mod owner;
pub mod write;

pub use agent::MaildirAgent;

use std::path::Path;

use crate::log::io_text;
use crate::message::reply::{Enhanced, Reply};

/// Why a Maildir delivery failed (all are temporary: the message stays
/// queued and is retried). Its text is its [`MaildirError::reply`].
#[derive(Debug, thiserror::Error)]
#[error("{}", self.reply())]
pub enum MaildirError {
    Full(std::io::Error),
    Io(String, std::io::Error),
    /// The path breaks the mailbox policy (a configuration or directory error).
    Refused(String, String),
}

impl MaildirError {
    /// The deferral it causes: our own 451 with its enhanced status.
    pub fn reply(&self) -> Reply {
        let (detail, text) = match self {
            MaildirError::Full(e) => (
                (2, 2),
                format!("mailbox full or no space left: {}", io_text(e)),
            ),
            MaildirError::Io(dir, e) => (
                (3, 0),
                format!("cannot write to maildir {dir}: {}", io_text(e)),
            ),
            MaildirError::Refused(dir, why) => ((3, 5), format!("maildir {dir} refused: {why}")),
        };
        Reply::own(451, Enhanced::new(4, detail.0, detail.1), text)
    }

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
