//! A real PostgreSQL (Debian's postgresql-15) for the SQL table tests:
//! `initdb` into the test's directory and `postgres` in the foreground,
//! both run as the `postgres` OS user (setpriv, so the child is the
//! server itself and can be stopped), on a loopback port and a socket in
//! the test's directory; local socket logins are trusted (the test's
//! setup), TCP logins need a password (scram-sha-256). Never the system's
//! cluster or /etc.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct Postgres {
    pub port: u16,
    pub socket_dir: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

fn as_postgres(program: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ])
    .arg(Path::new(BIN).join(program));
    cmd
}

impl Postgres {
    /// Makes a cluster in `dir`/pg and starts it; returns once it answers.
    pub fn start(dir: &Path) -> Postgres {
        super::ensure_package(&format!("{BIN}/initdb"), "postgresql-15");
        // The server runs as postgres: it must reach its directory.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = dir.join("pg");
        std::fs::create_dir_all(dir.join("sock")).unwrap();
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(chown.success());
        let out = as_postgres("initdb")
            .args([
                "-A",
                "trust",
                "--auth-host=scram-sha-256",
                "-U",
                "postgres",
                "-D",
            ])
            .arg(dir.join("data"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut pg = Postgres {
            port,
            socket_dir: dir.join("sock"),
            dir,
            child: None,
        };
        pg.run();
        pg
    }

    fn run(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("postgres.log"))
            .unwrap();
        let child = as_postgres("postgres")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-k")
            .arg(&self.socket_dir)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-c", "fsync=off", "-c", "logging_collector=off"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        let child = self.child.insert(child);
        let socket = self.socket_dir.join(format!(".s.PGSQL.{}", self.port));
        wait_or_show_log(child, &socket, "postgres", &self.dir.join("postgres.log"));
        // The socket exists a moment before logins are accepted.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !self.try_psql("postgres", "SELECT 1") {
            assert!(
                std::time::Instant::now() < deadline,
                "postgres does not answer; its log:\n{}",
                std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn try_psql(&self, db: &str, sql: &str) -> bool {
        self.psql_cmd(db, sql)
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn psql_cmd(&self, db: &str, sql: &str) -> Command {
        let mut cmd = Command::new(Path::new(BIN).join("psql"));
        cmd.arg("-h")
            .arg(&self.socket_dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", db])
            .args(["-v", "ON_ERROR_STOP=1", "-X", "-q", "-c", sql]);
        cmd
    }

    /// Runs `sql` as the superuser in database `db`; panics with psql's
    /// message if it fails.
    pub fn psql(&self, db: &str, sql: &str) {
        let out = self.psql_cmd(db, sql).output().unwrap();
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops it (fast shutdown, as an operator's stop) and waits.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits (60 s at most) until `child` accepts on the Unix socket
/// `socket`; if it exits or does not come up, fails the test with the
/// server's log (`what` names it), never skipping silently.
pub fn wait_or_show_log(child: &mut Child, socket: &Path, what: &str, log: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        let exited = child.try_wait().unwrap();
        assert!(
            exited.is_none() && std::time::Instant::now() < deadline,
            "{what} did not start ({exited:?}); its log {}:\n{}",
            log.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
