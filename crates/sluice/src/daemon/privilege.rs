//! Least privilege for `sluice serve`: started as root, the daemon binds
//! its listening sockets, hands its state directory and log file to the
//! account it runs as (`user`, default `sluice` when that account exists),
//! and gives up root for good before it opens anything else. It refuses to
//! go on as root unless `run_as_root = true` says so.
//!
//! Only the sockets (and a missing data_dir or log file, given to the
//! account at once) are made as root; root never changes the owner of
//! anything already inside data_dir (the account could have planted a
//! link there): a tree not all the account's is refused with the command
//! that fixes it. The spool, the admin socket, the log and every later
//! file are created by the account itself (with the
//! umask of 077 `serve` sets, so 0600/0700; the log 0640), and keys are
//! read as that account at start and at every reload (so they must be
//! readable by it — `check-config` warns when others may read them).
//! A reload that adds a port below 1024 then fails and is refused whole,
//! as any reload whose socket cannot be bound.
//!
//! With `local.maildir_owner`, the account keeps one supplementary group,
//! the owner's, when it is a member of it (checked before anything is
//! bound, [`maildir_group`]): the unprivileged daemon gives the Maildirs
//! it makes that group, for the owner (Dovecot as `vmail`) to use.
//!
//! Trust: the account database (getpwnam, getgrouplist). Invariant: after
//! [`drop_to`] returns `Ok`, the process has no root uid, gid or
//! supplementary groups, and cannot get them back (checked).
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::path::Path;

/// The account to run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// Why privileges could not be given up.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("user {0:?} does not exist")]
    NoSuchUser(String),
    #[error(
        "refusing to run as root: create the `sluice` account, set `user = \"…\"`, or set `run_as_root = true`"
    )]
    WouldStayRoot,
    #[error("user {0:?} is root (uid 0): set another user, or `run_as_root = true`")]
    UserIsRoot(String),
    #[error("cannot give {path} to {user}: {err}")]
    Chown {
        path: String,
        user: String,
        err: std::io::Error,
    },
    #[error("{path} is not {user}'s: as root, run `chown -R {user}: {dir}` once (root does not change owners inside it)")]
    NotOwned {
        path: String,
        dir: String,
        user: String,
    },
    #[error("cannot become {user}: {err}")]
    Switch { user: String, err: std::io::Error },
    #[error("local.maildir_owner = \"{owner}\": the daemon's account {user} is not in group {group} (gid {gid}), so the Maildirs it makes cannot be that group's for the owner to read: as root, run `usermod -a -G {group} {user}` (or run the daemon as root with run_as_root, or as the owner)")]
    NotInGroup {
        owner: String,
        user: String,
        group: String,
        gid: u32,
    },
    #[error("local.maildir_owner = \"{0}\": its group is root's (gid 0), which the unprivileged daemon does not keep: give the mail account a group of its own")]
    RootGroup(String),
    #[error("{what} {path} cannot be read by {user}, the account the daemon runs as ({why}): `chgrp {user} {path}` and `chmod 0640 {path}`")]
    Unreadable {
        what: &'static str,
        path: String,
        user: String,
        why: String,
    },
}

/// Every key and certificate file `config` names, with what it is for.
fn key_files(config: &crate::config::Config) -> Vec<(&'static str, &Path)> {
    let tls = [
        ("TLS certificate", config.tls.cert_file.as_deref()),
        ("TLS key", config.tls.key_file.as_deref()),
    ];
    let tls = tls.into_iter().filter_map(|(w, p)| p.map(|p| (w, p)));
    let dkim = config
        .dkim
        .keys
        .iter()
        .map(|k| ("DKIM key", k.key_file.as_path()));
    tls.chain(dkim).collect()
}

