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
//! no `mkdir` or `stat` calls; so are the directories checked on the way
//! (the domain's), so a new mailbox costs one `mkdir` per new directory
//! and nothing for the ones that exist: `mkdir` comes first, and only a
//! name that exists already is looked at (`lstat`) to refuse a symlink.
//! (A profile of a run where every message made a new Maildir had 6 % of
//! the daemon's CPU in the `lstat`s that came before each `mkdir`.)
//!
//! Each directory made is given to the Maildir owner right after its
//! `mkdir` (`owner.rs`, `local.maildir_owner`); directories that existed
//! already keep their owner.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use super::owner::Ownership;
use super::MaildirError;

/// Mailboxes remembered at most (the set is emptied when full).
const KNOWN_MAX: usize = 100_000;
/// Directories on the way remembered at most (emptied when full: with a
/// directory per user, mostly those; the few shared ones are checked again).
const ON_THE_WAY_MAX: usize = 10_000;

/// Where Maildirs may be, and the ones known to exist already.
pub struct MaildirPolicy {
    pub base: PathBuf,
    pub allow_absolute: bool,
    /// Owner and modes of what deliveries create.
    pub ownership: Ownership,
    known: Mutex<HashSet<PathBuf>>,
    /// Directories on the way to a mailbox (the base among them) known to
    /// exist and not to be symlinks.
    on_the_way: Mutex<HashSet<PathBuf>>,
}

impl MaildirPolicy {
    pub fn new(base: PathBuf, allow_absolute: bool) -> MaildirPolicy {
        MaildirPolicy {
            base,
            allow_absolute,
            ownership: Ownership::Daemon,
            known: Mutex::new(HashSet::new()),
            on_the_way: Mutex::new(HashSet::new()),
        }
    }

    /// The same, with what deliveries create given to `ownership`.
    pub fn with_ownership(mut self, ownership: Ownership) -> MaildirPolicy {
        self.ownership = ownership;
        self
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
        let own = self.ownership;
        if !self.checked(&self.base) {
            make_dir(&self.base, &mut created, own).map_err(io)?;
            self.note_checked(&self.base);
        }
        // The directories on the way, from the base down: each holds an
        // entry of the chain, whoever made it.
        let mut chain = vec![from.to_path_buf()];
        let parts: Vec<Component> = maildir
            .strip_prefix(from)
            .unwrap_or(maildir)
            .components()
            .collect();
        for (i, part) in parts.iter().enumerate() {
            let at = chain[chain.len() - 1].join(part);
            if !self.checked(&at) {
                match make_checked(&at, &mut created, own).map_err(io)? {
                    Made::Dir => {}
                    Made::Symlink => return Err(refuse("a directory on the way is a symlink")),
                }
                if i + 1 < parts.len() {
                    self.note_checked(&at);
                }
            }
            chain.push(at);
        }
        for sub in ["tmp", "new", "cur"] {
            let dir = maildir.join(sub);
            if let Made::Symlink = make_checked(&dir, &mut created, own).map_err(io)? {
                return Err(refuse("tmp, new or cur is a symlink"));
            }
        }
        if own.changes() {
            // Their new owner and mode are inode changes: synced too.
            chain.extend(created.iter().cloned());
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

    /// Forgets a mailbox (after a failed delivery: it may have gone), and
    /// the directories on the way (one of them may have).
    pub fn forget(&self, maildir: &Path) {
        self.known().remove(maildir);
        lock(&self.on_the_way).clear();
    }

    fn checked(&self, dir: &Path) -> bool {
        lock(&self.on_the_way).contains(dir)
    }

    fn note_checked(&self, dir: &Path) {
        let mut set = lock(&self.on_the_way);
        if set.len() >= ON_THE_WAY_MAX {
            set.clear();
        }
        set.insert(dir.to_path_buf());
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        lock(&self.known)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

/// Gives a directory just made to `own`; if that fails, the directory
/// goes again (it is empty), so a retry makes it afresh instead of
/// finding it there with the wrong owner.
fn made(dir: &Path, created: &mut Vec<PathBuf>, own: Ownership) -> io::Result<()> {
    if let Err(e) = own.apply_dir(dir) {
        let _ = std::fs::remove_dir(dir);
        return Err(e);
    }
    created.push(dir.to_path_buf());
    Ok(())
}

/// Creates one directory (mode 0700, then `own`'s) unless it exists;
/// notes it if new.
fn make_dir(dir: &Path, created: &mut Vec<PathBuf>, own: Ownership) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => made(dir, created, own),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A missing parent (the base's own parents): create them too.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            made(dir, created, own)
        }
        Err(e) => Err(e),
    }
}

/// What [`make_checked`] found at a path.
enum Made {
    /// A directory: made now (and noted in `created`) or there already.
    Dir,
    /// A symlink, left alone.
    Symlink,
}

/// Creates one directory (mode 0700, then the owner's: [`made`]) below
/// an existing, checked one, or finds one there (left as it is). `mkdir` does not follow a symlink in the last place
/// (it fails with EEXIST), so only a name that exists is looked at, with
/// `lstat`: a symlink is [`Made::Symlink`], anything else not a directory
/// an error.
fn make_checked(dir: &Path, created: &mut Vec<PathBuf>, own: Ownership) -> io::Result<Made> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => made(dir, created, own).map(|()| Made::Dir),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let m = std::fs::symlink_metadata(dir)?;
            if m.file_type().is_symlink() {
                Ok(Made::Symlink)
            } else if m.is_dir() {
                Ok(Made::Dir)
            } else {
                Err(e)
            }
        }
        Err(e) => Err(e),
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
    fn checked_directories_are_not_trusted_for_the_mailbox_itself() {
        // The domain's directory is remembered after the first mailbox; a
        // second mailbox below it whose `tmp` is a symlink, or whose user
        // directory is a file, is still refused.
        let (_guard, root) = temp("cached");
        let base = root.join("mail");
        let p = MaildirPolicy::new(base.clone(), false);
        p.prepare(&base.join("ex.test/a/Maildir"), false).unwrap();
        let md = base.join("ex.test/b/Maildir");
        std::fs::create_dir_all(&md).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::os::unix::fs::symlink(root.join("target"), md.join("tmp")).unwrap();
        let err = p.prepare(&md, false).unwrap_err();
        assert!(matches!(err, MaildirError::Refused(..)), "{err}");
        std::fs::write(base.join("ex.test/c"), b"not a directory").unwrap();
        let err = p
            .prepare(&base.join("ex.test/c/Maildir"), false)
            .unwrap_err();
        assert!(matches!(err, MaildirError::Io(..)), "{err}");
        assert!(
            !root.join("target/new").exists(),
            "nothing made through the link"
        );
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
