//! The settings of a `[transports.NAME]` with `service = "pipe"`:
//! Postfix's pipe(8) attributes in master.cf (`flags=DRO user=nobody
//! argv=/usr/bin/procmail -d ${user}`), its `size=` attribute, and the
//! per-transport main.cf parameters `NAME_time_limit` and
//! `NAME_destination_recipient_limit`.
//!
//! Values only: parsed and checked when the file is read (the account is
//! looked up then, so an unknown one fails `check-config`); the agent
//! (`deliver/pipe`) runs them. Trust: the administrator's file and the
//! account database. Invariant: a checked pipe transport has a command
//! and an account, and the account is neither root nor group 0 (Postfix
//! refuses both).
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::ffi::CString;

use serde::Deserialize;

use super::pipe_argv::PipeArg;

use super::owner::account;

/// Postfix's pipe(8) `flags=` letters that Sluice honours (all of
/// Postfix's but `X`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PipeFlags {
    /// `B`: a blank line after the message.
    pub blank: bool,
    /// `D`: `Delivered-To: recipient` first (one recipient per command).
    pub delivered_to: bool,
    /// `F`: a `From sender date` line first.
    pub from_line: bool,
    /// `O`: `X-Original-To: recipient as given` (one recipient per command).
    pub original_to: bool,
    /// `R`: `Return-Path: <sender>`.
    pub return_path: bool,
    /// `h`: the domain of `${recipient}`, `${original_recipient}`, and
    /// `${domain}`, `${nexthop}` folded to lower case.
    pub fold_host: bool,
    /// `q`: local parts of `${sender}`, `${recipient}`,
    /// `${original_recipient}` quoted as RFC 822 does.
    pub quote: bool,
    /// `u`: local parts of the recipient macros folded to lower case.
    pub fold_user: bool,
    /// `.`: a `.` before lines that begin with `.`.
    pub dot: bool,
    /// `>`: a `>` before lines that begin with `From `.
    pub escape_from: bool,
}

impl PipeFlags {
    pub fn parse(text: &str) -> Result<PipeFlags, String> {
        let mut f = PipeFlags::default();
        for c in text.chars() {
            let slot = match c {
                'B' => &mut f.blank,
                'D' => &mut f.delivered_to,
                'F' => &mut f.from_line,
                'O' => &mut f.original_to,
                'R' => &mut f.return_path,
                'h' => &mut f.fold_host,
                'q' => &mut f.quote,
                'u' => &mut f.fold_user,
                '.' => &mut f.dot,
                '>' => &mut f.escape_from,
                'X' => {
                    return Err(
                        "flag X (final delivery in success notices) is not supported".into(),
                    )
                }
                other => {
                    return Err(format!(
                        "unknown pipe flag {other:?} (want letters of BDFORhqu.>)"
                    ))
                }
            };
            *slot = true;
        }
        Ok(f)
    }

    /// A flag that needs one recipient per command (`D`, `O`).
    pub fn one_recipient(&self) -> bool {
        self.delivered_to || self.original_to
    }
}

impl std::fmt::Display for PipeFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = [
            (self.blank, 'B'),
            (self.delivered_to, 'D'),
            (self.from_line, 'F'),
            (self.original_to, 'O'),
            (self.return_path, 'R'),
            (self.fold_host, 'h'),
            (self.quote, 'q'),
            (self.fold_user, 'u'),
            (self.dot, '.'),
            (self.escape_from, '>'),
        ];
        let text: String = all.iter().filter(|(on, _)| *on).map(|(_, c)| *c).collect();
        f.write_str(&text)
    }
}

impl<'de> Deserialize<'de> for PipeFlags {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        PipeFlags::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// pipe(8)'s `user=`: an account, resolved when the file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipeUser {
    pub name: String,
    pub uid: u32,
    /// Its primary group (a `group` setting replaces it).
    pub gid: u32,
}

impl std::fmt::Display for PipeUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for PipeUser {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        PipeUser::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl PipeUser {
    /// An account name (never root: Postfix refuses it).
    pub fn parse(name: &str) -> Result<PipeUser, String> {
        let bad = |why: &str| format!("user = {name:?}: {why}");
        let (uid, gid) = match account(name) {
            Ok(Some(ids)) => ids,
            Ok(None) => return Err(bad("no such account")),
            Err(e) => return Err(bad(&format!("cannot look the account up: {e}"))),
        };
        if uid == 0 {
            return Err(bad("a pipe never runs as root (uid 0)"));
        }
        Ok(PipeUser {
            name: name.into(),
            uid,
            gid,
        })
    }
}

/// pipe(8)'s `user=name:group`: a group, resolved when the file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipeGroup {
    pub name: String,
    pub gid: u32,
}

