//! A real rspamd (Debian's package) for the milter tests: its proxy
//! worker in milter mode, scanning itself, on a Unix socket in the test's
//! directory (no port to race for), in the foreground. A configuration of
//! its own (no modules that ask the Internet: DNS goes to a port where
//! nothing answers), GTUBE test patterns on, a tiny TLD list so that it
//! starts in a second. And [`Scanner`]: its normal worker with the DKIM
//! and ARC modules on, DNS to a test nsd, asked over HTTP (rspamc's
//! `/checkv2`), for the forwarding tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BIN: &str = "/usr/bin/rspamd";

pub struct Rspamd {
    pub socket: PathBuf,
    pub dir: PathBuf,
    child: Child,
}

impl Rspamd {
    pub fn start(test_dir: &Path) -> Rspamd {
        Rspamd::start_with(test_dir, "")
    }

    /// As [`Rspamd::start`], with more settings for its proxy worker
    /// (`quarantine_on_reject = true;`, say).
    pub fn start_with(test_dir: &Path, proxy: &str) -> Rspamd {
        super::ensure_package(BIN, "rspamd");
        let dir = test_dir.join("rspamd");
        std::fs::create_dir_all(dir.join("db")).unwrap();
        std::fs::write(dir.join("tld.dat"), "com\nnet\norg\ntest\n").unwrap();
        let socket = dir.join("milter.sock");
        let d = dir.display();
        let conf = format!(
            "options {{\n  pidfile = \"{d}/rspamd.pid\";\n  dbdir = \"{d}/db\";\n  \
             enable_test_patterns = true;\n  url_tld = \"{d}/tld.dat\";\n  \
             dns {{\n    nameserver = [\"127.0.0.1:9\"];\n    timeout = 0.2s;\n    retransmits = 1;\n  }}\n}}\n\
             logging {{\n  type = \"file\";\n  filename = \"{d}/rspamd.log\";\n  level = \"info\";\n}}\n\
             actions {{\n  reject = 15;\n  add_header = 6;\n  greylist = 4;\n}}\n\
             worker \"rspamd_proxy\" {{\n  bind_socket = \"{} mode=0666\";\n  milter = yes;\n  \
             timeout = 120s;\n  count = 1;\n  {proxy}\n  upstream \"local\" {{\n    default = yes;\n    self_scan = yes;\n  }}\n}}\n",
            socket.display()
        );
        std::fs::write(dir.join("rspamd.conf"), conf).unwrap();
        let child = Command::new(BIN)
            .args(["-f", "-i", "-c"])
            .arg(dir.join("rspamd.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("rspamd.err")).unwrap())
            .spawn()
            .expect("start rspamd");
        let mut rspamd = Rspamd { socket, dir, child };
        let (socket, dir) = (rspamd.socket.clone(), rspamd.dir.clone());
        super::wait_for_socket(&mut rspamd.child, &socket, 40, "rspamd", &dir);
        rspamd
    }
}

impl Drop for Rspamd {
    fn drop(&mut self) {
        // SIGTERM: the main process stops its workers.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// A real rspamd as a scanner (its normal worker, rspamc's HTTP protocol)
/// with its DKIM and ARC modules on and DNS sent to `dns` (a test nsd):
/// what rspamd's ARC module says of a message, with no MTA between.
pub struct Scanner {
    port: u16,
    child: Child,
    _dir: PathBuf,
}

impl Scanner {
    pub fn start(test_dir: &Path, dns: std::net::SocketAddr) -> Scanner {
        super::ensure_package(BIN, "rspamd");
        let dir = test_dir.join("rspamd-scanner");
        std::fs::create_dir_all(dir.join("db")).unwrap();
        std::fs::write(dir.join("tld.dat"), "com\nnet\norg\ntest\n").unwrap();
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let d = dir.display();
            let conf = format!(
                "options {{\n  pidfile = \"{d}/rspamd.pid\";\n  dbdir = \"{d}/db\";\n  url_tld = \"{d}/tld.dat\";\n  \
                 filters = \"dkim\";\n  dns {{\n    nameserver = [\"{dns}\"];\n    timeout = 1s;\n    retransmits = 1;\n  }}\n}}\n\
                 logging {{\n  type = \"file\";\n  filename = \"{d}/rspamd.log\";\n  level = \"info\";\n}}\n\
                 modules {{\n  path = \"${{PLUGINSDIR}}\";\n}}\ndkim {{ }}\narc {{ }}\n\
                 worker \"normal\" {{\n  bind_socket = \"127.0.0.1:{port}\";\n  count = 1;\n}}\n"
            );
            std::fs::write(dir.join("rspamd.conf"), conf).unwrap();
            let mut child = Command::new(BIN)
                .args(["-f", "-i", "-c"])
                .arg(dir.join("rspamd.conf"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("rspamd.err")).unwrap())
                .spawn()
                .expect("start rspamd");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
            loop {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if check(port, b"Subject: probe\r\n\r\nx\r\n")
                    .is_some_and(|v| v["action"].is_string())
                {
                    return Scanner {
                        port,
                        child,
                        _dir: dir,
                    };
                }
                assert!(std::time::Instant::now() < deadline, "rspamd did not start");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        panic!("rspamd could not bind a free port in five tries");
    }

    /// The symbols rspamd gives `message` from a stranger (192.0.2.1).
    pub fn symbols(&self, message: &[u8]) -> Vec<String> {
        let answer = check(self.port, message).expect("rspamd answers");
        let symbols = answer["symbols"].as_object().cloned().unwrap_or_default();
        symbols.keys().cloned().collect()
    }
}

/// `POST /checkv2`: rspamd's JSON answer, if it gives one.
fn check(port: u16, message: &[u8]) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .ok()?;
    let head = format!(
        "POST /checkv2 HTTP/1.0\r\nIP: 192.0.2.1\r\nContent-Length: {}\r\n\r\n",
        message.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(message).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let at = out.windows(4).position(|w| w == b"\r\n\r\n")?;
    serde_json::from_slice(&out[at + 4..]).ok()
}

impl Drop for Scanner {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}
