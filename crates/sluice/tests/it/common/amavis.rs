//! A real amavisd-new (Debian's package `amavisd-new`) as an after-queue
//! content filter (Postfix's FILTER_README set-up): its own configuration
//! in the test's directory, an SMTP server on a loopback port that sends
//! each message it takes on to `forward` (the MTA's reinjection listener)
//! and answers the final dot with that hop's reply. Virus, spam, banned
//! file and header checks are bypassed (no ClamAV, no SpamAssassin
//! loaded), so what it adds is its own `Received:` line (`(amavis, port
//! N)`), which tells a message that went through it.
//!
//! amavisd refuses to run as root and wants its configuration file (and
//! that file's directory) owned by root and not writable by its account:
//! the file is the test's (root's), the working directory is given to the
//! package's `amavis` account. It runs in the foreground in a process
//! group of its own, so [`Amavis::kill`] ends its children too (each
//! child holds the listening socket).

#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = "/usr/sbin/amavisd";

pub struct Amavis {
    pub addr: SocketAddr,
    /// Its working directory (its log is `amavis.log` there).
    pub home: PathBuf,
    child: Child,
}

/// A loopback port free now (for a filter whose address the MTA must be
/// configured with before the filter starts).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Amavis {
    /// Starts amavisd named `name` (its files in `dir/name`) on
    /// 127.0.0.1:`port`, forwarding to `forward`; returns once it accepts
    /// connections (it takes a few seconds to load).
    pub fn start(dir: &Path, name: &str, port: u16, forward: SocketAddr) -> Amavis {
        super::ensure_package(BIN, "amavisd-new");
        let top = dir.join(name);
        let home = top.join("home");
        for sub in ["tmp", "db"] {
            std::fs::create_dir_all(home.join(sub)).unwrap();
        }
        // amavis (not root) must reach its home: through the test's
        // directory (0700 as made) and its own.
        let open = |p: &Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap()
        };
        open(dir);
        open(&top);
        let status = Command::new("chown")
            .args(["-R", "amavis:amavis"])
            .arg(&home)
            .status()
            .unwrap();
        assert!(status.success(), "chown amavis {}", home.display());
        let conf = top.join("amavisd.conf");
        std::fs::write(&conf, config_text(&home, port, forward)).unwrap();
        let child = Command::new(BIN)
            .arg("-c")
            .arg(&conf)
            .arg("foreground")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(top.join("stderr")).unwrap())
            .spawn()
            .expect("start amavisd");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut amavis = Amavis { addr, home, child };
        amavis.wait_ready(&top);
        amavis
    }

    fn wait_ready(&mut self, top: &Path) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let timeout = Duration::from_millis(200);
            if let Ok(mut s) = std::net::TcpStream::connect_timeout(&self.addr, timeout) {
                // A greeting from amavis itself (not a stale socket).
                use std::io::Read;
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut buf = [0u8; 256];
                let n = s.read(&mut buf).unwrap_or(0);
                if buf[..n].starts_with(b"220 ") {
                    return;
                }
            }
            let exited = self.child.try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "amavisd did not start ({exited:?}); see {}",
                top.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL to amavisd and every child of it, at once (no cleanup, no
    /// reply to a client in the middle of a message).
    pub fn kill(&mut self) {
        let group = self.child.id() as i32;
        // SAFETY: signalling the process group of a child we spawned
        // (`process_group(0)`: this test's amavisd and its children, no
        // other process).
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.child.wait();
    }

    /// Its log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.join("amavis.log")).unwrap_or_default()
    }
}

impl Drop for Amavis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// amavisd.conf: the Debian defaults are not read (`-c` names this file
/// alone); everything it needs is here.
fn config_text(home: &Path, port: u16, forward: SocketAddr) -> String {
    let home = home.display();
    format!(
        r#"use strict;
$daemon_user  = 'amavis';
$daemon_group = 'amavis';
$MYHOME = '{home}';
$TEMPBASE = '{home}/tmp';
$db_home = '{home}/db';
$helpers_home = '{home}';
$lock_file = '{home}/amavisd.lock';
$pid_file = '{home}/amavisd.pid';
$QUARANTINEDIR = undef;
$myhostname = 'amavis.test';
$mydomain = 'test';
@local_domains_maps = ( [".$mydomain"] );
$max_servers = 2;
$inet_socket_port = {port};
$inet_socket_bind = '127.0.0.1';
@inet_acl = qw(127.0.0.1);
$forward_method = 'smtp:[{ip}]:{fport}';
$notify_method = $forward_method;
@bypass_virus_checks_maps = (1);
@bypass_spam_checks_maps = (1);
@bypass_banned_checks_maps = (1);
@bypass_header_checks_maps = (1);
$enable_dkim_verification = 0;
$enable_dkim_signing = 0;
@av_scanners = ();
@av_scanners_backup = ();
$DO_SYSLOG = 0;
$LOGFILE = '{home}/amavis.log';
$log_level = 2;
$enable_db = 0;
$enable_global_cache = 0;
1;
"#,
        ip = forward.ip(),
        fport = forward.port(),
    )
}
