//! One request's supervisor: a forked child of the launcher (root, one
//! thread) that forks the command, waits for it within its time limit,
//! and answers on the request's answer socket.
//!
//! The command's child, between fork and execve: default signal
//! handling and an empty signal mask, a session and process group of its
//! own (setsid), the passed descriptors as 0, 1 and 2 and every other
//! descriptor close-on-exec, groups = [gid], then gid, then uid, then the
//! check that root cannot be had back, then chdir, then execve with
//! exactly the environment asked. A step that fails is reported through
//! a close-on-exec pipe (`Answer::Failed`), never run past.
//!
//! Ends of a command: it exits (its status is answered; Postfix leaves
//! what it left behind running, and so do we, unless the daemon gives up
//! on it); the time limit passes, or the daemon says `kill` or closes the
//! answer socket (it gave up, or died): the whole process group is
//! killed (`Answer::TimedOut`).
// fork, execve and the set*id calls; each block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use super::fdpass;
use super::proto::{Answer, Checked};

/// Runs `cmd` with `stdin` and `output`, answers on `reply`; the exit
/// status of the supervisor.
pub fn supervise(cmd: &Checked, reply: OwnedFd, stdin: OwnedFd, output: OwnedFd) -> i32 {
    let started = Instant::now();
    let answer = |a: &Answer| {
        let text = serde_json::to_vec(a).unwrap_or_default();
        let _ = fdpass::send(reply.as_fd(), &text, &[]);
    };
    let pid = match spawn(cmd, stdin, output) {
        Ok(pid) => pid,
        Err(why) => {
            answer(&Answer::Failed(why));
            return 0;
        }
    };
    let ended = watch(pid, cmd, &reply, started);
    answer(&ended);
    match ended {
        Answer::TimedOut => reap(pid),
        _ => linger(pid, &reply, cmd, started),
    }
    0
}

/// Forks the command; its pid once it has exec'd, or why it could not.
fn spawn(cmd: &Checked, stdin: OwnedFd, output: OwnedFd) -> Result<libc::pid_t, String> {
    let mut ends = [0 as libc::c_int; 2];
    // SAFETY: `ends` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just made and are owned by nobody else.
    let (err_r, err_w) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let mut argv: Vec<*const libc::c_char> = cmd.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = cmd.env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let fds = (stdin.as_raw_fd(), output.as_raw_fd(), err_w.as_raw_fd());
    // SAFETY: the supervisor has one thread, so the child may run any
    // code; it only makes the calls of `become_command` and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        let (step, errno) = become_command(cmd, (fds.0, fds.1), &argv, &envp);
        let e = errno.to_le_bytes();
        let msg = [step as u8, e[0], e[1], e[2]];
        // SAFETY: write of a live 4-byte buffer, then _exit (no unwinding,
        // no destructors in the child).
        unsafe {
            libc::write(fds.2, msg.as_ptr() as *const libc::c_void, 4);
            libc::_exit(127);
        }
    }
    drop((stdin, output, err_w));
    let mut msg = [0u8; 4];
    let n = read_all(err_r.as_raw_fd(), &mut msg);
    if n == 0 {
        return Ok(pid);
    }
    reap(pid);
    let errno = i32::from_le_bytes([msg[1], msg[2], msg[3], 0]);
    let step = STEPS.get(msg[0] as usize).copied().unwrap_or("start");
    Err(format!("{step}: {}", io::Error::from_raw_os_error(errno)))
}

/// The steps of `become_command`, by number, for the failure report.
const STEPS: [&str; 8] = [
    "setsid",
    "dup2",
    "setgroups",
    "setgid",
    "setuid",
    "root could be had back",
    "chdir",
    "cannot run",
];

/// In the command's child: everything up to execve (see the module
/// header); on failure, the step and errno.
fn become_command(
    cmd: &Checked,
    (stdin, output): (RawFd, RawFd),
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> (usize, i32) {
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: plain system calls on integers and on the live, NUL-ended
    // pointer arrays built by `spawn` before the fork.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for sig in [
            libc::SIGPIPE,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGCHLD,
        ] {
            libc::signal(sig, libc::SIG_DFL);
        }
        if libc::setsid() < 0 {
            return (0, errno());
        }
        if libc::dup2(stdin, 0) < 0 || libc::dup2(output, 1) < 0 || libc::dup2(output, 2) < 0 {
            return (1, errno());
        }
        libc::close_range(
            3,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_int,
        );
        let gid = cmd.gid as libc::gid_t;
        if libc::setgroups(1, &gid) != 0 {
            return (2, errno());
        }
        if libc::setgid(gid) != 0 {
            return (3, errno());
        }
        if libc::setuid(cmd.uid as libc::uid_t) != 0 {
            return (4, errno());
        }
        if libc::setuid(0) == 0 || libc::geteuid() == 0 || libc::getegid() == 0 {
            return (5, libc::EPERM);
        }
        if libc::chdir(cmd.cwd.as_ptr()) != 0 {
            return (6, errno());
        }
        libc::execve(argv[0], argv.as_ptr(), envp.as_ptr());
        (7, errno())
    }
}

