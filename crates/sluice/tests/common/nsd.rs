//! A real authoritative DNS server (NLnet Labs' nsd, from Debian) for
//! tests: its own config, zones and port on 127.0.0.1, in the foreground.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Nsd {
    pub addr: std::net::SocketAddr,
    pub dir: PathBuf,
    child: Child,
}

const BIN: &str = "/usr/sbin/nsd";

impl Nsd {
    /// Serves `zones` (name, zone file text) until dropped.
    pub fn start(dir: &Path, zones: &[(&str, &str)]) -> Nsd {
        super::ensure_package(BIN, "nsd");
        let dir = dir.join("nsd");
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.display();
        let mut conf = format!(
            "server:\n  ip-address: 127.0.0.1@{port}\n  port: {port}\n  username: \"\"\n  chroot: \"\"\n  \
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
        let child = Command::new(BIN)
            .arg("-d")
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("nsd.err")).unwrap())
            .spawn()
            .expect("start nsd");
        Nsd {
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            dir,
            child,
        }
    }
}

impl Drop for Nsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