/// Checks that `account` (gid only: `drop_to` clears supplementary
/// groups) can read every key file `config` names, so a root start stops
/// before it binds or says it listens, not after dropping root. Judged
/// from owner and mode bits (root cannot ask the kernel as another uid);
/// a file that does not exist is left to the load that names it.
pub fn keys_readable(
    config: &crate::config::Config,
    account: &Account,
) -> Result<(), PrivilegeError> {
    use std::os::unix::fs::MetadataExt;
    for (what, path) in key_files(config) {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let mode = meta.mode();
        let readable = match (meta.uid() == account.uid, meta.gid() == account.gid) {
            (true, _) => mode & 0o400 != 0,
            (false, true) => mode & 0o040 != 0,
            (false, false) => mode & 0o004 != 0,
        };
        let dir_ok = path.parent().is_none_or(|d| searchable(d, account));
        if !(readable && dir_ok) {
            let why = match readable {
                true => "a directory on its path is closed to it".to_string(),
                false => format!(
                    "owner uid {}, group gid {}, mode {:04o}",
                    meta.uid(),
                    meta.gid(),
                    mode & 0o7777
                ),
            };
            return Err(PrivilegeError::Unreadable {
                what,
                path: path.display().to_string(),
                user: account.name.clone(),
                why,
            });
        }
    }
    Ok(())
}

/// Whether `account` may pass through `dir` and every directory above it.
fn searchable(dir: &Path, account: &Account) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return true;
    };
    dir.ancestors().all(|d| match std::fs::metadata(d) {
        Ok(m) => match (m.uid() == account.uid, m.gid() == account.gid) {
            (true, _) => m.mode() & 0o100 != 0,
            (false, true) => m.mode() & 0o010 != 0,
            (false, false) => m.mode() & 0o001 != 0,
        },
        Err(_) => true,
    })
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The account called `name`, from the account database.
pub fn lookup(name: &str) -> Option<Account> {
    let c_name = CString::new(name).ok()?;
    // SAFETY: getpwnam reads a NUL-terminated name and returns a pointer to
    // static storage or NULL; the fields are copied out before any other
    // call that could overwrite that storage.
    unsafe {
        let pw = libc::getpwnam(c_name.as_ptr());
        if pw.is_null() {
            return None;
        }
        Some(Account {
            name: name.to_string(),
            uid: (*pw).pw_uid,
            gid: (*pw).pw_gid,
        })
    }
}

/// The account a root-started daemon switches to: `user`, else `sluice`
/// if it exists; `None` to stay root (allowed only with `run_as_root`).
pub fn target(user: Option<&str>, run_as_root: bool) -> Result<Option<Account>, PrivilegeError> {
    let account = match user {
        Some(name) => Some(lookup(name).ok_or_else(|| PrivilegeError::NoSuchUser(name.into()))?),
        None => lookup("sluice"),
    };
    match account {
        Some(a) if a.uid == 0 && !run_as_root => Err(PrivilegeError::UserIsRoot(a.name)),
        Some(a) if a.uid == 0 => Ok(None),
        Some(a) => Ok(Some(a)),
        None if run_as_root => Ok(None),
        None => Err(PrivilegeError::WouldStayRoot),
    }
}

/// Makes `dir` the account's if it is new (or an empty root-owned
/// directory), and the log file with it; refuses (naming the fix) when
/// anything under `dir` belongs to someone else. Root never changes the
/// owner of what is already inside: the account could have put a link
/// there (to /etc/shadow, or a directory swapped for a symlink), and
/// root following it would hand the target over.
pub fn hand_over(
    dir: &Path,
    log_file: Option<&Path>,
    account: &Account,
) -> Result<(), PrivilegeError> {
    let err = |path: &Path, err: std::io::Error| PrivilegeError::Chown {
        path: path.display().to_string(),
        user: account.name.clone(),
        err,
    };
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    }
    let empty = std::fs::read_dir(dir)
        .map_err(|e| err(dir, e))?
        .next()
        .is_none();
    if empty {
        std::os::unix::fs::lchown(dir, Some(account.uid), Some(account.gid))
            .map_err(|e| err(dir, e))?;
    }
    if let Some(stranger) = not_owned(dir, account.uid).map_err(|e| err(dir, e))? {
        return Err(PrivilegeError::NotOwned {
            path: stranger.display().to_string(),
            dir: dir.display().to_string(),
            user: account.name.clone(),
        });
    }
    if let Some(log) = log_file {
        hand_over_log(log, account).map_err(|e| err(log, e))?;
    }
    Ok(())
}

