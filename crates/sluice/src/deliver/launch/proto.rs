//! The launcher's requests and answers, and the checks the launcher
//! makes of a request before it runs anything.
//!
//! A request is one SOCK_SEQPACKET message: a JSON [`Request`] with file
//! descriptors attached (SCM_RIGHTS), the first of which is always the
//! socket the [`Answer`] goes back on. An `exec` request carries two more:
//! the command's standard input, then its standard output (also its
//! standard error).
//!
//! Trust: none. The daemon faces the network, so [`check`] assumes a
//! compromised sender: root (uid or gid 0) is refused, so is a program
//! that is not an absolute path, a uid with no account, a gid with no
//! group, a NUL byte anywhere, an environment name that is empty or
//! holds `=`, a relative directory and a zero time limit. What a request
//! may still ask is documented in `mod.rs`: a command as any other
//! account.

use std::ffi::CString;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The longest request the launcher reads (a longer one is refused).
pub const MAX_REQUEST: usize = 128 * 1024;

/// What the daemon asks of the launcher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Runs a command as another account (descriptors: answer socket,
    /// standard input, standard output and error).
    Exec(ExecRequest),
}

/// One command: what Postfix's pipe(8) would run as `user`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// The program (an absolute path) and its arguments.
    pub argv: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    /// The whole environment of the command (nothing else is added).
    pub env: Vec<(String, String)>,
    /// Its working directory (absolute).
    pub cwd: String,
    /// The command's process group is killed after this long.
    pub time_limit_ms: u64,
}

/// How a request went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    /// The command exited with this status.
    Exited(i32),
    /// The command was killed by this signal.
    Signaled(i32),
    /// The time limit was reached and the process group killed.
    TimedOut,
    /// The request was refused before anything ran (why).
    Refused(String),
    /// The command could not be started (why).
    Failed(String),
}

/// An exec request that passed [`check`], ready for execve.
#[derive(Debug)]
pub struct Checked {
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    pub cwd: CString,
    pub uid: u32,
    pub gid: u32,
    pub time_limit: Duration,
}

/// Checks `req` as the launcher must (see the module header); the
/// reason for a refusal.
pub fn check(req: &ExecRequest, policy: &super::Policy) -> Result<Checked, String> {
    if req.uid == 0 || req.gid == 0 {
        return Err("refusing to run a command as root (uid or gid 0)".into());
    }
    policy.permits(req.uid, req.gid, primary_gid(req.uid))?;
    let Some(program) = req.argv.first() else {
        return Err("no program".into());
    };
    if !program.starts_with('/') {
        return Err(format!("program {program:?} is not an absolute path"));
    }
    if !req.cwd.starts_with('/') {
        return Err(format!("directory {:?} is not absolute", req.cwd));
    }
    if req.time_limit_ms == 0 {
        return Err("no time limit".into());
    }
    if primary_gid(req.uid).is_none() {
        return Err(format!("no account has uid {}", req.uid));
    }
    if !group_exists(req.gid) {
        return Err(format!("no group has gid {}", req.gid));
    }
    let c = |s: &str| CString::new(s).map_err(|_| format!("NUL byte in {s:?}"));
    let argv = req
        .argv
        .iter()
        .map(|a| c(a))
        .collect::<Result<Vec<_>, _>>()?;
    let mut env = Vec::with_capacity(req.env.len());
    for (name, value) in &req.env {
        if name.is_empty() || name.contains('=') {
            return Err(format!("bad environment name {name:?}"));
        }
        env.push(c(&format!("{name}={value}"))?);
    }
    Ok(Checked {
        argv,
        env,
        cwd: c(&req.cwd)?,
        uid: req.uid,
        gid: req.gid,
        time_limit: Duration::from_millis(req.time_limit_ms),
    })
}

/// The primary group of the account with uid `uid`, if there is one
/// (getpwuid_r).
#[allow(unsafe_code)]
fn primary_gid(uid: u32) -> Option<u32> {
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: all-zero is a valid passwd (null pointers, zero ids).
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to live, writable storage of the stated size.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    (rc == 0 && !found.is_null()).then_some(pw.pw_gid)
}

/// Whether the group database has gid `gid` (getgrgid_r).
#[allow(unsafe_code)]
fn group_exists(gid: u32) -> bool {
    let mut buf = vec![0 as libc::c_char; 65536];
    // SAFETY: all-zero is a valid group (null pointers, zero id).
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is to live, writable storage of the stated size.
    let rc = unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut found) };
    rc == 0 && !found.is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nobody() -> ExecRequest {
        ExecRequest {
            argv: vec!["/usr/bin/id".into(), "-u".into()],
            uid: 65534,
            gid: 65534,
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: "/".into(),
            time_limit_ms: 1000,
        }
    }

    fn nobody_only() -> crate::deliver::launch::Policy {
        crate::deliver::launch::Policy {
            allow: vec![(65534, 65534)],
            people_from: None,
        }
    }

    #[test]
    fn requests_a_compromised_daemon_could_send_are_refused() {
        let ok = check(&nobody(), &nobody_only()).unwrap();
        assert_eq!(ok.env, [CString::new("PATH=/usr/bin:/bin").unwrap()]);
        let refused = |f: &dyn Fn(&mut ExecRequest), want: &str| {
            let mut req = nobody();
            f(&mut req);
            let why = check(&req, &nobody_only()).unwrap_err();
            assert!(why.contains(want), "{req:?}: {why}");
        };
        refused(&|r| r.uid = 0, "as root");
        refused(&|r| r.gid = 0, "as root");
        refused(&|r| r.argv.clear(), "no program");
        refused(&|r| r.argv[0] = "id".into(), "not an absolute path");
        refused(&|r| r.argv[0] = "".into(), "not an absolute path");
        refused(&|r| r.argv[1] = "a\0b".into(), "NUL byte");
        refused(&|r| r.env.push(("A=B".into(), "c".into())), "environment");
        refused(&|r| r.env.push((String::new(), "c".into())), "environment");
        refused(&|r| r.env[0].1 = "x\0y".into(), "NUL byte");
        refused(&|r| r.cwd = "tmp".into(), "not absolute");
        refused(&|r| r.time_limit_ms = 0, "time limit");
        refused(
            &|r| r.uid = 3_999_999_999,
            "not an account the configuration",
        );
        refused(&|r| r.gid = 42, "not an account the configuration");
        refused(&|r| r.uid = 1, "not an account the configuration");
    }

    #[test]
    fn malformed_json_is_an_error_not_a_panic() {
        for text in [
            "",
            "{",
            "null",
            "{\"exec\":{}}",
            "{\"exec\":{\"argv\":[],\"uid\":-1,\"gid\":1,\"env\":[],\"cwd\":\"/\",\"time_limit_ms\":1}}",
            "{\"run_as_root\":{}}",
            "{\"exec\":{\"argv\":[\"/bin/sh\"],\"uid\":1,\"gid\":1,\"env\":[],\"cwd\":\"/\",\"time_limit_ms\":1,\"setuid\":0}}",
        ] {
            assert!(serde_json::from_str::<Request>(text).is_err(), "{text}");
        }
        let json = serde_json::to_string(&Request::Exec(nobody())).unwrap();
        assert_eq!(
            serde_json::from_str::<Request>(&json).unwrap(),
            Request::Exec(nobody())
        );
    }
}
