//! A real Postfix, isolated, for differential tests: Sluice's answer to
//! a case is held to what Debian's Postfix (3.7) answers to the same case.
//!
//! [`Postfix::start_with`] writes a configuration directory of its own
//! (a [`TestDir`]: `main.cf`, `master.cf`, the test's table files; the
//! queue in `spool/`, `data/`, the log in `maillog`) and runs
//! `postfix -c DIR check` then `postfix -c DIR start`. Several instances
//! run at once (each its own directories and port); each is stopped when
//! dropped (`postfix -c DIR stop`, then its master is waited for, killed
//! if it lingers; a test process killed outright leaves its instance
//! running, to be stopped with `postfix -c DIR stop`). Starting takes
//! about half a second (its files are written already settled: see
//! [`write_settled`]); a failed test keeps its directory (maillog
//! included) and names it.
//!
//! What it trusts: the `postfix` package (its binaries, its files in
//! `/etc/postfix` as `meta_directory`, read and never written: the
//! system's own `main.cf` is not read), the `postfix` user and the
//! `postdrop` group, and root (the tests run as root: `postfix start`
//! needs it). Nothing leaves the machine: no DNS (`smtp_dns_support_level
//! = disabled`, no reverse lookup of clients; but see below), every transport
//! (`default`, `relay`, `local`, `virtual`) is `discard`, so a delivery is
//! a log line, not a message sent or a mailbox written; no alias file,
//! no system accounts (`local_recipient_maps` empty: every local
//! recipient is accepted). Many rejections in one session cost no sleep
//! and no disconnect (the error limits are raised).
//!
//! The port: Postfix binds its own listener, so a free port is found,
//! released and handed to it; should another socket take it meanwhile,
//! Postfix fails to bind, says so in its log, and the start is retried on
//! another port (never a test failing on a port race, never a test
//! talking to someone else's server: the port is only used after
//! Postfix's start said its listener is up).
//!
//! With DNS: see [`super::postfix_dns`].
//!
//! Reading what it did: SMTP replies typed ([`Reply`]: code, enhanced
//! code), and the delivery lines of its log ([`Delivery`]: `to=`,
//! `orig_to=`, `relay=`, `dsn=`, `status=`), written by postlogd (the
//! `postlog` service) into `maillog`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::netns::Netns;
use super::postfix_dns;
pub use super::postfix_log::Delivery;
use super::{ensure_package, temp_dir, wait_for_log, Client, TestDir};

/// The services Postfix needs besides the SMTP listener (Debian's
/// master.cf, every service unchrooted; no tlsmgr, no postscreen).
const MASTER_CF: &str = "\
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
proxywrite unix -       -       n       -       1       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
local     unix  -       n       n       -       -       local
virtual   unix  -       n       n       -       -       virtual
lmtp      unix  -       -       n       -       -       lmtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
";

