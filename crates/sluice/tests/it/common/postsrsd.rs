//! A real postsrsd 1.x (Debian 12's package, whose protocol is Postfix's
//! tcp_table) for the tcp table tests: its own secret file in a temp
//! dir, rewriting for the domain given, on two loopback ports (forward
//! and reverse), in the foreground, never the system service.
//!
//! postsrsd 1.x cannot take a listening socket from us, so its ports are
//! picked free and given to it; if it cannot bind them (another process
//! took one in between) it exits, and it is started again on two other
//! ports. It counts as up only when both ports answer as postsrsd does,
//! so a port someone else holds is never mistaken for it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = "/usr/sbin/postsrsd";

pub struct Postsrsd {
    /// The forward (sender → SRS) table's port.
    pub forward: u16,
    /// The reverse (SRS → original) table's port.
    pub reverse: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// postsrsd's reply line to `get KEY` on `port`, if it answers.
fn ask(port: u16, key: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("get {key}\n").as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    Some(line)
}

impl Postsrsd {
    /// Rewrites senders outside `domain` into `SRS0=…@domain`.
    pub fn start(domain: &str) -> Postsrsd {
        super::ensure_package(BIN, "postsrsd");
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, format!("{}\n", Postsrsd::SECRET)).unwrap();
        for _ in 0..5 {
            let (forward, reverse) = (free_port(), free_port());
            let mut child = Command::new(BIN)
                .arg(format!("-s{}", secret.display()))
                .arg(format!("-d{domain}"))
                .args(["-l127.0.0.1", "-4"])
                .arg(format!("-f{forward}"))
                .arg(format!("-r{reverse}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join("postsrsd.log")).unwrap())
                .spawn()
                .expect("start postsrsd");
            if wait_up(&mut child, forward, reverse, domain) {
                return Postsrsd {
                    forward,
                    reverse,
                    child,
                    _dir: dir,
                };
            }
            // It exited: one of its ports was taken. Two others.
            let _ = child.wait();
        }
        panic!("postsrsd could not bind two free ports in five tries");
    }
}

impl Postsrsd {
    /// The secret every instance is started with (one line).
    pub const SECRET: &'static str = "a test secret, not the system's";

    /// postsrsd's answer for `key` on its forward (`reverse` false) or
    /// reverse table: `200 ADDRESS`, or `500 …` when it has none.
    pub fn get(&self, reverse: bool, key: &str) -> String {
        let port = if reverse { self.reverse } else { self.forward };
        ask(port, key).unwrap_or_default().trim_end().to_string()
    }
}

/// Whether both ports answer as postsrsd (a forward rewrite into
/// `domain`, a reverse "not found" for an address that is not SRS) while
/// the process runs; false if it exited (it could not bind).
fn wait_up(child: &mut Child, forward: u16, reverse: u16, domain: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        let f = ask(forward, "probe@outside.test").unwrap_or_default();
        let r = ask(reverse, "probe@outside.test").unwrap_or_default();
        if f.starts_with("200 SRS0=")
            && f.ends_with(&format!("@{domain}\n"))
            && r.starts_with("500 ")
        {
            return child.try_wait().unwrap().is_none();
        }
        assert!(Instant::now() < deadline, "postsrsd did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Postsrsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
