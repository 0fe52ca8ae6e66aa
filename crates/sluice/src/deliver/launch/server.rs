//! The launcher process (`sluice launcher`, hidden): root, one thread,
//! no async runtime. It reads requests from descriptor 3 (its end of the
//! socketpair the daemon made), checks each one (`proto::check`), forks
//! one supervisor per accepted request (`supervise.rs`) and goes back to
//! reading at once; it reaps its supervisors and exits when the daemon's
//! end is closed (the daemon stopped or died).
//!
//! Trust: nothing it reads (see `mod.rs`). A malformed request is
//! answered with `Refused` on its answer socket if it brought one, else
//! reported on standard error; the loop never panics on input and never
//! exits for anything but the channel's end.
// poll, fork, waitpid and descriptor housekeeping; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::process::ExitCode;

use super::fdpass;
use super::proto::{self, Answer, Request, MAX_REQUEST};

/// The descriptor the daemon gives the launcher its channel on.
pub const CHANNEL_FD: i32 = 3;

/// Most supervisors running at once; beyond, requests are refused.
const MAX_RUNNING: usize = 4096;

/// `sluice launcher`: serves the channel on descriptor 3 until it closes.
pub fn main() -> ExitCode {
    if !is_seqpacket(CHANNEL_FD) {
        eprintln!("sluice launcher: descriptor 3 is not the daemon's channel (this command is started by `sluice serve`)");
        return ExitCode::FAILURE;
    }
    let policy = match super::Policy::from_args(std::env::args().skip(2)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sluice launcher: {e}");
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: descriptor 3 is open (checked) and nothing else owns it.
    let channel = unsafe { OwnedFd::from_raw_fd(CHANNEL_FD) };
    prepare();
    let mut running = 0usize;
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        running = running.saturating_sub(reap_all());
        match wait_readable(channel.as_fd()) {
            Readiness::Nothing => continue,
            Readiness::Ready { hup } => match fdpass::recv(channel.as_fd(), &mut buf) {
                Ok(got) if got.len == 0 && got.fds.is_empty() && hup => break,
                Ok(got) => running += handle(&channel, &buf[..got.len], got, running, &policy),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    eprintln!("sluice launcher: channel: {e}");
                    break;
                }
            },
        }
    }
    ExitCode::SUCCESS
}

/// Signals and descriptors as the launcher needs them: interrupt, hangup
/// and terminate ignored (it ends with the daemon, not with its process
/// group's signals, so a daemon draining at stop keeps it); descriptors
/// 0-2 open (received descriptors never land there); any other inherited
/// descriptor closed.
fn prepare() {
    // SAFETY: signal dispositions and descriptor calls on integers;
    // /dev/null is a NUL-terminated literal.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::close_range(4, libc::c_uint::MAX, 0);
        loop {
            let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if fd > 2 {
                libc::close(fd);
            }
            if !(0..=2).contains(&fd) {
                break;
            }
        }
    }
}

/// Whether `fd` is an open SOCK_SEQPACKET socket.
fn is_seqpacket(fd: i32) -> bool {
    let mut kind: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one int into `kind`, its size in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            &mut kind as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    rc == 0 && kind == libc::SOCK_SEQPACKET
}

enum Readiness {
    Nothing,
    Ready { hup: bool },
}

/// Waits up to a second for the channel (supervisors are reaped at
/// least that often).
fn wait_readable(channel: BorrowedFd<'_>) -> Readiness {
    let mut p = libc::pollfd {
        fd: channel.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one live pollfd.
    match unsafe { libc::poll(&mut p, 1, 1000) } {
        n if n > 0 => Readiness::Ready {
            hup: p.revents & (libc::POLLHUP | libc::POLLERR) != 0,
        },
        _ => Readiness::Nothing,
    }
}

/// Reaps every supervisor that has ended; how many.
fn reap_all() -> usize {
    let mut reaped = 0;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return reaped;
        }
        reaped += 1;
    }
}

/// Handles one message; how many supervisors it started (0 or 1).
fn handle(
    channel: &OwnedFd,
    data: &[u8],
    got: fdpass::Received,
    running: usize,
    policy: &super::Policy,
) -> usize {
    let mut fds = got.fds.into_iter();
    let Some(reply) = fds.next().filter(|r| is_seqpacket(r.as_raw_fd())) else {
        eprintln!("sluice launcher: a request without an answer socket, ignored");
        return 0;
    };
    let refuse = |why: String| {
        let text = serde_json::to_vec(&Answer::Refused(why)).unwrap_or_default();
        let _ = fdpass::send(reply.as_fd(), &text, &[]);
        0
    };
    if got.truncated {
        return refuse(format!(
            "request longer than {MAX_REQUEST} bytes or {} descriptors",
            fdpass::MAX_FDS
        ));
    }
    let req = match serde_json::from_slice::<Request>(data) {
        Ok(Request::Exec(req)) => req,
        Err(e) => return refuse(format!("malformed request: {e}")),
    };
    let (Some(stdin), Some(output), None) = (fds.next(), fds.next(), fds.next()) else {
        return refuse("exec wants three descriptors: answer, input, output".into());
    };
    let checked = match proto::check(&req, policy) {
        Ok(c) => c,
        Err(why) => return refuse(why),
    };
    if running >= MAX_RUNNING {
        return refuse(format!("{MAX_RUNNING} commands already running"));
    }
    // SAFETY: the launcher has one thread: the child may run any code.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: the channel is the launcher's; the supervisor must
            // not hold it (its end would outlive the launcher's reads).
            unsafe { libc::close(channel.as_raw_fd()) };
            let code = super::supervise::supervise(&checked, reply, stdin, output);
            // SAFETY: ends the supervisor without running the launcher's
            // destructors or returning into its loop.
            unsafe { libc::_exit(code) }
        }
        pid if pid < 0 => {
            let text = serde_json::to_vec(&Answer::Failed(format!(
                "fork: {}",
                std::io::Error::last_os_error()
            )))
            .unwrap_or_default();
            let _ = fdpass::send(reply.as_fd(), &text, &[]);
            0
        }
        _ => 1,
    }
}