impl std::fmt::Display for PipeGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for PipeGroup {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        match group_id(&name) {
            Some(0) => Err(format!("group = {name:?}: a pipe never runs with group 0")),
            Some(gid) => Ok(PipeGroup { name, gid }),
            None => Err(format!("group = {name:?}: no such group")),
        }
        .map_err(serde::de::Error::custom)
    }
}

super::as_text!(PipeFlags, PipeUser, PipeGroup);

/// The gid of the group `name` (getgrnam_r), or None.
fn group_id(name: &str) -> Option<u32> {
    let c_name = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: all-zero is a valid group (null pointers, zero id).
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is to live, writable storage of the stated
    // size (the name is NUL-terminated); only the id is read back.
    let rc = unsafe {
        libc::getgrnam_r(
            c_name.as_ptr(),
            &mut gr,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some(gr.gr_gid)
}

/// The pipe settings of one transport, as `[transports.NAME]` holds them.
#[derive(Debug, Clone, Copy)]
pub struct PipeSettings<'a> {
    pub argv: &'a [PipeArg],
    pub user: Option<&'a PipeUser>,
    pub max_recipients: Option<usize>,
    pub flags: PipeFlags,
    pub time_limit_secs: u64,
}

/// Postfix's default_destination_recipient_limit.
pub const DEFAULT_RECIPIENTS: usize = 50;

impl PipeSettings<'_> {
    /// Checks one pipe transport; `scope` names its section.
    pub fn validate(&self, scope: &str) -> Result<(), String> {
        let Some(program) = self.argv.first() else {
            return Err(format!(
                "{scope}: a pipe needs argv (the program and its arguments)"
            ));
        };
        let program = &program.text;
        if !program.starts_with('/') || program.contains('$') {
            return Err(format!(
                "{scope}: argv[0] {program:?} is not an absolute path without macros"
            ));
        }
        if self.user.is_none() {
            return Err(format!(
                "{scope}: a pipe needs user (Postfix's user=; never root)"
            ));
        }
        if self.time_limit_secs == 0 {
            return Err(format!("{scope}: time_limit_secs = 0 (want at least 1)"));
        }
        match self.max_recipients {
            Some(0) => Err(format!("{scope}: max_recipients = 0 (want at least 1)")),
            Some(n) if n > 1 && self.flags.one_recipient() => Err(format!(
                "{scope}: flags D and O prepend one recipient's header: max_recipients must be 1"
            )),
            _ => Ok(()),
        }
    }

    /// Recipients per command: the setting, else 1 with `D` or `O`, else
    /// Postfix's default of 50.
    pub fn recipients(&self) -> usize {
        match self.max_recipients {
            Some(n) => n,
            None if self.flags.one_recipient() => 1,
            None => DEFAULT_RECIPIENTS,
        }
    }
}

/// Postfix's command_time_limit.
pub const DEFAULT_TIME_LIMIT_SECS: u64 = 1000;

pub fn default_time_limit() -> u64 {
    DEFAULT_TIME_LIMIT_SECS
}

/// Whether `n` is the default (for `sluice config`'s output).
pub fn is_default_time_limit(n: &u64) -> bool {
    *n == DEFAULT_TIME_LIMIT_SECS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_print_back() {
        let f = PipeFlags::parse("DRO.>").unwrap();
        assert!(f.delivered_to && f.return_path && f.original_to && f.dot && f.escape_from);
        assert_eq!(f.to_string(), "DOR.>");
        assert!(PipeFlags::parse("X").is_err());
        assert!(PipeFlags::parse("Z").is_err());
    }

    #[test]
    fn root_is_refused() {
        let e = PipeUser::parse("root").unwrap_err();
        assert!(e.contains("never runs as root"), "{e}");
        assert!(PipeUser::parse("no-such-account-sluice").is_err());
        let nobody = PipeUser::parse("nobody").unwrap();
        assert_ne!(nobody.uid, 0);
    }
}
