//! A real redis-server (Debian's package) for the cluster tests: no
//! persistence, on a Unix socket in the test's directory (no port to race
//! for), in the foreground; it can be killed and started again on the
//! same socket (Redis down, Redis back).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BIN: &str = "/usr/bin/redis-server";

pub struct Redis {
    pub socket: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl Redis {
    /// Starts it; returns once its socket accepts.
    pub fn start(dir: &Path) -> Redis {
        super::ensure_package(BIN, "redis-server");
        let dir = dir.join("redis");
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Redis {
            socket: dir.join("redis.sock"),
            dir,
            child: None,
        };
        redis.run();
        redis
    }

    /// The URL a node is configured with.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    fn run(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("redis.log"))
            .unwrap();
        let child = Command::new(BIN)
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(&self.socket)
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start redis-server");
        let child = self.child.insert(child);
        super::wait_for_socket(child, &self.socket, 30, "redis-server", &self.dir);
    }

    /// Kills it (SIGKILL: gone, as a crashed server is).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again, empty, on the same socket.
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }

    /// `redis-cli` against it; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .arg("-s")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