/// The main.cf every instance starts from (see the head comment); a
/// test's extras replace a parameter named here, or add one.
fn base_main_cf(dir: &Path) -> Vec<(String, String)> {
    let d = dir.display();
    let fixed = [
        ("compatibility_level", "3.6"),
        ("mail_owner", "postfix"),
        ("setgid_group", "postdrop"),
        ("myhostname", "postfix.test"),
        ("mydomain", "postfix.test"),
        ("myorigin", "$myhostname"),
        ("mydestination", "$myhostname"),
        ("inet_interfaces", "127.0.0.1"),
        ("inet_protocols", "ipv4"),
        ("mynetworks", "127.0.0.1/32"),
        ("smtp_dns_support_level", "disabled"),
        ("lmtp_dns_support_level", "disabled"),
        ("smtp_host_lookup", "native"),
        ("smtpd_peername_lookup", "no"),
        ("default_transport", "discard"),
        ("relay_transport", "discard"),
        ("local_transport", "discard"),
        ("virtual_transport", "discard"),
        ("alias_maps", ""),
        ("alias_database", ""),
        ("local_recipient_maps", ""),
        (
            "smtpd_relay_restrictions",
            "permit_mynetworks, reject_unauth_destination",
        ),
        ("smtpd_tls_security_level", "none"),
        ("smtp_tls_security_level", "none"),
        ("biff", "no"),
        ("append_dot_mydomain", "no"),
        ("smtpd_error_sleep_time", "0"),
        ("smtpd_soft_error_limit", "1000"),
        ("smtpd_hard_error_limit", "1000"),
        ("smtpd_junk_command_limit", "1000"),
    ];
    let mut cf = vec![
        ("queue_directory".to_string(), format!("{d}/spool")),
        ("data_directory".to_string(), format!("{d}/data")),
        ("maillog_file".to_string(), format!("{d}/maillog")),
        ("maillog_file_prefixes".to_string(), d.to_string()),
    ];
    cf.extend(fixed.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    cf
}

/// A running Postfix; stopped when dropped.
pub struct Postfix {
    /// Where its SMTP server listens (on 127.0.0.1).
    pub addr: SocketAddr,
    /// The listeners of [`Postfix::start_listening`]'s services, in order.
    pub listeners: Vec<SocketAddr>,
    dir: TestDir,
}

impl Postfix {
    /// Starts an instance with `main_cf_extra` over the base main.cf and
    /// `master_extra` appended to master.cf (see [`Postfix::start_with`]).
    pub fn start(main_cf_extra: &[(&str, &str)], master_extra: &str) -> Postfix {
        Postfix::start_with(&[], main_cf_extra, master_extra)
    }

    /// As [`Postfix::start`], with `files` (name, text) written into the
    /// configuration directory first: name them in main.cf as
    /// `texthash:$config_directory/NAME`.
    pub fn start_with(
        files: &[(&str, &str)],
        main_cf_extra: &[(&str, &str)],
        master_extra: &str,
    ) -> Postfix {
        Postfix::start_full(files, main_cf_extra, master_extra, None, &[])
    }

    /// As [`Postfix::start_with`], with more listeners: each of
    /// `services` is the command of one more `inet` service (`smtpd -o
    /// { smtpd_recipient_restrictions = reject }`) on a port of its own,
    /// in [`Postfix::listeners`].
    pub fn start_listening(
        files: &[(&str, &str)],
        main_cf_extra: &[(&str, &str)],
        master_extra: &str,
        services: &[&str],
    ) -> Postfix {
        Postfix::start_full(files, main_cf_extra, master_extra, None, services)
    }

    /// As [`Postfix::start_with`]; with `dns`, the resolver's files and
    /// the start as [`super::postfix_dns`] says.
    pub(super) fn start_resolving(
        files: &[(&str, &str)],
        main_cf_extra: &[(&str, &str)],
        master_extra: &str,
        dns: Option<(IpAddr, Option<&Netns>)>,
    ) -> Postfix {
        Postfix::start_full(files, main_cf_extra, master_extra, dns, &[])
    }

    fn start_full(
        files: &[(&str, &str)],
        main_cf_extra: &[(&str, &str)],
        master_extra: &str,
        dns: Option<(IpAddr, Option<&Netns>)>,
        services: &[&str],
    ) -> Postfix {
        ensure_package("/usr/sbin/postfix", "postfix");
        let dir = temp_dir("postfix");
        prepare(&dir, files, main_cf_extra);
        if let Some((nameserver, _)) = dns {
            postfix_dns::resolver_files(&dir, nameserver);
        }
        for _attempt in 0..5 {
            let port = free_port();
            let ports: Vec<u16> = services.iter().map(|_| free_port()).collect();
            let more: String = services
                .iter()
                .zip(&ports)
                .map(|(cmd, p)| format!("127.0.0.1:{p} inet n - n - - {cmd}\n"))
                .collect();
            let master =
                format!("127.0.0.1:{port} inet n - n - - smtpd\n{more}{MASTER_CF}{master_extra}\n");
            write_settled(&dir.join("master.cf"), &master);
            run(&dir, "check");
            let (ok, output) = match dns {
                None => postfix(&dir, "start"),
                Some((_, netns)) => postfix_dns::start_in_namespace(&dir, netns),
            };
            if ok {
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let listeners = ports
                    .iter()
                    .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                    .collect();
                return Postfix {
                    addr,
                    listeners,
                    dir,
                };
            }
            let log = read_maillog(&dir);
            assert!(
                log.contains("Address already in use"),
                "postfix start failed: {output}\n{log}"
            );
        }
        panic!("postfix: no free port in 5 attempts; see {}", dir.display());
    }

    /// Its configuration directory (`$config_directory`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its log as written so far.
    pub fn maillog(&self) -> String {
        read_maillog(&self.dir)
    }

    /// An SMTP session from 127.0.0.1, greeted and past EHLO.
    pub async fn session(&self) -> Session {
        self.session_from("127.0.0.1").await
    }

    /// An SMTP session from the loopback address `local`.
    pub async fn session_from(&self, local: &str) -> Session {
        let (mut client, greeting) = Client::connect_from(local, self.addr).await;
        assert!(greeting.starts_with("220 "), "{greeting}");
        let ehlo = client.cmd("EHLO client.test").await;
        assert!(ehlo.starts_with("250"), "{ehlo}");
        Session { client }
    }

    /// The delivery lines of its log so far.
    ///
    /// A delivery line is logged for each recipient of a message:
    /// `orig_to` tells them apart when several recipients of one message
    /// were rewritten (cleanup drops a duplicate only when both its
    /// original and its final address are the same).
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.maillog().lines().filter_map(Delivery::parse).collect()
    }

    /// Waits up to `secs` until every message of `queue_ids` is done with
    /// (qmgr's `removed`), then gives their delivery lines; fails the test
    /// if one is not done in time.
    pub async fn wait_done(&self, queue_ids: &[String], secs: u64) -> Vec<Delivery> {
        let removed = |log: &str, qid: &str| log.contains(&format!(" {qid}: removed\n"));
        let done = wait_for_log(secs, &self.dir, || {
            let log = self.maillog();
            queue_ids.iter().all(|q| removed(&log, q))
        })
        .await;
        let log = self.maillog();
        let missing: Vec<&String> = queue_ids.iter().filter(|q| !removed(&log, q)).collect();
        assert!(done, "not done within {secs} s: {missing:?}\n{log}");
        self.deliveries()
            .into_iter()
            .filter(|d| queue_ids.contains(&d.queue_id))
            .collect()
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let master = master_pid(&self.dir);
        let _ = postfix(&self.dir, "stop");
        let Some(pid) = master else { return };
        // The master stops its children, then itself.
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(pid) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(1);
            while alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The directories, files and main.cf of an instance in `dir`.
fn prepare(dir: &Path, files: &[(&str, &str)], extra: &[(&str, &str)]) {
    use std::os::unix::fs::PermissionsExt;
    // Postfix's processes run as `postfix`: they must reach the
    // directory; the queue directory itself must be root's.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(dir.join("spool")).unwrap();
    std::fs::create_dir(dir.join("data")).unwrap();
    let chown = Command::new("chown")
        .arg("postfix")
        .arg(dir.join("data"))
        .status()
        .unwrap();
    assert!(chown.success(), "chown postfix data");
    for (name, text) in files {
        write_settled(&dir.join(name), text);
    }
    let mut cf = base_main_cf(dir);
    for (name, value) in extra {
        match cf.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value.to_string(),
            None => cf.push((name.to_string(), value.to_string())),
        }
    }
    let text: String = cf.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
    write_settled(&dir.join("main.cf"), &text);
}

/// Writes `path` with a modification time in the past: Postfix reads a
/// file changed within the last second again and again, 300 ms apart,
/// until it is a second old (in case it was still being written), which
/// cost each program that reads it (postfix, postconf, every daemon
/// opening a texthash table) 1.5 s.
pub(super) fn write_settled(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    let past = std::time::SystemTime::now() - Duration::from_secs(10);
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(past).unwrap();
}

/// A loopback port free now (see the head comment for the race).
fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

/// `postfix -c DIR COMMAND`: whether it succeeded, and what it printed
/// (its errors go to the log when its output is not a terminal).
fn postfix(dir: &Path, command: &str) -> (bool, String) {
    let out = Command::new("postfix")
        .arg("-c")
        .arg(dir)
        .arg(command)
        .output()
        .expect("postfix (Debian package postfix)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `postfix -c DIR COMMAND`, which must succeed.
fn run(dir: &Path, command: &str) {
    let (ok, output) = postfix(dir, command);
    assert!(
        ok,
        "postfix {command} failed: {output}\n{}",
        read_maillog(dir)
    );
}

fn read_maillog(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("maillog")).unwrap_or_default()
}

/// The master's pid, from its pid file in the queue directory.
fn master_pid(dir: &Path) -> Option<i32> {
    let file: PathBuf = dir.join("spool/pid/master.pid");
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// The (to, orig_to) pairs, lower case, of `qid`'s deliveries that were
/// sent, as [`super::sent_pairs`] gives Sluice's.
pub fn sent_pairs(
    deliveries: &[Delivery],
    qid: &str,
) -> std::collections::BTreeSet<(String, String)> {
    deliveries
        .iter()
        .filter(|d| d.queue_id == qid && d.status == "sent")
        .map(|d| {
            let to = d.to.to_ascii_lowercase();
            let orig = d.orig_to.clone().unwrap_or(d.to.clone());
            (to, orig.to_ascii_lowercase())
        })
        .collect()
}

/// One SMTP reply: its code, its enhanced status code when it has one,
/// and the text after them (the last line's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: u16,
    pub enhanced: Option<String>,
    pub text: String,
}

impl Reply {
    /// Reads a whole reply as [`Client::reply`] returns it.
    pub fn parse(raw: &str) -> Reply {
        let last = raw.trim_end().lines().last().unwrap_or("");
        let code = last
            .get(..3)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("not an SMTP reply: {raw:?}"));
        let rest = last.get(4..).unwrap_or("");
        let (first, after) = rest.split_once(' ').unwrap_or((rest, ""));
        let is_enhanced = first.split('.').count() == 3
            && first
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        match is_enhanced {
            true => Reply {
                code,
                enhanced: Some(first.to_string()),
                text: after.to_string(),
            },
            false => Reply {
                code,
                enhanced: None,
                text: rest.to_string(),
            },
        }
    }
}

/// What became of one message sent in a [`Session`].
#[derive(Debug, Clone)]
pub struct Sent {
    /// The reply to each RCPT, in order.
    pub rcpts: Vec<Reply>,
    /// The queue ID, when the message was queued (some recipient taken).
    pub queue_id: Option<String>,
}

/// An SMTP session with the instance.
pub struct Session {
    pub client: Client,
}

impl Session {
    /// Sends `line` and reads the reply.
    pub async fn cmd(&mut self, line: &str) -> Reply {
        Reply::parse(&self.client.cmd(line).await)
    }

    /// MAIL FROM `from`, then each of `rcpts`: their replies. The
    /// transaction is reset after (RSET): nothing is sent.
    pub async fn rcpt_replies(&mut self, from: &str, rcpts: &[String]) -> Vec<Reply> {
        let mail = self.cmd(&format!("MAIL FROM:<{from}>")).await;
        assert_eq!(mail.code, 250, "MAIL: {mail:?}");
        let mut replies = Vec::with_capacity(rcpts.len());
        for rcpt in rcpts {
            replies.push(self.cmd(&format!("RCPT TO:<{rcpt}>")).await);
        }
        let rset = self.cmd("RSET").await;
        assert_eq!(rset.code, 250, "RSET: {rset:?}");
        replies
    }

    /// One message from `from` to `rcpts`: the RCPT replies and, when
    /// one was taken, the message sent and its queue ID.
    pub async fn send(&mut self, from: &str, rcpts: &[String]) -> Sent {
        let mail = self.cmd(&format!("MAIL FROM:<{from}>")).await;
        assert_eq!(mail.code, 250, "MAIL: {mail:?}");
        let mut replies = Vec::with_capacity(rcpts.len());
        for rcpt in rcpts {
            replies.push(self.cmd(&format!("RCPT TO:<{rcpt}>")).await);
        }
        if replies.iter().all(|r| r.code != 250) {
            let rset = self.cmd("RSET").await;
            assert_eq!(rset.code, 250, "RSET: {rset:?}");
            return Sent {
                rcpts: replies,
                queue_id: None,
            };
        }
        let data = self.cmd("DATA").await;
        assert_eq!(data.code, 354, "DATA: {data:?}");
        self.client.send(super::body("postfix").as_bytes()).await;
        let queued = self.cmd(".").await;
        assert_eq!(queued.code, 250, "end of data: {queued:?}");
        Sent {
            rcpts: replies,
            queue_id: Some(super::qid_of(&queued.text)),
        }
    }
}

#[tokio::test]
async fn an_instance_starts_delivers_nothing_outside_and_stops() {
    let postfix = Postfix::start(&[], "");
    let mut session = postfix.session().await;
    let sent = session.send("a@client.test", &["b@far.test".into()]).await;
    let rcpt = &sent.rcpts[0];
    assert_eq!((rcpt.code, rcpt.enhanced.as_deref()), (250, Some("2.1.5")));
    let qid = sent.queue_id.expect("queued");
    let deliveries = postfix.wait_done(std::slice::from_ref(&qid), 10).await;
    let d = &deliveries[..];
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].service.as_str(), d[0].to.as_str()),
        ("discard", "b@far.test")
    );
    assert_eq!(
        (d[0].relay.as_str(), d[0].status.as_str()),
        ("none", "sent")
    );
    let master = master_pid(postfix.dir()).expect("a master pid file");
    assert!(alive(master));
    drop(session);
    drop(postfix);
    assert!(!alive(master), "the master is stopped with the instance");
}
