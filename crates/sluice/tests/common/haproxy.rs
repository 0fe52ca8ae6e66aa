//! A real HAProxy from Debian for tests: TCP mode on two loopback ports,
//! one sending PROXY v1 and one v2 to the backend it is given.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct HaProxy {
    pub v1: SocketAddr,
    pub v2: SocketAddr,
    child: Child,
}

const BIN: &str = "/usr/sbin/haproxy";

impl HaProxy {
    pub fn start(dir: &Path, backend: SocketAddr) -> HaProxy {
        super::ensure_package(BIN, "haproxy");
        let (v1, v2) = (super::free_addr(), super::free_addr());
        let cfg = dir.join("haproxy.cfg");
        std::fs::write(
            &cfg,
            format!(
                "global\n  maxconn 1000\n\
                 defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
                 listen smtp_v1\n  bind {v1}\n  server sluice {backend} send-proxy\n\
                 listen smtp_v2\n  bind {v2}\n  server sluice {backend} send-proxy-v2\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("haproxy.log")).unwrap();
        let child = Command::new(BIN)
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start haproxy");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(v2).is_err() || std::net::TcpStream::connect(v1).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "haproxy did not listen within 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        HaProxy { v1, v2, child }
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
