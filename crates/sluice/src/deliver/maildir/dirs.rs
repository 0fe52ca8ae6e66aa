//! Making sure a Maildir exists, safely: confined to the mailbox base, no
//! symlinks followed below it, and every directory created on the way
//! synced to disk before the first message is reported delivered.
//!
//! Trust: mailbox paths come from tables (the operator's, or an LDAP
//! directory's) and the template, which embeds the client's address; none
//! of it is trusted to stay under the base. Invariant: a path is used only
//! if it has no `..` component and lies under the base (or absolute paths
//! are allowed by `local.maildir_allow_absolute`), and no directory below
//! the base on the way to it is a symlink.
//!
//! Known mailboxes are cached, so a delivery to an existing Maildir costs
//! no `mkdir` or `stat` calls.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use super::write::MaildirError;

/// Mailboxes remembered at most (the set is emptied when full).
const KNOWN_MAX: usize = 100_000;

/// Where Maildirs may be, and the ones known to exist already.
pub struct MaildirPolicy {
    pub base: PathBuf,
    pub allow_absolute: bool,
    known: Mutex<HashSet<PathBuf>>,
}

impl MaildirPolicy {
    pub fn new(base: PathBuf, allow_absolute: bool) -> MaildirPolicy {
        MaildirPolicy {
            base,
            allow_absolute,
            known: Mutex::new(HashSet::new()),
        }
    }

    /// Checks `maildir` and creates it with `tmp/`, `new/` and `cur/` if
    /// needed; returns the directories whose entries must be durable
    /// before a delivery into it is: synced already with `sync`, left to
    /// the caller's file-system sync without (group commit). Empty when
    /// the mailbox was known. Blocking: call from a blocking task.
    pub fn prepare(&self, maildir: &Path, sync: bool) -> Result<Vec<PathBuf>, MaildirError> {
        if self.known().contains(maildir) {
            return Ok(Vec::new());
        }
        let refuse = |why: &str| MaildirError::Refused(maildir.display().to_string(), why.into());
        if maildir.components().any(|c| c == Component::ParentDir) {
            return Err(refuse("path contains \"..\""));
        }
        let inside = maildir.starts_with(&self.base);
        if !inside && !self.allow_absolute {
            return Err(refuse(
                "outside maildir_base (set local.maildir_allow_absolute)",
            ));
        }
        let from = if inside {
            self.base.as_path()
        } else {
            Path::new("/")
        };
        let io = |e: io::Error| MaildirError::from_io(maildir, e);
        let mut created = Vec::new();
        make_dir(&self.base, &mut created).map_err(io)?;
        // The directories on the way, from the base down: each holds an
        // entry of the chain, whoever made it.
        let mut chain = vec![from.to_path_buf()];
        for part in maildir.strip_prefix(from).unwrap_or(maildir).components() {
            let at = chain[chain.len() - 1].join(part);
            no_symlink(&at).map_err(|_| refuse("a directory on the way is a symlink"))?;
            make_dir(&at, &mut created).map_err(io)?;
            chain.push(at);
        }
        for sub in ["tmp", "new", "cur"] {
            let dir = maildir.join(sub);
            no_symlink(&dir).map_err(|_| refuse("tmp, new or cur is a symlink"))?;
            make_dir(&dir, &mut created).map_err(io)?;
        }
        let synced = match sync {
            true => sync_chain(&created, chain).map_err(io)?,
            false => to_sync(&created, chain),
        };
        let mut known = self.known();
        if known.len() >= KNOWN_MAX {
            known.clear();
        }
        known.insert(maildir.to_path_buf());
        Ok(synced)
    }

