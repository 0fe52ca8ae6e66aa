//! The daemon's side of the launcher: starting it (fork and exec of the
//! daemon's own binary, `program launcher`, with the launcher's end of a
//! SOCK_SEQPACKET socketpair as descriptor 3 and nothing else inherited)
//! and sending it requests, each with an answer socket of its own, so
//! requests run side by side and none waits for another's answer.
//!
//! Trust: the launcher's answers are parsed as `Answer` (anything else
//! is an error, never believed). Invariant: the daemon's end of every
//! socket is close-on-exec, so the launcher sees its channel end when
//! the daemon exits, whatever it ran in between.
// pre_exec (dup2 in the forked child); the block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Mutex;

use tokio::io::unix::AsyncFd;

use super::fdpass;
use super::proto::{Answer, ExecRequest, Request};

/// A running launcher.
#[derive(Debug)]
pub struct Launcher {
    /// The daemon's end of the channel (requests only; never read).
    channel: AsyncFd<OwnedFd>,
    /// The launcher process, to wait for it at [`Launcher::stop`].
    child: Mutex<Child>,
    pid: u32,
}

/// One request's answer socket.
#[derive(Debug)]
pub struct Call {
    reply: AsyncFd<OwnedFd>,
}

impl Launcher {
    /// Starts `program launcher` (the daemon: `/proc/self/exe`). Must be
    /// called in a tokio runtime, as root for the launcher to be of use.
    pub fn start(program: &Path, policy: &super::Policy) -> io::Result<Launcher> {
        let (ours, theirs) = fdpass::seqpacket_pair()?;
        let raw = theirs.as_raw_fd();
        let mut cmd = std::process::Command::new(program);
        cmd.arg0("sluice")
            .arg("launcher")
            .args(policy.to_args())
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: the closure runs in the forked child before exec and
        // makes only async-signal-safe calls (dup2, fcntl) on integers.
        unsafe {
            cmd.pre_exec(move || {
                let fd = super::server::CHANNEL_FD;
                let rc = match raw == fd {
                    true => libc::fcntl(fd, libc::F_SETFD, 0),
                    false => libc::dup2(raw, fd),
                };
                match rc < 0 {
                    true => Err(io::Error::last_os_error()),
                    false => Ok(()),
                }
            });
        }
        let child = cmd.spawn()?;
        drop(theirs);
        Ok(Launcher {
            channel: register(ours)?,
            pid: child.id(),
            child: Mutex::new(child),
        })
    }

    /// The launcher's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Runs `req` with `stdin` and `output` (the command's standard
    /// input, and its standard output and error).
    pub async fn exec(
        &self,
        req: &ExecRequest,
        stdin: OwnedFd,
        output: OwnedFd,
    ) -> io::Result<Call> {
        let data = serde_json::to_vec(&Request::Exec(req.clone()))?;
        self.request(&data, vec![stdin, output]).await
    }

    /// Sends `data` with a new answer socket and then `fds` (any bytes:
    /// the tests send what a compromised daemon could).
    pub async fn request(&self, data: &[u8], fds: Vec<OwnedFd>) -> io::Result<Call> {
        let (mine, theirs) = fdpass::seqpacket_pair()?;
        {
            let mut all = vec![theirs.as_fd()];
            all.extend(fds.iter().map(|f| f.as_fd()));
            loop {
                let mut ready = self.channel.writable().await?;
                match ready.try_io(|c| fdpass::send(c.get_ref().as_fd(), data, &all)) {
                    Ok(sent) => break sent?,
                    Err(_would_block) => continue,
                }
            }
        }
        drop((theirs, fds));
        Ok(Call {
            reply: register(mine)?,
        })
    }

    /// Closes the channel (the launcher then exits) and waits for it.
    pub fn stop(self) -> io::Result<std::process::ExitStatus> {
        let Launcher { channel, child, .. } = self;
        drop(channel);
        let mut child = child
            .into_inner()
            .map_err(|_| io::Error::other("poisoned"))?;
        child.wait()
    }
}

/// `fd` registered with the runtime (its readiness awaited).
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is an open descriptor, closed only when the
    // AsyncFd drops it, and its as_raw_fd always returns that descriptor.
    unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)
}

impl Call {
    /// The launcher's answer (an error if it closed the socket first or
    /// sent something that is no `Answer`).
    pub async fn answer(&self) -> io::Result<Answer> {
        let mut buf = vec![0u8; 8192];
        loop {
            let mut ready = self.reply.readable().await?;
            match ready.try_io(|r| fdpass::recv(r.get_ref().as_fd(), &mut buf)) {
                Ok(Ok(got)) if got.len == 0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the launcher closed the request without an answer",
                    ))
                }
                Ok(Ok(got)) => {
                    return serde_json::from_slice(&buf[..got.len]).map_err(io::Error::other)
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Tells the supervisor to kill the command's process group (the
    /// daemon's time limit passed first).
    pub fn give_up(&self) {
        let _ = fdpass::send(self.reply.get_ref().as_fd(), b"kill", &[]);
    }
}
