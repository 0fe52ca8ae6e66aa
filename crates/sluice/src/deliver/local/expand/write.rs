//! The switch's writes: `/file` targets and the mailbox (an mbox in the
//! spool or the home, or a Maildir), each with the rights of whom it is
//! delivered for (`rights.rs`), in local(8)'s formats (`mbox.rs`).
//!
//! Trust and invariants: as the switch's (`expand.rs`); every file is
//! opened with the rights given, so the kernel refuses what that account
//! could not do. Blocking.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::super::mbox::{self, Envelope, MboxOptions, WriteError};
use super::super::rights::AsUser;
use super::{allowed, default_rights, Delivery, Kind, Rights, Status, Who};
use crate::routing::system::passwd::Account;

impl Delivery<'_> {
    pub(super) fn file(&mut self, path: &Path, kind: Kind, who: &Who) {
        if !allowed(&self.cfg.allow_mail_to_files, kind) {
            return self.note(Status::Bounced(
                "5.7.1",
                "mail to file is restricted".into(),
            ));
        }
        if !self.seen.insert(format!("file {}", path.display())) {
            return;
        }
        // Root (its aliases, or its own .forward) writes as default_privs.
        let rights = match who {
            Some(a) if a.uid != 0 => (a.uid, a.gid),
            _ => match default_rights(self.cfg) {
                Ok(r) => r,
                Err(s) => return self.note(s),
            },
        };
        let opts = MboxOptions {
            chown: None,
            owner: None,
            fcntl: self.lock("fcntl"),
            dotlock: false,
        };
        let env = self.envelope();
        let done = as_user(rights, || mbox::append(path, &env, self.body, &opts));
        match done {
            Ok(()) => self.note(Status::Delivered(format!(
                "delivered to file: {}",
                path.display()
            ))),
            Err(e) => self.failed(e),
        }
    }

    fn lock(&self, kind: &str) -> bool {
        self.cfg.mailbox_delivery_lock.iter().any(|l| l == kind)
    }

    fn envelope(&self) -> Envelope<'_> {
        Envelope {
            sender: self.sender,
            original: self.original,
            delivered: &self.delivered,
        }
    }

    /// The account's mailbox: a Maildir or an mbox in the home directory
    /// (`home_mailbox`), else the mbox in `mail_spool_directory`.
    pub(super) fn mailbox(&mut self, a: &Account) {
        if !self.seen.insert(format!("mailbox {}", a.name)) {
            return;
        }
        let home_mailbox = self.cfg.home_mailbox.as_str();
        let env = self.envelope();
        let strict = self.cfg.strict_mailbox_ownership.then_some(a.uid);
        let (done, where_) = if home_mailbox.ends_with('/') {
            let dir = a.home.join(home_mailbox);
            let done = as_user((a.uid, a.gid), || {
                mbox::maildir(&dir, self.hostname, &env, self.body)
            });
            (done, "maildir")
        } else if !home_mailbox.is_empty() {
            let path = a.home.join(home_mailbox);
            let opts = self.mbox_options(None, strict);
            let done = as_user((a.uid, a.gid), || {
                mbox::append(&path, &env, self.body, &opts)
            });
            (done, "mailbox")
        } else {
            (self.spool(a, &env, strict), "mailbox")
        };
        match done {
            Ok(()) => self.note(Status::Delivered(format!("delivered to {where_}"))),
            Err(e) => self.failed(e),
        }
    }

    /// The mbox `mail_spool_directory/USER`, with Postfix's rights: the
    /// user's when the directory is world-writable, the user's with the
    /// directory's group when group-writable, else root's and chowned.
    fn spool(&self, a: &Account, env: &Envelope, strict: Option<u32>) -> Result<(), WriteError> {
        let dir = &self.cfg.mail_spool_directory;
        let path = dir.join(&a.name);
        let meta = std::fs::metadata(dir).map_err(|e| WriteError {
            permanent: false,
            status: "4.2.0",
            text: format!("cannot access mail spool {}: {e}", dir.display()),
        })?;
        let (rights, chown) = if meta.mode() & 0o002 != 0 {
            (Some((a.uid, a.gid)), None)
        } else if meta.mode() & 0o020 != 0 {
            (Some((a.uid, meta.gid())), None)
        } else {
            (None, Some((a.uid, a.gid)))
        };
        let opts = self.mbox_options(chown, strict);
        match rights {
            Some(r) => as_user(r, || mbox::append(&path, env, self.body, &opts)),
            None => mbox::append(&path, env, self.body, &opts),
        }
    }

    fn mbox_options(&self, chown: Option<(u32, u32)>, owner: Option<u32>) -> MboxOptions {
        MboxOptions {
            chown,
            owner,
            fcntl: self.lock("fcntl"),
            dotlock: self.lock("dotlock"),
        }
    }
}

/// Runs `f` with the thread acting as `rights`.
fn as_user(rights: Rights, f: impl FnOnce() -> Result<(), WriteError>) -> Result<(), WriteError> {
    match AsUser::become_user(rights.0, rights.1) {
        Ok(_as) => f(),
        Err(e) => Err(WriteError {
            permanent: false,
            status: "4.3.0",
            text: format!("cannot deliver as uid {}: {e}", rights.0),
        }),
    }
}