    /// Forgets a mailbox (after a failed delivery: it may have gone).
    pub fn forget(&self, maildir: &Path) {
        self.known().remove(maildir);
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Syncs every directory in `chain`, and the parent of every directory in
/// `created`, so a crash cannot lose the entries after "delivered" is
/// recorded (an earlier failed attempt or a concurrent worker may have made
/// part of the chain). A directory of the chain we may pass through but not
/// read (e.g. a home directory at 0711) and did not write into is skipped.
fn sync_chain(created: &[PathBuf], chain: Vec<PathBuf>) -> io::Result<Vec<PathBuf>> {
    let holds_new = |dir: &Path| created.iter().any(|c| c.parent() == Some(dir));
    let mut synced: Vec<PathBuf> = Vec::new();
    for dir in to_sync(created, chain) {
        match std::fs::File::open(&dir).and_then(|f| f.sync_all()) {
            Ok(()) => synced.push(dir),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && !holds_new(&dir) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(synced)
}

/// The directories [`sync_chain`] would sync (for a caller that syncs the
/// whole file system instead).
fn to_sync(created: &[PathBuf], chain: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let parents = created
        .iter()
        .filter_map(|d| d.parent().map(Path::to_path_buf));
    for dir in parents.chain(chain) {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Creates one directory (mode 0700) unless it exists; notes it if new.
fn make_dir(dir: &Path, created: &mut Vec<PathBuf>) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            created.push(dir.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A missing parent (the base's own parents): create them too.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            created.push(dir.to_path_buf());
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Fails if `path` exists and is a symlink.
fn no_symlink(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(io::Error::other("symlink")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory (kept alive by the returned guard).
    fn temp(_name: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().to_path_buf();
        (d, p)
    }

    #[test]
    fn a_new_mailbox_has_its_directories_synced_once() {
        let (_guard, root) = temp("sync");
        let base = root.join("mail");
        let p = MaildirPolicy::new(base.clone(), false);
        let md = base.join("ex.test/u/Maildir");
        let synced = p.prepare(&md, true).unwrap();
        // root (entry "mail"), base, ex.test, u, Maildir: every parent of a new entry.
        for dir in [
            &root,
            &base,
            &base.join("ex.test"),
            &base.join("ex.test/u"),
            &md,
        ] {
            assert!(
                synced.contains(dir),
                "{} not synced: {synced:?}",
                dir.display()
            );
        }
        assert!(md.join("new").is_dir() && md.join("tmp").is_dir() && md.join("cur").is_dir());
        assert!(
            p.prepare(&md, true).unwrap().is_empty(),
            "known: no work the second time"
        );
    }

    #[test]
    fn a_chain_made_by_someone_else_is_synced_too() {
        // An earlier attempt (or another worker) made the directories and
        // failed before syncing them: the next delivery must sync them.
        let (_guard, root) = temp("others");
        let base = root.join("mail");
        let md = base.join("ex.test/w/Maildir");
        for sub in ["tmp", "new", "cur"] {
            std::fs::create_dir_all(md.join(sub)).unwrap();
        }
        let p = MaildirPolicy::new(base.clone(), false);
        let synced = p.prepare(&md, true).unwrap();
        for dir in [&base, &base.join("ex.test"), &base.join("ex.test/w"), &md] {
            assert!(
                synced.contains(dir),
                "{} not synced: {synced:?}",
                dir.display()
            );
        }
    }

    #[test]
    fn paths_are_confined_to_the_base() {
        let (_guard, root) = temp("confine");
        let base = root.join("mail");
        let p = MaildirPolicy::new(base.clone(), false);
        let escape = base.join("ex.test/../../outside/Maildir");
        assert!(matches!(
            p.prepare(&escape, true),
            Err(MaildirError::Refused(..))
        ));
        assert!(!root.join("outside").exists());
        let abs = root.join("elsewhere/Maildir");
        assert!(matches!(
            p.prepare(&abs, true),
            Err(MaildirError::Refused(..))
        ));
        assert!(!abs.exists());
        let allowed = MaildirPolicy::new(base.clone(), true);
        allowed.prepare(&abs, true).unwrap();
        assert!(abs.join("new").is_dir());
    }

    #[test]
    fn symlinks_below_the_base_are_not_followed() {
        let (_guard, root) = temp("symlink");
        let base = root.join("mail");
        std::fs::create_dir_all(base.join("ex.test")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::os::unix::fs::symlink(root.join("target"), base.join("ex.test/u")).unwrap();
        let p = MaildirPolicy::new(base.clone(), false);
        let err = p
            .prepare(&base.join("ex.test/u/Maildir"), true)
            .unwrap_err();
        assert!(matches!(err, MaildirError::Refused(..)), "{err}");
        assert!(
            !root.join("target/Maildir").exists(),
            "nothing made through the link"
        );
    }
}
