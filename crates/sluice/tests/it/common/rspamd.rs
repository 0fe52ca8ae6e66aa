//! A real rspamd (Debian's package) for the milter tests: its proxy
//! worker in milter mode, scanning itself, on a Unix socket in the test's
//! directory (no port to race for), in the foreground. A configuration of
//! its own (no modules that ask the Internet: DNS goes to a port where
//! nothing answers), GTUBE test patterns on, a tiny TLD list so that it
//! starts in a second.

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
