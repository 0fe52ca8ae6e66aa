//! Writing one message in mbox format as local(8) does: the `From `
//! line, `Return-Path:`, `X-Original-To:`, `Delivered-To:`, the message
//! with CRLF made LF and body lines starting `From ` quoted as `>From `,
//! and a blank line; appended under the `mailbox_delivery_lock` locks
//! (`fcntl`, `dotlock`), truncated back to its old end if writing fails.
//! Also the Maildir variant (`home_mailbox = "Maildir/"`) and the headers
//! both share.
//!
//! Never through a symlink (O_NOFOLLOW), only into a regular file with
//! one link; a mailbox not owned by its user is refused
//! (`strict_mailbox_ownership`). Blocking: call on the blocking pool.
#![allow(unsafe_code)] // fcntl(F_SETLK): no safe wrapper in std

use std::io::{self, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What goes before the message.
pub struct Envelope<'a> {
    pub sender: &'a str,
    /// `X-Original-To:` (none when empty).
    pub original: &'a str,
    /// `Delivered-To:`.
    pub delivered: &'a str,
}

/// How an mbox file is opened.
pub struct MboxOptions {
    /// Owner to give a file this call creates (root creating in the spool).
    pub chown: Option<(u32, u32)>,
    /// The uid an existing file must have (`strict_mailbox_ownership`).
    pub owner: Option<u32>,
    pub fcntl: bool,
    pub dotlock: bool,
}

/// Why a write failed: temporary (4.x.x) or permanent (5.x.x), with text.
#[derive(Debug)]
pub struct WriteError {
    pub permanent: bool,
    pub status: &'static str,
    pub text: String,
}

fn temp(status: &'static str, text: String) -> WriteError {
    WriteError {
        permanent: false,
        status,
        text,
    }
}

/// The headers local(8) prepends, LF-terminated.
pub fn headers(env: &Envelope) -> String {
    let mut h = format!("Return-Path: <{}>\n", env.sender);
    if !env.original.is_empty() {
        h.push_str(&format!("X-Original-To: {}\n", env.original));
    }
    h.push_str(&format!(
        "Delivered-To: {}\n",
        env.delivered.to_ascii_lowercase()
    ));
    h
}

/// The message as it goes into a file: CRLF → LF; `quote`: body and
/// header lines starting `From ` get a `>`.
pub fn lf_text(body: &[u8], quote: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 64);
    for line in body.split_inclusive(|&b| b == b'\n') {
        let line = line
            .strip_suffix(b"\r\n")
            .or_else(|| line.strip_suffix(b"\n"));
        let line = line.unwrap_or(b"");
        if quote && line.starts_with(b"From ") {
            out.push(b'>');
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out
}

/// The `From ` line: `From sender  Sat Nov 28 19:58:00 2026` (UTC).
pub fn from_line(sender: &str) -> String {
    let who = if sender.is_empty() {
        "MAILER-DAEMON"
    } else {
        sender
    };
    let now = crate::timefmt::asctime(crate::timefmt::now_millis());
    format!("From {who}  {now}\n")
}

/// Appends the message to the mbox `path` (created 0600 if missing).
pub fn append(
    path: &Path,
    env: &Envelope,
    body: &[u8],
    opts: &MboxOptions,
) -> Result<(), WriteError> {
    let shown = path.display();
    let _dotlock = match opts.dotlock {
        true => Some(DotLock::take(path).map_err(|e| {
            temp(
                "4.2.0",
                format!("cannot create lock file {shown}.lock: {e}"),
            )
        })?),
        false => None,
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                permanent("5.2.0", format!("destination {shown} is a symbolic link"))
            }
            _ => temp("4.2.0", format!("cannot open file {shown}: {e}")),
        })?;
    let meta = file.metadata().map_err(|e| temp("4.2.0", e.to_string()))?;
    if !meta.file_type().is_file() || meta.nlink() != 1 {
        return Err(permanent(
            "5.2.0",
            format!("destination {shown} is not a regular file"),
        ));
    }
    let created = meta.len() == 0 && opts.chown.is_some() && meta.uid() == 0;
    if let (true, Some((uid, gid))) = (created, opts.chown) {
        std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
            .map_err(|e| temp("4.2.0", format!("cannot chown {shown}: {e}")))?;
    } else if let Some(uid) = opts.owner {
        if meta.uid() != uid {
            return Err(temp(
                "4.2.0",
                format!("destination {shown} is not owned by recipient"),
            ));
        }
    }
    if opts.fcntl {
        fcntl_lock(&file).map_err(|e| temp("4.2.0", format!("cannot lock {shown}: {e}")))?;
    }
    let end = file
        .seek(io::SeekFrom::End(0))
        .map_err(|e| temp("4.2.0", e.to_string()))?;
    let mut text = from_line(env.sender).into_bytes();
    text.extend_from_slice(headers(env).as_bytes());
    text.extend_from_slice(&lf_text(body, true));
    text.push(b'\n');
    let written = file.write_all(&text).and_then(|_| file.sync_data());
    if let Err(e) = written {
        let _ = file.set_len(end);
        return Err(temp("4.2.0", format!("cannot update mailbox {shown}: {e}")));
    }
    Ok(())
}