/// Reads until `buf` is full or the writers are gone; how much came.
fn read_all(fd: RawFd, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reads into the live rest of `buf`.
        let n = unsafe {
            libc::read(
                fd,
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
            )
        };
        match n {
            n if n > 0 => got += n as usize,
            n if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    got
}

/// Waits for the command `pid` until it ends, the time limit passes or
/// the daemon gives up (`kill`, or the answer socket closed).
fn watch(pid: libc::pid_t, cmd: &Checked, reply: &OwnedFd, started: Instant) -> Answer {
    let pidfd = pidfd_open(pid);
    loop {
        if let Some(status) = try_wait(pid) {
            return status;
        }
        let left = cmd.time_limit.saturating_sub(started.elapsed());
        if left.is_zero() || daemon_gave_up(reply, pidfd.as_ref(), left) {
            kill_group(pid);
            return Answer::TimedOut;
        }
    }
}

/// After the command exited (not yet reaped, so its pid and group id
/// cannot be reused): until the time limit, waits for the daemon to
/// close the answer socket (it has read the output); its `kill`, or the
/// limit reached with the daemon still reading (something the command
/// left behind holds the output), kills the group. Then reaps.
fn linger(pid: libc::pid_t, reply: &OwnedFd, cmd: &Checked, started: Instant) {
    loop {
        let left = cmd.time_limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            kill_group(pid);
            break;
        }
        let mut p = libc::pollfd {
            fd: reply.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = (left.as_millis() as u64).clamp(1, 60_000) as libc::c_int;
        // SAFETY: polls one live pollfd.
        if unsafe { libc::poll(&mut p, 1, ms) } <= 0 {
            continue;
        }
        match read_word(reply).as_deref() {
            Some(b"kill") => {
                kill_group(pid);
                break;
            }
            Some(_) => {}
            None => break,
        }
    }
    reap(pid);
}

/// Polls the answer socket (and the pidfd, if any) for up to `left`:
/// whether the daemon said `kill` or went away.
fn daemon_gave_up(reply: &OwnedFd, pidfd: Option<&OwnedFd>, left: std::time::Duration) -> bool {
    let mut fds = vec![libc::pollfd {
        fd: reply.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if let Some(p) = pidfd {
        fds.push(libc::pollfd {
            fd: p.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
    }
    // Without a pidfd (an old kernel), look at the command every 50 ms.
    let cap = if pidfd.is_some() { 60_000 } else { 50 };
    let ms = (left.as_millis() as u64).clamp(1, cap) as libc::c_int;
    // SAFETY: polls the live pollfds of `fds`.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n <= 0 || fds[0].revents == 0 {
        return false;
    }
    // Nothing to read on a ready socket: closed (or broken).
    read_word(reply).is_none_or(|word| word == b"kill")
}

/// A message waiting on the answer socket, if any.
fn read_word(reply: &OwnedFd) -> Option<Vec<u8>> {
    let mut buf = [0u8; 16];
    let got = fdpass::recv(reply.as_fd(), &mut buf).ok()?;
    (got.len > 0).then(|| buf[..got.len].to_vec())
}

fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes integers; a descriptor it returns is new.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: as above: a fresh descriptor, owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The command's status if it has ended, left unreaped (WNOWAIT): a
/// zombie keeps its pid, so its group id names no other process.
fn try_wait(pid: libc::pid_t) -> Option<Answer> {
    // SAFETY: all-zero is a valid siginfo_t; waitid fills it, and leaves
    // si_pid 0 when no child has changed state (WNOHANG).
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let how = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, how) != 0 || info.si_pid() != pid
        {
            return None;
        }
        Some(match info.si_code {
            libc::CLD_EXITED => Answer::Exited(info.si_status()),
            _ => Answer::Signaled(info.si_status()),
        })
    }
}

/// Kills the process group `pid` leads (setsid made it).
fn kill_group(pid: libc::pid_t) {
    if pid > 0 {
        // SAFETY: kill takes integers; -pid names the command's group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid writes one int.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
    }
}
