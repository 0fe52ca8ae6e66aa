//! A real postgrey (Debian's package) for the policy delegation tests:
//! its own database and empty whitelists in the test's directory, on a
//! Unix socket there (no port to race for), in the foreground.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BIN: &str = "/usr/sbin/postgrey";

pub struct Postgrey {
    pub socket: PathBuf,
    child: Child,
}

impl Postgrey {
    /// Greylists for `delay` seconds; answers once its socket accepts.
    pub fn start(dir: &Path, delay: u32) -> Postgrey {
        super::ensure_package(BIN, "postgrey");
        let dir = dir.join("postgrey");
        std::fs::create_dir_all(dir.join("db")).unwrap();
        let none = dir.join("empty");
        std::fs::write(&none, "").unwrap();
        let socket = dir.join("postgrey.sock");
        let child = Command::new(BIN)
            .arg(format!("--unix={}", socket.display()))
            .arg(format!("--dbdir={}", dir.join("db").display()))
            .arg(format!("--pidfile={}", dir.join("pid").display()))
            .arg(format!("--delay={delay}"))
            .arg(format!("--whitelist-clients={}", none.display()))
            .arg(format!("--whitelist-recipients={}", none.display()))
            .args(["--user=root", "--group=root", "--hostname=grey.test"])
            .args(["--auto-whitelist-clients=0", "-v"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("postgrey.log")).unwrap())
            .spawn()
            .expect("start postgrey");
        let mut grey = Postgrey { socket, child };
        let socket = grey.socket.clone();
        super::wait_for_socket(&mut grey.child, &socket, 30, "postgrey", &dir);
        grey
    }
}

impl Drop for Postgrey {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
