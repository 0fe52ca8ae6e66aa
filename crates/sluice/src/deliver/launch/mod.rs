//! The privileged launcher: a small root process that runs commands as
//! other accounts for a daemon that gave root up (Postfix's answer is
//! master running pipe(8) and local(8) as root; ours is this process).
//!
//! Before it drops root, a daemon whose configuration needs it ([`needed`]:
//! a pipe transport whose account is not the daemon's, or `[system]`)
//! starts the launcher by fork and exec of its own binary (`sluice
//! launcher`, hidden from help and manual) with one end of a
//! SOCK_SEQPACKET socketpair as its only channel ([`client`]). The
//! launcher is a fresh single-threaded process without an async runtime,
//! so it may fork: per request it forks a supervisor (root) that forks the
//! command (groups = [gid], gid, uid, root checked gone, a process group
//! of its own, execve with exactly the environment given), waits with the
//! time limit, kills the group at the limit and answers on the request's
//! own answer socket ([`server`], [`supervise`]). Requests and answers are
//! JSON ([`proto`]); descriptors travel by SCM_RIGHTS ([`fdpass`]).
//!
//! The security boundary. The daemon faces the network, so the launcher
//! trusts nothing it sends: it refuses uid 0 and gid 0, an account the
//! configuration does not run commands as ([`policy`]: fixed on its
//! command line when it starts, before the daemon faces the network), a
//! program that is not an absolute path, an account or group that does
//! not exist, and any malformed request (answered, never a panic or an
//! exit). What it does not refuse is the point of it: a compromised
//! daemon can run any command as those accounts (each pipe transport's,
//! and with `[system]` the people's and `default_privs`), as Postfix's
//! root-run local(8) and pipe(8) could be made to; it can never run one
//! as root (uid, gid and groups are all set before execve, and the child
//! checks that setuid(0) fails). The launcher exits when the channel
//! closes: the daemon stopped or died (SIGKILL included); a command whose
//! daemon is gone has its process group killed.
//!
//! The process's launcher is one per process: it can only be started
//! while the process is root, before the drop, so a reload cannot start
//! one (a transport added by a reload that needs it defers until the next
//! start, as without it). [`install`] keeps it for the pipe runner
//! (`deliver::pipe::exec`), which uses it when the process is not root and
//! the command's account is not the process's own.

pub mod client;
pub mod fdpass;
pub mod policy;
pub mod proto;
pub mod server;
pub mod supervise;

use std::sync::OnceLock;

pub use client::{Call, Launcher};
pub use policy::Policy;
pub use proto::{Answer, ExecRequest};

use crate::config::transports::Service;
use crate::config::Config;

static LAUNCHER: OnceLock<Launcher> = OnceLock::new();

/// Keeps `launcher` as the process's (once; a second is stopped).
pub fn install(launcher: Launcher) {
    if let Err(extra) = LAUNCHER.set(launcher) {
        let _ = extra.stop();
    }
}

/// The process's launcher, if one was started.
pub fn installed() -> Option<&'static Launcher> {
    LAUNCHER.get()
}

/// Whether a daemon running as `uid:gid` needs the launcher for
/// `config`: a pipe transport runs as another account or group, or
/// `[system]` delivers to system accounts (their `|command` targets).
pub fn needed(config: &Config, uid: u32, gid: u32) -> bool {
    let other = |t: &crate::config::transports::TransportConfig| {
        let Some(user) = &t.user else {
            return false;
        };
        let group = t.group.as_ref().map_or(user.gid, |g| g.gid);
        user.uid != uid || group != gid
    };
    config.system.enabled()
        || config
            .transports
            .values()
            .any(|t| t.service == Service::Pipe && other(t))
}
