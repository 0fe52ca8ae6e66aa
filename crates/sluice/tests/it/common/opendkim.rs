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

/// What a real OpenDKIM receiver says of `message`: the
/// Authentication-Results value it adds (`verify.test; dkim=pass …`) and
/// its verdict line when it logs one, from
/// `opendkim -t` in verify mode, the key fetched from `nsd` (port
/// `nsd_port` on 127.0.0.1, zone `zone`) through OpenDKIM's own resolver
/// (libunbound, with a stub zone: `.test` is one unbound blocks unless
/// told otherwise). The client is not internal, so it verifies.
pub fn verify(test_dir: &Path, nsd_port: u16, zone: &str, message: &[u8]) -> String {
    super::ensure_package(BIN, "opendkim");
    let dir = test_dir.join("opendkim-verify");
    std::fs::create_dir_all(&dir).unwrap();
    let unbound = dir.join("unbound.conf");
    std::fs::write(
        &unbound,
        format!(
            "server:\n  do-not-query-localhost: no\n  module-config: \"iterator\"\n  \
             local-zone: \"test.\" nodefault\nstub-zone:\n  name: \"{zone}\"\n  \
             stub-addr: 127.0.0.1@{nsd_port}\n"
        ),
    )
    .unwrap();
    let conf = dir.join("verify.conf");
    std::fs::write(
        &conf,
        format!(
            "Syslog no\nMode v\nResolverConfiguration {}\nInternalHosts 192.0.2.1\nAuthservID verify.test\n",
            unbound.display()
        ),
    )
    .unwrap();
    let file = dir.join("message.eml");
    std::fs::write(&file, message).unwrap();
    let out = Command::new(BIN)
        .arg("-x")
        .arg(&conf)
        .arg("-vvv")
        .arg("-t")
        .arg(&file)
        .output()
        .expect("run opendkim -t");
    // Test mode prints the fields it would insert on stdout, its log on
    // stderr.
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The Authentication-Results: field it adds (test mode prints the
    // fields a milter would insert), and its log line when it has one.
    let results = text
        .split("### INSHEADER: ")
        .skip(1)
        .find(|h| h.contains("hname='Authentication-Results'"))
        .and_then(|h| h.split("hvalue='").nth(1))
        .map(|v| v.split('\'').next().unwrap_or_default().to_string());
    let line = text.lines().find(|l| l.contains(": verification ("));
    match (results, line) {
        (Some(r), l) => format!("{r} {}", l.unwrap_or_default()),
        (None, _) => format!("no verdict: {text}"),
    }
}
