//! A real HAProxy from Debian for tests: TCP mode on two loopback ports,
//! one sending PROXY v1 and one v2 to the backend it is given.
//!
//! The test binds both listening sockets (port 0) and HAProxy inherits
//! them (`bind fd@N`): no port is picked, released and hoped for, and a
//! client may connect at once (the backlog holds it until HAProxy runs).

use std::net::SocketAddr;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub struct HaProxy {
    pub v1: SocketAddr,
    pub v2: SocketAddr,
    child: Child,
}

const BIN: &str = "/usr/sbin/haproxy";

impl HaProxy {
    pub fn start(dir: &Path, backend: SocketAddr) -> HaProxy {
        super::ensure_package(BIN, "haproxy");
        let listen = || std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (l1, l2) = (listen(), listen());
        let (v1, v2) = (l1.local_addr().unwrap(), l2.local_addr().unwrap());
        let (fd1, fd2) = (l1.as_raw_fd(), l2.as_raw_fd());
        let cfg = dir.join("haproxy.cfg");
        std::fs::write(
            &cfg,
            format!(
                "global\n  maxconn 1000\n\
                 defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
                 listen smtp_v1\n  bind fd@{fd1}\n  server sluice {backend} send-proxy\n\
                 listen smtp_v2\n  bind fd@{fd2}\n  server sluice {backend} send-proxy-v2\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("haproxy.log")).unwrap();
        let mut command = Command::new(BIN);
        command
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // SAFETY: between fork and exec only fcntl runs (async-signal-safe),
        // clearing close-on-exec on the two sockets for HAProxy alone.
        unsafe {
            command.pre_exec(move || {
                for fd in [fd1, fd2] {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("start haproxy");
        // HAProxy has its own copies; ours would only hold connections back.
        drop((l1, l2));
        HaProxy { v1, v2, child }
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
