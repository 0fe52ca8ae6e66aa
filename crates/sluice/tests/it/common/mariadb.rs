//! A real MariaDB (Debian's mariadb-server) for the SQL table tests:
//! `mariadb-install-db` into the test's directory and `mariadbd` in the
//! foreground (`--no-defaults`: nothing from /etc/mysql), on a loopback
//! port and a socket in the test's directory. Grant tables are on: the
//! tests log in as a user created with a password.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SERVER: &str = "/usr/sbin/mariadbd";

pub struct Mariadb {
    pub port: u16,
    pub socket: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl Mariadb {
    /// Installs a data directory in `dir`/mariadb and starts the server;
    /// returns once it answers.
    pub fn start(dir: &Path) -> Mariadb {
        super::ensure_package(SERVER, "mariadb-server");
        let dir = dir.join("mariadb");
        std::fs::create_dir_all(&dir).unwrap();
        install(&dir.join("data"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut db = Mariadb {
            port,
            socket: dir.join("mariadb.sock"),
            dir,
            child: None,
        };
        db.run();
        db
    }

    fn run(&mut self) {
        let log = self.dir.join("mariadb.log");
        let child = Command::new(SERVER)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--socket={}", self.socket.display()))
            .arg(format!("--port={}", self.port))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mariadb.pid").display()
            ))
            .arg(format!("--log-error={}", log.display()))
            .args(["--bind-address=127.0.0.1", "--user=root", "--skip-log-bin"])
            .args(["--innodb-buffer-pool-size=16M", "--skip-name-resolve"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd");
        let child = self.child.insert(child);
        super::postgres::wait_or_show_log(child, &self.socket, "mariadbd", &log);
    }

    /// Runs `sql` as root over the socket; panics with the client's
    /// message if it fails.
    pub fn sql(&self, sql: &str) {
        let out = Command::new("mariadb")
            .args(["--no-defaults", "-u", "root"])
            .arg(format!("--socket={}", self.socket.display()))
            .args(["-e", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mariadb {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops it (SIGTERM, a normal shutdown) and waits.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `mariadb-install-db` into `data`. Once in CI it failed with no reason
/// kept (727 tests at once on 2 cores): a failed install is retried
/// twice on an empty directory, and the panic holds every attempt's
/// output and the server's error log, if it wrote one.
fn install(data: &Path) {
    let mut failures = String::new();
    for attempt in 1..=3 {
        let _ = std::fs::remove_dir_all(data);
        let out = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--user=root", "--skip-test-db"])
            .args(["--auth-root-authentication-method=normal"])
            .arg(format!("--datadir={}", data.display()))
            .output()
            .unwrap();
        if out.status.success() {
            return;
        }
        let logs: String = std::fs::read_dir(data)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "err"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect();
        failures.push_str(&format!(
            "attempt {attempt}: {}{}{logs}\n",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("mariadb-install-db failed 3 times:\n{failures}");
}
