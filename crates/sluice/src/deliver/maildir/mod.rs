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

/// Why a Maildir delivery failed (all are temporary: the message stays
/// queued and is retried).
#[derive(Debug, thiserror::Error)]
pub enum MaildirError {
    #[error("4.2.2 mailbox full or no space left: {}", io_text(.0))]
    Full(std::io::Error),
    #[error("4.3.0 cannot write to maildir {}: {}", .0, io_text(.1))]
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