fn permanent(status: &'static str, text: String) -> WriteError {
    WriteError {
        permanent: true,
        status,
        text,
    }
}

/// A write lock on the whole file, tried for up to 20 seconds (Postfix:
/// deliver_lock_attempts × deliver_lock_delay).
fn fcntl_lock(file: &std::fs::File) -> io::Result<()> {
    for _ in 0..20 {
        // SAFETY: all-zero is a valid flock; the fields are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as _;
        fl.l_whence = libc::SEEK_SET as _;
        // SAFETY: a valid descriptor and a live flock.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) } == 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Err(io::Error::other("the mailbox stays locked"))
}

/// `path.lock`, made with O_EXCL; removed when dropped. A lock older than
/// 500 seconds is stale and removed (Postfix: stale_lock_time).
struct DotLock(PathBuf);

impl DotLock {
    fn take(path: &Path) -> io::Result<DotLock> {
        let mut lock = path.as_os_str().to_owned();
        lock.push(".lock");
        let lock = PathBuf::from(lock);
        for _ in 0..20 {
            let made = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&lock);
            match made {
                Ok(_) => return Ok(DotLock(lock)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::symlink_metadata(&lock)
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(500));
                    if stale {
                        let _ = std::fs::remove_file(&lock);
                        continue;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("the lock file stays"))
    }
}

impl Drop for DotLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Delivers into the Maildir `dir` (made 0700 if missing): a unique name
/// in `tmp/`, synced, renamed into `new/`. As the caller's rights.
pub fn maildir(dir: &Path, hostname: &str, env: &Envelope, body: &[u8]) -> Result<(), WriteError> {
    let shown = dir.display();
    let fail = |e: io::Error| temp("4.2.0", format!("create maildir file {shown}: {e}"));
    for sub in ["", "tmp", "new", "cur"] {
        let d = dir.join(sub);
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let m = std::fs::symlink_metadata(&d).map_err(fail)?;
                if !m.is_dir() {
                    return Err(permanent(
                        "5.2.0",
                        format!("{} is not a directory", d.display()),
                    ));
                }
            }
            Err(e) => return Err(fail(e)),
        }
    }
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(
        "{}.P{}Q{seq}M{}.{}",
        now.as_secs(),
        std::process::id(),
        now.subsec_micros(),
        hostname.replace(['/', ':'], "_")
    );
    let tmp = dir.join("tmp").join(&name);
    let mut text = headers(env).into_bytes();
    text.extend_from_slice(&lf_text(body, false));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join("new").join(&name))
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}