/// The first entry at or under `path` not owned by `uid` (symlinks are
/// looked at, never followed).
fn not_owned(path: &Path, uid: u32) -> std::io::Result<Option<std::path::PathBuf>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path)?;
    if meta.uid() != uid {
        return Ok(Some(path.to_path_buf()));
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            if let Some(found) = not_owned(&entry?.path(), uid)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// The log file, made now if missing (0640, in a directory made for the
/// account if there was none), is the account's; one that exists must be.
fn hand_over_log(log: &Path, account: &Account) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    if let Some(parent) = log.parent().filter(|p| !p.exists()) {
        std::fs::create_dir_all(parent)?;
        std::os::unix::fs::chown(parent, Some(account.uid), Some(account.gid))?;
    }
    match std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log)
    {
        Ok(made) => {
            made.set_permissions(std::fs::Permissions::from_mode(0o640))?;
            std::os::unix::fs::fchown(&made, Some(account.uid), Some(account.gid))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match std::fs::symlink_metadata(log)?.uid() == account.uid {
                true => Ok(()),
                false => Err(std::io::Error::other(format!(
                    "it exists and is not {}'s (chown it, or remove it)",
                    account.name
                ))),
            }
        }
        Err(e) => Err(e),
    }
}

/// The supplementary group the daemon's account must keep for
/// `local.maildir_owner` (`Some(gid)`), `None` when it needs none (no
/// owner, the owner's group is the account's own, or the daemon stays
/// root); an error naming the fix when the account is not in the group.
/// `account`: the one a root start drops to; `None` and not root: the
/// running process's groups are what counts.
pub fn maildir_group(
    config: &crate::config::Config,
    account: Option<&Account>,
) -> Result<Option<u32>, PrivilegeError> {
    let Some(owner) = &config.local.maildir_owner else {
        return Ok(None);
    };
    let gid = owner.gid;
    let (user, primary, member) = match account {
        Some(a) => (a.name.clone(), a.gid, groups_of(a).contains(&gid)),
        None if is_root() => return Ok(None),
        None => {
            // SAFETY: geteuid and getegid have no preconditions.
            let (uid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
            (
                format!("(uid {uid})"),
                egid,
                process_groups().contains(&gid),
            )
        }
    };
    if primary == gid {
        return Ok(None);
    }
    if gid == 0 {
        return Err(PrivilegeError::RootGroup(owner.text.clone()));
    }
    if !member {
        return Err(PrivilegeError::NotInGroup {
            owner: owner.text.clone(),
            user,
            group: group_name(gid).unwrap_or_else(|| gid.to_string()),
            gid,
        });
    }
    Ok(account.map(|_| gid))
}

/// Every group `account` is a member of (getgrouplist).
fn groups_of(account: &Account) -> Vec<u32> {
    let Ok(name) = CString::new(account.name.as_str()) else {
        return Vec::new();
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let asked = n;
        // SAFETY: `groups` has room for `n` gids; `name` is NUL-terminated.
        let rc =
            unsafe { libc::getgrouplist(name.as_ptr(), account.gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n.max(0) as usize);
            return groups;
        }
        if n <= asked {
            n = asked * 2;
        }
        if n > 65536 {
            return Vec::new();
        }
    }
}

/// The running process's supplementary groups.
fn process_groups() -> Vec<u32> {
    // SAFETY: with size 0, getgroups only counts.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
    // SAFETY: `groups` has room for `n` gids.
    let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    groups.truncate(got.max(0) as usize);
    groups
}

/// The name of group `gid` (getgrgid_r), if it has one.
fn group_name(gid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: all-zero is a valid group (null pointers, zero id).
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is to live, writable storage of the stated
    // size; on success `found` points to `gr`, whose name is in `buf`.
    let rc = unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || gr.gr_name.is_null() {
        return None;
    }
    // SAFETY: gr_name is a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(gr.gr_name) };
    Some(name.to_string_lossy().into_owned())
}

/// Becomes `account` for good: supplementary groups replaced by `keep`
/// alone (the Maildir owner's group, see [`maildir_group`]; never 0),
/// then gid, then uid; then checks that root cannot be had back.
pub fn drop_to(account: &Account, keep: Option<u32>) -> Result<(), PrivilegeError> {
    let fail = |err: std::io::Error| PrivilegeError::Switch {
        user: account.name.clone(),
        err,
    };
    let gid = account.gid as libc::gid_t;
    let mut groups = vec![gid];
    groups.extend(keep.filter(|&g| g != 0 && g != gid));
    // SAFETY: setgroups reads `groups.len()` gids from a valid pointer;
    // setgid/setuid take plain integers. Each result is checked. Threads:
    // the calls below change the credentials of every thread (glibc
    // broadcasts set*id to all threads of the process).
    unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        if libc::setgid(gid) != 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        if libc::setuid(account.uid as libc::uid_t) != 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        if libc::setuid(0) == 0 || libc::geteuid() == 0 {
            return Err(fail(std::io::Error::other("root could be had back")));
        }
    }
    Ok(())
}

