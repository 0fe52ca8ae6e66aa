//! A real Dovecot (Debian's dovecot-core and dovecot-lmtpd) for the LMTP
//! tests: LMTP only, on a Unix socket in the test's directory (no port to
//! race for), users in a passwd-file, Maildirs under the test's directory
//! owned by `nobody` (Dovecot will not deliver as root), the quota plugin
//! on, in the foreground.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BIN: &str = "/usr/sbin/dovecot";

pub struct Dovecot {
    pub socket: PathBuf,
    pub dir: PathBuf,
    child: Child,
}

/// A mailbox user: the local part at `local.test`, and a quota in bytes
/// (None: no quota).
pub struct User<'a> {
    pub name: &'a str,
    pub quota: Option<u64>,
}

fn id_of(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    let field = if cmd == "getent" {
        text.split(':').nth(2)
    } else {
        Some(text.as_ref())
    };
    field.unwrap_or_default().trim().to_string()
}

impl Dovecot {
    pub fn start(test_dir: &Path, users: &[User<'_>]) -> Dovecot {
        super::ensure_package(BIN, "dovecot-core");
        super::ensure_package("/usr/lib/dovecot/lmtp", "dovecot-lmtpd");
        // The mail user (nobody) must reach its Maildir under the test's
        // directory, which tempfile makes 0700.
        std::fs::set_permissions(test_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = test_dir.join("dovecot");
        for sub in ["run", "state", "mail"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let uid = id_of("id", &["-u", "nobody"]);
        let gid = id_of("getent", &["group", "nogroup"]);
        let chown = Command::new("chown")
            .arg(format!("{uid}:{gid}"))
            .arg(dir.join("mail"))
            .status()
            .unwrap();
        assert!(chown.success());
        let d = dir.display();
        let mut passwd = String::new();
        for u in users {
            let quota = u
                .quota
                .map(|b| format!("userdb_quota_rule=*:bytes={b}"))
                .unwrap_or_default();
            passwd.push_str(&format!(
                "{}@local.test:{{PLAIN}}x:{uid}:{gid}::{d}/mail/{}::{quota}\n",
                u.name, u.name
            ));
        }
        std::fs::write(dir.join("users"), passwd).unwrap();
        let socket = dir.join("lmtp");
        let conf = format!(
            "base_dir = {d}/run\nstate_dir = {d}/state\nlog_path = {d}/dovecot.log\n\
             protocols = lmtp\nssl = no\n\
             default_internal_user = nobody\ndefault_internal_group = nogroup\n\
             default_login_user = nobody\nfirst_valid_uid = 1\n\
             passdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
             userdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
             mail_location = maildir:~/Maildir\nmail_plugins = quota\n\
             plugin {{\n  quota = maildir:User quota\n}}\n\
             lmtp_rcpt_check_quota = yes\n\
             service lmtp {{\n  unix_listener {} {{\n    mode = 0666\n  }}\n}}\n\
             service anvil {{\n  chroot =\n}}\n",
            socket.display()
        );
        std::fs::write(dir.join("dovecot.conf"), conf).unwrap();
        let child = Command::new(BIN)
            .arg("-F")
            .arg("-c")
            .arg(dir.join("dovecot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("dovecot.err")).unwrap())
            .spawn()
            .expect("start dovecot");
        let mut dovecot = Dovecot { socket, dir, child };
        let (socket, dir) = (dovecot.socket.clone(), dovecot.dir.clone());
        super::wait_for_socket(&mut dovecot.child, &socket, 30, "dovecot", &dir);
        dovecot
    }

    /// The messages in `user`'s Maildir (new/), as text.
    pub fn messages(&self, user: &str) -> Vec<String> {
        let new = self.dir.join("mail").join(user).join("Maildir/new");
        let Ok(entries) = std::fs::read_dir(new) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .collect()
    }

    /// LMTP sessions that delivered mail, by Dovecot's log: the distinct
    /// session IDs of its "saved mail" lines (`<pid><session[:Tn]>`;
    /// the start-up probe, which delivers nothing, is not one).
    pub fn sessions(&self) -> usize {
        let log = std::fs::read_to_string(self.dir.join("dovecot.log")).unwrap_or_default();
        let ids: std::collections::HashSet<&str> = log
            .lines()
            .filter(|l| l.contains(": saved mail to"))
            .filter_map(|l| l.split('<').nth(2)?.split(['>', ':']).next())
            .collect();
        ids.len()
    }
}

/// A Dovecot with no protocol, for `doveadm` (its userdb lookups go
/// through the running auth service): mail users in a passwd-file, each
/// with its uid, gid and home (`mail_location = maildir:~/Maildir`), as
/// a site whose IMAP server reads the Maildirs as `vmail`.
pub struct Reader {
    pub dir: PathBuf,
    child: Child,
}

/// A mailbox `Reader` serves: the address, the uid and gid Dovecot
/// reads it as, and its home (the Maildir is `home/Maildir`).
pub struct MailUser<'a> {
    pub address: &'a str,
    pub uid: u32,
    pub gid: u32,
    pub home: &'a Path,
}

impl Reader {
    pub fn start(test_dir: &Path, users: &[MailUser<'_>]) -> Reader {
        super::ensure_package(BIN, "dovecot-core");
        let dir = test_dir.join("dovecot");
        for sub in ["run", "state"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let d = dir.display();
        let passwd: String = users
            .iter()
            .map(|u| {
                let (a, h) = (u.address, u.home.display());
                format!("{a}:{{PLAIN}}x:{}:{}::{h}::\n", u.uid, u.gid)
            })
            .collect();
        std::fs::write(dir.join("users"), passwd).unwrap();
        let conf = format!(
            "base_dir = {d}/run\nstate_dir = {d}/state\nlog_path = {d}/dovecot.log\n\
             protocols =\nssl = no\n\
             default_internal_user = nobody\ndefault_internal_group = nogroup\n\
             default_login_user = nobody\nfirst_valid_uid = 1\nfirst_valid_gid = 1\n\
             passdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
             userdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
             mail_location = maildir:~/Maildir\n\
             service anvil {{\n  chroot =\n}}\n"
        );
        std::fs::write(dir.join("dovecot.conf"), conf).unwrap();
        let mut child = Command::new(BIN)
            .arg("-F")
            .arg("-c")
            .arg(dir.join("dovecot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("dovecot.err")).unwrap())
            .spawn()
            .expect("start dovecot");
        let socket = dir.join("run/auth-userdb");
        super::wait_for_socket(&mut child, &socket, 30, "dovecot", &dir);
        Reader { dir, child }
    }

    /// `doveadm -c CONF ARGS…` (Dovecot switches to the user's uid and
    /// gid): exit status, stdout, stderr.
    pub fn doveadm(&self, args: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::new("/usr/bin/doveadm");
        cmd.arg("-c").arg(self.dir.join("dovecot.conf")).args(args);
        super::output_of(cmd, b"")
    }
}

/// A Dovecot that only authenticates, for SMTP AUTH through Dovecot
/// SASL (Postfix's `smtpd_sasl_type = dovecot`): its auth-client socket
/// in the test's directory, users with plain passwords in a passwd-file,
/// user names lower-cased by Dovecot (`auth_username_format = %Lu`, so
/// the login it answers can differ from the one typed), and none of its
/// own failure delays (no penalty, no failure delay: the tests time
/// Sluice's).
pub struct AuthServer {
    pub socket: PathBuf,
    pub dir: PathBuf,
    child: Child,
}

impl AuthServer {
    pub fn start(test_dir: &Path, users: &[(&str, &str)]) -> AuthServer {
        AuthServer::start_with(test_dir, users, "")
    }

    /// As [`AuthServer::start`], with `extra` settings added to its
    /// configuration (`disable_plaintext_auth = no` for a client that
    /// sends PLAIN from another loopback address without TLS).
    pub fn start_with(test_dir: &Path, users: &[(&str, &str)], extra: &str) -> AuthServer {
        super::ensure_package(BIN, "dovecot-core");
        let dir = test_dir.join("dovecot");
        for sub in ["run", "state"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let d = dir.display();
        let passwd: String = users
            .iter()
            .map(|(user, password)| format!("{user}:{{PLAIN}}{password}::::::\n"))
            .collect();
        std::fs::write(dir.join("users"), passwd).unwrap();
        let conf = format!(
            "base_dir = {d}/run\nstate_dir = {d}/state\nlog_path = {d}/dovecot.log\n\
             protocols =\nssl = no\n\
             default_internal_user = nobody\ndefault_internal_group = nogroup\n\
             default_login_user = nobody\n\
             auth_mechanisms = plain login scram-sha-256\nauth_username_format = %Lu\n\
             auth_failure_delay = 0\nauth_verbose = yes\n\
             passdb {{\n  driver = passwd-file\n  args = {d}/users\n}}\n\
             service auth {{\n  unix_listener auth-client {{\n    mode = 0666\n  }}\n}}\n\
             service anvil {{\n  chroot =\n  unix_listener anvil-auth-penalty {{\n    mode = 0\n  }}\n}}\n\
             {extra}\n"
        );
        std::fs::write(dir.join("dovecot.conf"), conf).unwrap();
        let child = Command::new(BIN)
            .arg("-F")
            .arg("-c")
            .arg(dir.join("dovecot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("dovecot.err")).unwrap())
            .spawn()
            .expect("start dovecot");
        let socket = dir.join("run/auth-client");
        let mut auth = AuthServer { socket, dir, child };
        let (socket, dir) = (auth.socket.clone(), auth.dir.clone());
        super::wait_for_socket(&mut auth.child, &socket, 30, "dovecot", &dir);
        auth
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        // SIGTERM: the master stops its lmtp children too.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}
