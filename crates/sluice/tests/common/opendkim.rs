//! A real OpenDKIM (Debian's opendkim) for the milter tests: a key made
//! by its own opendkim-genkey, signing mail from loopback clients for one
//! domain, on a Unix socket in the test's directory, in the foreground.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BIN: &str = "/usr/sbin/opendkim";
const GENKEY: &str = "/usr/sbin/opendkim-genkey";

pub struct OpenDkim {
    pub socket: PathBuf,
    /// The public key's TXT record as opendkim-genkey wrote it, owner
    /// `<selector>._domainkey` (relative), ready for a zone file.
    pub txt: String,
    child: Child,
}

impl OpenDkim {
    /// Signs mail whose From: is in `domain` with a new 2048-bit RSA key
    /// under `selector`.
    pub fn start(test_dir: &Path, domain: &str, selector: &str) -> OpenDkim {
        super::ensure_package(BIN, "opendkim");
        super::ensure_package(GENKEY, "opendkim-tools");
        let dir = test_dir.join("opendkim");
        std::fs::create_dir_all(&dir).unwrap();
        let made = Command::new(GENKEY)
            .args(["-b", "2048", "-d", domain, "-s", selector, "-D"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(made.success(), "opendkim-genkey failed");
        let txt = std::fs::read_to_string(dir.join(format!("{selector}.txt"))).unwrap();
        let socket = dir.join("opendkim.sock");
        let d = dir.display();
        let conf = format!(
            "Syslog no\nMode s\nSocket local:{}\nDomain {domain}\nSelector {selector}\n\
             KeyFile {d}/{selector}.private\nCanonicalization relaxed/relaxed\n\
             RequireSafeKeys false\nPidFile {d}/opendkim.pid\nInternalHosts 127.0.0.1\n",
            socket.display()
        );
        std::fs::write(dir.join("opendkim.conf"), conf).unwrap();
        let child = Command::new(BIN)
            .arg("-f")
            .arg("-x")
            .arg(dir.join("opendkim.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("opendkim.err")).unwrap())
            .spawn()
            .expect("start opendkim");
        let mut odk = OpenDkim { socket, txt, child };
        let socket = odk.socket.clone();
        super::wait_for_socket(&mut odk.child, &socket, 20, "opendkim", &dir);
        odk
    }
}

impl Drop for OpenDkim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