/// A key file others (or a group other than `account`'s) may read: the
/// warning `check-config` prints, or `None`.
pub fn key_warning(what: &str, path: &Path, account: Option<&Account>) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.mode() & 0o777;
    let group_ok = account.is_some_and(|a| a.gid == meta.gid());
    let exposed = mode & 0o004 != 0 || (mode & 0o040 != 0 && !group_ok);
    exposed.then(|| {
        format!(
            "warning: {what} {} is readable by {} (mode {mode:04o}): chmod o-r,g-r, or give its group to the daemon's account only",
            path.display(),
            if mode & 0o004 != 0 { "everyone" } else { "its group" }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_readable_by_others_are_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.pem");
        std::fs::write(&key, "x").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let w = key_warning("TLS key", &key, None).unwrap();
        assert!(w.contains("readable by everyone (mode 0644)"), "{w}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(key_warning("TLS key", &key, None)
            .unwrap()
            .contains("its group"));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(key_warning("TLS key", &key, None), None);
    }

    #[test]
    fn a_key_the_account_cannot_read_is_named() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = dir.path().join("k.pem");
        std::fs::write(&key, "x").unwrap();
        let meta = std::fs::metadata(&key).unwrap();
        let mut config = crate::config::Config::default();
        config.tls.key_file = Some(key.clone());
        config.tls.cert_file = Some(key.clone());
        let other = Account {
            name: "other".into(),
            uid: meta.uid() + 1,
            gid: meta.gid() + 1,
        };
        let set = |m| std::fs::set_permissions(&key, std::fs::Permissions::from_mode(m)).unwrap();
        set(0o600);
        let e = keys_readable(&config, &other).unwrap_err().to_string();
        assert!(
            e.contains("cannot be read by other") && e.contains("mode 0600"),
            "{e}"
        );
        let owner = Account {
            uid: meta.uid(),
            ..other.clone()
        };
        assert!(keys_readable(&config, &owner).is_ok());
        let group = Account {
            gid: meta.gid(),
            ..other.clone()
        };
        assert!(keys_readable(&config, &group).is_err());
        set(0o640);
        assert!(keys_readable(&config, &group).is_ok());
        assert!(keys_readable(&config, &other).is_err());
    }

    #[test]
    fn an_unknown_user_is_an_error_and_root_needs_saying_so() {
        assert!(matches!(
            target(Some("no-such-user-sluice-test"), false),
            Err(PrivilegeError::NoSuchUser(_))
        ));
        assert!(matches!(
            target(Some("root"), false),
            Err(PrivilegeError::UserIsRoot(_))
        ));
        assert_eq!(target(Some("root"), true).unwrap(), None);
    }
}
