//! A real HAProxy from Debian for tests: TCP mode on two loopback ports,
//! one sending PROXY v1 and one v2 to the backend it is given; or a
//! balancer in front of several nodes with SMTP health checks.
//!
//! The test binds both listening sockets (port 0) and HAProxy inherits
//! them (`bind fd@N`): no port is picked, released and hoped for, and a
//! client may connect at once (the backlog holds it until HAProxy runs).
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

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

const DEFAULTS: &str = "global\n  maxconn 1000\n\
     defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  timeout check 2s\n";

impl HaProxy {
    pub fn start(dir: &Path, backend: SocketAddr) -> HaProxy {
        let (child, fronts) = run(dir, 2, |fd| {
            format!(
                "listen smtp_v1\n  bind fd@{}\n  server sluice {backend} send-proxy\n\
                 listen smtp_v2\n  bind fd@{}\n  server sluice {backend} send-proxy-v2\n",
                fd[0], fd[1]
            )
        });
        HaProxy {
            v1: fronts[0],
            v2: fronts[1],
            child,
        }
    }
}

/// A balancer in front of several nodes, as a cluster runs: PROXY v2 to
/// each, and an SMTP health check every 200 ms (EHLO after a PROXY LOCAL
/// header); a node failing two checks gets no new sessions.
pub struct Balancer {
    pub front: SocketAddr,
    pub log: std::path::PathBuf,
    child: Child,
}

impl Balancer {
    pub fn start(dir: &Path, nodes: &[(&str, SocketAddr)]) -> Balancer {
        Balancer::start_in(None, dir, nodes)
    }

    /// [`Balancer::start`] inside `lan` (listening on its hub address).
    pub fn start_in(
        lan: Option<&super::netns::Lan>,
        dir: &Path,
        nodes: &[(&str, SocketAddr)],
    ) -> Balancer {
        let servers: String = (nodes.iter())
            .map(|(name, addr)| {
                format!(
                    "  server {name} {addr} send-proxy-v2 check-send-proxy \
                     check inter 200 fall 2 rise 1\n"
                )
            })
            .collect();
        let (child, fronts) = run_in(lan, dir, 1, |fd| {
            format!(
                "listen smtp\n  bind fd@{}\n  balance roundrobin\n  \
                 option smtpchk EHLO lb.test\n{servers}",
                fd[0]
            )
        });
        Balancer {
            front: fronts[0],
            log: dir.join("haproxy.log"),
            child,
        }
    }

    /// HAProxy's own account (servers going down and up).
    pub fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts HAProxy on `n` listening sockets the test binds (port 0) and
/// HAProxy inherits; `sections(fds)` writes what follows the defaults.
fn run(dir: &Path, n: usize, sections: impl Fn(&[i32]) -> String) -> (Child, Vec<SocketAddr>) {
    run_in(None, dir, n, sections)
}

/// [`run`], in a network namespace (`None`: the test's own) on `lan`'s
/// hub address.
fn run_in(
    lan: Option<&super::netns::Lan>,
    dir: &Path,
    n: usize,
    sections: impl Fn(&[i32]) -> String,
) -> (Child, Vec<SocketAddr>) {
    super::ensure_package(BIN, "haproxy");
    let bind = || match lan {
        None => std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        Some(lan) => {
            let at = SocketAddr::new(lan.hub(), 0);
            super::netns::Lan::within(&lan.lan, || std::net::TcpListener::bind(at).unwrap())
        }
    };
    let listeners: Vec<std::net::TcpListener> = (0..n).map(|_| bind()).collect();
    let fronts = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let fds: Vec<i32> = listeners.iter().map(|l| l.as_raw_fd()).collect();
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, format!("{DEFAULTS}{}", sections(&fds))).unwrap();
    let log = std::fs::File::create(dir.join("haproxy.log")).unwrap();
    let mut command = match lan {
        None => Command::new(BIN),
        Some(lan) => super::netns::Lan::command(&lan.lan, BIN),
    };
    command
        .arg("-db")
        .arg("-f")
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let inherited = fds.clone();
    // SAFETY: between fork and exec only fcntl runs (async-signal-safe),
    // clearing close-on-exec on the listening sockets for HAProxy alone.
    unsafe {
        command.pre_exec(move || {
            for &fd in &inherited {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = command.spawn().expect("start haproxy");
    // HAProxy has its own copies; ours would only hold connections back.
    drop(listeners);
    (child, fronts)
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
