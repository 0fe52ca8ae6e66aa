//! Network namespaces for the cluster tests (and one-namespace tests,
//! [`Netns`]): a *lan* namespace holding a
//! bridge (198.18.0.254/24, the benchmarking range) with the test's
//! balancer, sink and clients, and one namespace per node whose address
//! (198.18.0.N) exists only there. Each test has its own lan, so every
//! test may use the same addresses. All deleted on drop.
//!
//! Sockets of the test itself are made inside a namespace by a thread that
//! enters it (`setns`): a socket keeps the namespace it was made in.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Lan {
    pub lan: String,
    pub nodes: Vec<String>,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Lan {
    /// A lan with `n` node namespaces plugged into its bridge.
    pub fn create(n: usize) -> Lan {
        let tag = format!(
            "sl{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let lan = Lan {
            lan: format!("{tag}-lan"),
            nodes: (1..=n).map(|i| format!("{tag}-n{i}")).collect(),
        };
        ip(&["netns", "add", &lan.lan]);
        let exec = |ns: &str, args: &[&str]| {
            let mut all = vec!["netns", "exec", ns, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        exec(&lan.lan, &["link", "set", "lo", "up"]);
        exec(&lan.lan, &["link", "add", "br0", "type", "bridge"]);
        exec(&lan.lan, &["addr", "add", "198.18.0.254/24", "dev", "br0"]);
        exec(&lan.lan, &["link", "set", "br0", "up"]);
        for (i, ns) in lan.nodes.iter().enumerate() {
            let veth = format!("v{}", i + 1);
            let addr = format!("{}/24", lan.node_ip(i));
            ip(&["netns", "add", ns]);
            ip(&[
                "link", "add", &veth, "netns", &lan.lan, "type", "veth", "peer", "name", "eth0",
                "netns", ns,
            ]);
            exec(&lan.lan, &["link", "set", &veth, "master", "br0", "up"]);
            exec(ns, &["addr", "add", &addr, "dev", "eth0"]);
            exec(ns, &["link", "set", "eth0", "up"]);
            exec(ns, &["link", "set", "lo", "up"]);
        }
        lan
    }

    /// The lan's own address (balancer, sink, clients).
    pub fn hub(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, 254))
    }

    /// Node `i`'s address (0-based), inside its namespace only.
    pub fn node_ip(&self, i: usize) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, i as u8 + 1))
    }

    /// `program` run inside namespace `ns`.
    pub fn command(ns: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }

    /// Runs `f` on a thread inside namespace `ns` (sockets it makes stay
    /// there).
    pub fn within<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{ns}");
        std::thread::scope(|s| {
            s.spawn(move || {
                let file = std::fs::File::open(&path).expect("netns file");
                let fd = std::os::unix::io::AsRawFd::as_raw_fd(&file);
                // SAFETY: setns on a valid namespace fd, for this thread only.
                let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("thread in netns")
        })
    }

    /// A TCP socket bound to `addr` inside the lan (not yet listening or
    /// connected).
    pub fn socket(&self, addr: SocketAddr) -> tokio::net::TcpSocket {
        Lan::within(&self.lan, || {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.set_reuseaddr(true).unwrap();
            s.bind(addr).unwrap();
            s
        })
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        // Processes still inside are the tests' to stop; deleting the
        // names and the bridge's namespace takes the links down with them.
        for ns in self.nodes.iter().chain([&self.lan]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// A network namespace of its own for one test, with its loopback up and,
/// besides 127.0.0.0/8, a whole block local on it (every address of it
/// can be bound): clients, servers and name servers at addresses that
/// exist nowhere else. Deleted on drop (processes still inside are the
/// test's to stop first).
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A namespace with `block` (e.g. `198.51.100.0/24`) local on `lo`.
    pub fn create(block: &str) -> Netns {
        let name = format!(
            "sl{}-{}-ns",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ip(&["-n", &ns.name, "route", "add", "local", block, "dev", "lo"]);
        ns
    }

    /// `program` run inside.
    pub fn command(&self, program: &str) -> Command {
        Lan::command(&self.name, program)
    }

    /// Runs `f` on a thread inside (sockets it makes stay there).
    pub fn within<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        Lan::within(&self.name, f)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
