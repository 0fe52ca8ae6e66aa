//! Delivery rights: the file-system identity of the calling thread
//! switched to a user's (Linux setfsuid/setfsgid and the thread's own
//! supplementary groups, through the raw system calls, which change the
//! calling thread only) for as long as an [`AsUser`] lives.
//!
//! Why not a forked child with setuid: the daemon is one multi-threaded
//! process (fork after threads is unsafe outside exec), and a file opened
//! with the user's file-system identity is created as theirs and checked
//! against their permissions by the kernel: a `.forward` naming
//! `/etc/shadow` gets EACCES, not root's write. Signals and ptrace still
//! see the daemon's ids, which is harmless (no code of the user's runs).
//!
//! Invariant: only on a blocking-pool thread, never across an await; the
//! guard puts the daemon's identity back when dropped (also on panic).
#![allow(unsafe_code)] // setfsuid, setfsgid, setgroups: no safe wrapper

use std::io;

/// The thread acts as `uid:gid` (groups: `gid` only) until dropped.
pub struct AsUser {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

/// Whether the process may act as other users (it is root).
pub fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the process may act as `uid` (it is root, it is `uid`, or the
/// root launcher runs commands for it).
pub fn can_act_as(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    let own = unsafe { libc::geteuid() } == uid;
    // A command also runs through the root launcher (pipe's runner asks
    // it), never as root.
    privileged() || own || (uid != 0 && crate::deliver::launch::installed().is_some())
}

impl AsUser {
    /// Switches the calling thread's file-system identity to `uid:gid`.
    /// Not root: only the daemon's own identity can be had.
    pub fn become_user(uid: u32, gid: u32) -> io::Result<AsUser> {
        // SAFETY: plain system calls without pointers.
        let (my_uid, my_gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if !privileged() {
            if uid == my_uid {
                return Ok(AsUser {
                    uid,
                    gid: my_gid,
                    groups: Vec::new(),
                });
            }
            return Err(io::Error::other("delivery as another user needs root"));
        }
        let groups = thread_groups()?;
        set_groups(&[gid])?;
        // SAFETY: plain system calls without pointers.
        unsafe {
            libc::setfsgid(gid);
            libc::setfsuid(uid);
        }
        let guard = AsUser {
            uid: my_uid,
            gid: my_gid,
            groups,
        };
        // SAFETY: as above; -1 (invalid) changes nothing and returns the current id.
        let (now_uid, now_gid) = unsafe { (libc::setfsuid(u32::MAX), libc::setfsgid(u32::MAX)) };
        if now_uid as u32 != uid || now_gid as u32 != gid {
            return Err(io::Error::other("setfsuid/setfsgid did not take"));
        }
        Ok(guard)
    }
}

impl Drop for AsUser {
    fn drop(&mut self) {
        if !privileged() {
            return;
        }
        // SAFETY: plain system calls without pointers.
        unsafe {
            libc::setfsuid(self.uid);
            libc::setfsgid(self.gid);
        }
        let _ = set_groups(&self.groups);
    }
}

fn thread_groups() -> io::Result<Vec<libc::gid_t>> {
    let mut groups = vec![0 as libc::gid_t; 256];
    // SAFETY: the buffer holds 256 entries, as said.
    let n = unsafe { libc::getgroups(256, groups.as_mut_ptr()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    groups.truncate(n as usize);
    Ok(groups)
}

/// setgroups for this thread only (the raw call; glibc's wrapper changes
/// every thread of the process).
fn set_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: the pointer and length describe a live slice of gid_t.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}
