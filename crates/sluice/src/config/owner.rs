//! `local.maildir_owner`: the account Maildirs belong to (Postfix:
//! `virtual_uid_maps`/`virtual_gid_maps` with a static value), so an IMAP
//! server running as that account (Dovecot's `mail_uid = vmail`) reads
//! and writes them. Written as an account name (`"vmail"`) or as
//! `"uid:gid"` numbers; a name is resolved when the configuration is read
//! (getpwnam_r), so an unknown account fails `check-config` there, with
//! the key's name.
//!
//! Trust: the operator's configuration and the account database. What
//! the daemon does with the ids (chown as root, or share the group when
//! unprivileged) is `deliver::maildir::owner`.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::ffi::CString;

/// `local.maildir_owner`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaildirOwner {
    /// As written (what `sluice config` prints back).
    pub text: String,
    pub uid: u32,
    pub gid: u32,
}

impl std::fmt::Display for MaildirOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

super::as_text!(MaildirOwner);

impl<'de> serde::Deserialize<'de> for MaildirOwner {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        MaildirOwner::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl MaildirOwner {
    /// `"uid:gid"` or an account name (its uid and primary group).
    pub fn parse(text: &str) -> Result<MaildirOwner, String> {
        let bad = |why: &str| format!("local.maildir_owner = {text:?}: {why}");
        if let Some((u, g)) = text.split_once(':') {
            let (Ok(uid), Ok(gid)) = (u.parse::<u32>(), g.parse::<u32>()) else {
                return Err(bad("want an account name or \"uid:gid\" (two numbers)"));
            };
            return Ok(MaildirOwner {
                text: text.into(),
                uid,
                gid,
            });
        }
        match account(text) {
            Ok(Some((uid, gid))) => Ok(MaildirOwner {
                text: text.into(),
                uid,
                gid,
            }),
            Ok(None) => Err(bad("no such account (create it, or give \"uid:gid\")")),
            Err(e) => Err(bad(&format!("cannot look the account up: {e}"))),
        }
    }
}

/// The uid and primary gid of the account `name`: getpwnam_r (the
/// reentrant form; a reload parses configurations while workers run),
/// with a buffer grown on ERANGE. `Ok(None)`: no such account.
pub fn account(name: &str) -> std::io::Result<Option<(u32, u32)>> {
    let Ok(c_name) = CString::new(name) else {
        return Ok(None);
    };
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: all-zero is a valid passwd (null pointers, zero ids).
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is to live, writable storage of the stated
        // size (the name is NUL-terminated); only the ids are read back.
        let rc = unsafe {
            libc::getpwnam_r(c_name.as_ptr(), &mut pw, buf.as_mut_ptr(), size, &mut found)
        };
        if rc == libc::ERANGE && size < 1 << 20 {
            size *= 4;
            continue;
        }
        return match (rc, found.is_null()) {
            (0, true) => Ok(None),
            (0, false) => Ok(Some((pw.pw_uid, pw.pw_gid))),
            // "Not found" may also come back as one of these.
            (libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM, _) => Ok(None),
            (e, _) => Err(std::io::Error::from_raw_os_error(e)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        let root = MaildirOwner::parse("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        let n = MaildirOwner::parse("5000:5001").unwrap();
        assert_eq!(
            (n.uid, n.gid, n.to_string().as_str()),
            (5000, 5001, "5000:5001")
        );
        let e = MaildirOwner::parse("no-such-account-sluice").unwrap_err();
        assert!(
            e.contains("local.maildir_owner") && e.contains("no such account"),
            "{e}"
        );
        for bad in ["5000:", ":5000", "a:b", "1:2:3", "-1:5"] {
            assert!(MaildirOwner::parse(bad).is_err(), "{bad}");
        }
    }
}
