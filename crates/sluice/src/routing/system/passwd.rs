//! The passwd database (getpwnam_r: NSS, so /etc/passwd, LDAP, … as the
//! system is configured): who a system recipient is, and their home.
#![allow(unsafe_code)] // getpwnam_r: the only way to the NSS passwd database

use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// A system account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: String,
}

/// The account `name`: `Ok(None)` when there is none (a name with a NUL
/// or a `/` is none), `Err` when the database cannot answer.
pub fn account(name: &str) -> std::io::Result<Option<Account>> {
    if name.is_empty() || name.contains('/') {
        return Ok(None);
    }
    let Ok(c_name) = CString::new(name) else {
        return Ok(None);
    };
    lookup(|pw, buf, size, found| {
        // SAFETY: every pointer is to live, writable storage of the stated
        // size (the name is NUL-terminated).
        unsafe { libc::getpwnam_r(c_name.as_ptr(), pw, buf, size, found) }
    })
}

/// The account of `uid` (getpwuid_r), as [`account`].
pub fn account_by_uid(uid: u32) -> std::io::Result<Option<Account>> {
    lookup(|pw, buf, size, found| {
        // SAFETY: as in `account`.
        unsafe { libc::getpwuid_r(uid, pw, buf, size, found) }
    })
}

/// Runs a getpw*_r call with a buffer grown until it fits.
fn lookup(
    call: impl Fn(*mut libc::passwd, *mut libc::c_char, usize, *mut *mut libc::passwd) -> i32,
) -> std::io::Result<Option<Account>> {
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: all-zero is a valid passwd (null pointers, zero ids).
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&mut pw, buf.as_mut_ptr(), size, &mut found);
        if rc == libc::ERANGE && size < 1 << 20 {
            size *= 4;
            continue;
        }
        return match (rc, found.is_null()) {
            (0, true) => Ok(None),
            (0, false) => Ok(Some(Account {
                name: text(pw.pw_name),
                uid: pw.pw_uid,
                gid: pw.pw_gid,
                home: PathBuf::from(text(pw.pw_dir)),
                shell: text(pw.pw_shell),
            })),
            (libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM, _) => Ok(None),
            (e, _) => Err(std::io::Error::from_raw_os_error(e)),
        };
    }
}

fn text(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: getpwnam_r filled `p` with a NUL-terminated string inside
    // the buffer, which is alive while the caller's loop iteration is.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn root_is_found_and_nonsense_is_not() {
        let root = super::account("root").unwrap().unwrap();
        assert_eq!(root.uid, 0);
        assert!(super::account("no-such-user-xq").unwrap().is_none());
        assert!(super::account("../etc").unwrap().is_none());
        assert_eq!(super::account_by_uid(0).unwrap().unwrap().name, root.name);
    }
}
