//! Who owns what a Maildir delivery creates, and with which modes
//! (`local.maildir_owner`): decided once when the agent is built, from the
//! owner and the uid the daemon runs as, then applied to each directory
//! and file the delivery itself just made.
//!
//! - no owner: the daemon's account, directories 0700, files 0600;
//! - a root daemon (or one running as the owner): the owner's uid and
//!   gid, 0700/0600, as Postfix's virtual(8);
//! - an unprivileged daemon cannot give a file away: it keeps it, in the
//!   owner's group, directories 2770 (setgid: what is made below inherits
//!   the group), files 0660; its account must be a member of that group
//!   (checked at start, `daemon::privilege`).
//!
//! Trust: only what this process created a moment before is changed,
//! through a descriptor it opened itself (`fchown`/`fchmod`, the
//! directory opened with `O_NOFOLLOW`): a symlink planted in the Maildir
//! tree is never followed to chown something else, and nothing that
//! existed before (a table value pointing at `/etc`) changes owner.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The owner and modes of what a Maildir delivery creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ownership {
    /// The daemon's account, 0700/0600 (no `maildir_owner`).
    #[default]
    Daemon,
    /// Given to `uid:gid`, 0700/0600 (a root daemon).
    Owner { uid: u32, gid: u32 },
    /// The daemon's, in group `gid`, 2770/0660 (an unprivileged daemon).
    Group { gid: u32 },
}

impl Ownership {
    /// For `owner` (uid, gid) and a daemon running as `euid`.
    pub fn decide(owner: Option<(u32, u32)>, euid: u32) -> Ownership {
        match owner {
            None => Ownership::Daemon,
            Some((uid, gid)) if euid == 0 || euid == uid => Ownership::Owner { uid, gid },
            Some((_, gid)) => Ownership::Group { gid },
        }
    }

    /// For `owner` and the running process.
    pub fn for_process(owner: Option<(u32, u32)>) -> Ownership {
        // SAFETY: geteuid has no preconditions and cannot fail.
        Ownership::decide(owner, unsafe { libc::geteuid() })
    }

    pub fn dir_mode(self) -> u32 {
        match self {
            Ownership::Group { .. } => 0o2770,
            _ => 0o700,
        }
    }

    pub fn file_mode(self) -> u32 {
        match self {
            Ownership::Group { .. } => 0o660,
            _ => 0o600,
        }
    }

    /// Whether created directories and files change owner or mode after
    /// they are made (their inodes then need syncing too).
    pub fn changes(self) -> bool {
        self != Ownership::Daemon
    }

    /// Gives `file`, which this process has just created and holds open,
    /// to the owner (`fchown`, then `fchmod`: a chown may clear setgid).
    pub fn apply(self, file: &std::fs::File, dir: bool) -> io::Result<()> {
        let mode = match dir {
            true => self.dir_mode(),
            false => self.file_mode(),
        };
        match self {
            Ownership::Daemon => return Ok(()),
            Ownership::Owner { uid, gid } => std::os::unix::fs::fchown(file, Some(uid), Some(gid))?,
            Ownership::Group { gid } => std::os::unix::fs::fchown(file, None, Some(gid))?,
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))
    }

    /// As [`apply`](Self::apply), for a directory this process has just
    /// made at `dir`: opened without following a link (a symlink swapped
    /// in meanwhile fails with ELOOP/ENOTDIR, and nothing is changed).
    pub fn apply_dir(self, dir: &Path) -> io::Result<()> {
        if !self.changes() {
            return Ok(());
        }
        let fd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)?;
        self.apply(&fd, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_owner_is_given_by_root_and_shared_by_the_group_otherwise() {
        assert_eq!(Ownership::decide(None, 0), Ownership::Daemon);
        assert_eq!(Ownership::decide(None, 110), Ownership::Daemon);
        let vmail = Some((5000, 5001));
        let given = Ownership::Owner {
            uid: 5000,
            gid: 5001,
        };
        assert_eq!(Ownership::decide(vmail, 0), given);
        assert_eq!(Ownership::decide(vmail, 5000), given, "running as vmail");
        let shared = Ownership::decide(vmail, 110);
        assert_eq!(shared, Ownership::Group { gid: 5001 });
        assert_eq!((shared.dir_mode(), shared.file_mode()), (0o2770, 0o660));
        assert_eq!((given.dir_mode(), given.file_mode()), (0o700, 0o600));
        let own = Ownership::Daemon;
        assert_eq!((own.dir_mode(), own.file_mode()), (0o700, 0o600));
    }

    #[test]
    fn a_group_shared_with_the_owner_is_set_on_what_was_made() {
        // The process's own group stands for the owner's (a member may
        // give a file its group; root may give anything).
        let tmp = tempfile::tempdir().unwrap();
        // SAFETY: getegid has no preconditions and cannot fail.
        let gid = unsafe { libc::getegid() };
        let own = Ownership::Group { gid };
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        own.apply_dir(&dir).unwrap();
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!((m.mode() & 0o7777, m.gid()), (0o2770, gid));
        let file = std::fs::File::create(dir.join("f")).unwrap();
        own.apply(&file, false).unwrap();
        let m = std::fs::metadata(dir.join("f")).unwrap();
        assert_eq!((m.mode() & 0o7777, m.gid()), (0o660, gid));
    }

    #[test]
    fn a_symlink_is_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // SAFETY: getegid has no preconditions and cannot fail.
        let gid = unsafe { libc::getegid() };
        let own = Ownership::Group { gid };
        assert!(own.apply_dir(&link).is_err());
        let m = std::fs::metadata(&target).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700, "the target is untouched");
    }
}
