//! A real authoritative DNS server (NLnet Labs' nsd, from Debian) for
//! tests: its own config, zones and port on 127.0.0.1, in the foreground;
//! or ([`Nsd::start_in`]) at an address of a test's network namespace,
//! port 53, for programs whose resolver (libc's) names a server by
//! address only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::netns::Netns;

pub struct Nsd {
    pub addr: SocketAddr,
    pub dir: PathBuf,
    child: Child,
}

const BIN: &str = "/usr/sbin/nsd";

impl Nsd {
    /// Serves `zones` (name, zone file text) until dropped. A port taken
    /// by someone else between choosing and binding it costs a retry on
    /// another.
    pub fn start(dir: &Path, zones: &[(&str, &str)]) -> Nsd {
        super::ensure_package(BIN, "nsd");
        for attempt in 0..3 {
            let port = std::net::UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let nsd = Nsd::start_once(&dir.join(format!("nsd{attempt}")), None, addr, zones);
            let apex = zones.first().map_or(".", |(name, _)| name);
            if nsd.answers(apex) {
                return nsd;
            }
        }
        panic!("nsd did not answer on three ports; see {}", dir.display());
    }

    /// As [`Nsd::start`], at `addr` inside the network namespace `netns`
    /// (port 53 of an address of its own, as a resolv.conf names a server).
    pub fn start_in(netns: &Netns, addr: SocketAddr, dir: &Path, zones: &[(&str, &str)]) -> Nsd {
        super::ensure_package(BIN, "nsd");
        let nsd = Nsd::start_once(dir, Some(netns), addr, zones);
        let apex = zones.first().map_or(".", |(name, _)| name);
        assert!(
            netns.within(|| nsd.answers(apex)),
            "nsd did not answer at {addr} in {}; see {}",
            netns.name,
            dir.display()
        );
        nsd
    }

    fn start_once(
        dir: &Path,
        netns: Option<&Netns>,
        addr: SocketAddr,
        zones: &[(&str, &str)],
    ) -> Nsd {
        let dir = dir.to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let (ip, port) = (addr.ip(), addr.port());
        let d = dir.display();
        let mut conf = format!(
            "server:\n  ip-address: {ip}@{port}\n  port: {port}\n  username: \"\"\n  chroot: \"\"\n  \
             zonesdir: \"{d}\"\n  zonelistfile: \"{d}/zone.list\"\n  database: \"\"\n  pidfile: \"{d}/nsd.pid\"\n  \
             xfrdfile: \"{d}/xfrd.state\"\n  logfile: \"{d}/nsd.log\"\n  server-count: 1\n  verbosity: 1\n\
             remote-control:\n  control-enable: no\n"
        );
        for (name, text) in zones {
            let file = dir.join(format!("{name}.zone"));
            std::fs::write(&file, text).unwrap();
            conf.push_str(&format!(
                "zone:\n  name: \"{name}\"\n  zonefile: \"{}\"\n",
                file.display()
            ));
        }
        let conf_path = dir.join("nsd.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut command = match netns {
            Some(ns) => ns.command(BIN),
            None => Command::new(BIN),
        };
        let child = command
            .arg("-d")
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("nsd.err")).unwrap())
            .spawn()
            .expect("start nsd");
        Nsd { addr, dir, child }
    }

    /// Polls with a real query (SOA of `zone`) until nsd answers (true),
    /// so no test's first lookup races its start-up; false after 10 s.
    fn answers(&self, zone: &str) -> bool {
        let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in zone
            .trim_end_matches('.')
            .split('.')
            .filter(|l| !l.is_empty())
        {
            query.push(label.len() as u8);
            query.extend_from_slice(label.as_bytes());
        }
        query.extend_from_slice(&[0, 0, 6, 0, 1]);
        let socket = std::net::UdpSocket::bind((self.addr.ip(), 0)).unwrap();
        socket
            .set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut buf = [0u8; 512];
        while std::time::Instant::now() < deadline {
            let _ = socket.send_to(&query, self.addr);
            if let Ok((n, _)) = socket.recv_from(&mut buf) {
                if n >= 12 && buf[..2] == [0x12, 0x34] {
                    return true;
                }
            }
        }
        false
    }
}

impl Drop for Nsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
