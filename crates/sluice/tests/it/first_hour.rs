//! A Postfix administrator's first hour (issue 35): the embedded default
//! delivers a first message to `me@localhost` and its bounces land;
//! `-o` overrides; `sluice config`, `lookup`, `address` answer what
//! postconf, postmap -q and sendmail -bv answer; `reload`, `status` and
//! `stop` drive a running daemon. Every daemon here is the real binary.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// The Maildir messages under `dir/new`.
fn new_mail(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir.join("new")) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// `sluice serve` with no configuration file (the embedded default), in
/// `dir` as its working directory, with `-o` overrides for a port of its
/// own, a JSON log and a route for `remote.test`.
fn embedded(dir: &Path, hop: std::net::SocketAddr, more: &[&str]) -> Child {
    let mut cmd = sluice();
    cmd.current_dir(dir).arg("serve");
    let route = format!(
        "transport={{\"remote.test\" = \"smtp:[{}]:{}\"}}",
        hop.ip(),
        hop.port()
    );
    for o in [
        "smtpd.listen=127.0.0.1:0",
        "log_format=json",
        "log_file=maillog",
        &route,
    ]
    .iter()
    .chain(more)
    {
        cmd.arg("-o").arg(o);
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_default_delivers_to_localhost_and_its_bounces_land() {
    let dir = temp_dir("first-message");
    let sink = recording_sink().await;
    let _daemon = Daemon(embedded(&dir, sink.addr, &[]));
    let smtp = listening_in(&dir.join("maillog"), 0, "smtp").await;
    let mut c = Client::ready(smtp).await;
    let first = c
        .message("you@example.test", &["me@localhost"], &body("first"))
        .await;
    assert!(first.starts_with("250"), "{first}");
    // A message from me@localhost that the next hop refuses: its bounce
    // comes back to me@localhost, and lands too.
    let refused = c
        .message("me@localhost", &["reject-me@remote.test"], &body("bounces"))
        .await;
    assert!(refused.starts_with("250"), "{refused}");
    let maildir = dir.join("var/mail/me");
    assert!(
        wait_until(20, || new_mail(&maildir).len() == 2).await,
        "want the message and the bounce in {}: {:?}",
        maildir.display(),
        new_mail(&maildir)
    );
    let texts: Vec<String> = new_mail(&maildir)
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("Subject: first")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("Subject: Undelivered Mail Returned to Sender")),
        "no bounce among {texts:?}"
    );
}

/// A small Postfix-like site: a virtual domain with mailboxes and
/// aliases, a relay domain through a configured route with TLS required.
fn site(dir: &Path) -> PathBuf {
    std::fs::write(
        dir.join("mailboxes"),
        "alice@example.test example.test/alice/\nbob@example.test example.test/bob/\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("aliases"),
        "info@example.test alice@example.test, bob@example.test\n\
         ext@example.test someone@relay.test\n",
    )
    .unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "hostname = \"MX.Example.TEST\"\ndata_dir = \"{dir}/var\"\n\
             [smtpd]\nmynetworks = [\"10.1.2.3\"]\nrelay_domains = [\"relay.test\"]\n\
             [local]\ndomains = [\"example.test\"]\nmailbox_table = \"mailboxes\"\n\
             alias_table = \"aliases\"\nmaildir_base = \"/srv/mail\"\n\
             [transport]\n\"relay.test\" = \"smtp:[127.0.0.1]:2626\"\n\
             [delivery.tls_policy]\n\"smtp:[127.0.0.1]:2626\" = \"encrypt\"\n\
             [tables.mailboxes]\nkind = \"static\"\npath = \"{dir}/mailboxes\"\n\
             [tables.aliases]\nkind = \"static\"\npath = \"{dir}/aliases\"\n\
             [tables.directory]\nkind = \"ldap\"\nuris = [\"ldap://127.0.0.1:9\"]\n\
             base = \"dc=example\"\nbind_dn = \"cn=reader\"\nbind_password = \"s3cret-pw\"\n",
            dir = dir.display()
        ),
    )
    .unwrap();
    config
}

/// Runs `sluice ARGS`: its exit status and standard output.
fn run(args: &[&str]) -> (i32, String) {
    let out = sluice().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("sluice {args:?}: {stderr}");
    (out.status.code().unwrap_or(-1), stdout)
}

#[test]
fn config_prints_settings_like_postconf() {
    let dir = temp_dir("postconf");
    let file = site(&dir);
    let file = file.to_str().unwrap();
    // -n: what the file sets, in canonical form, as TOML that parses.
    let (rc, set) = run(&["config", "--config", file, "-n"]);
    assert_eq!(rc, 0);
    let set: toml::Table = set.parse().unwrap();
    assert_eq!(set["hostname"].as_str(), Some("mx.example.test"));
    assert_eq!(set["smtpd"]["mynetworks"][0].as_str(), Some("10.1.2.3/32"));
    assert!(set.get("queue").is_none(), "not set in the file: {set:?}");
    assert_eq!(
        set["tables"]["directory"]["bind_password"].as_str(),
        Some("(hidden)")
    );
    // Every setting in force pastes back as a configuration that loads.
    let (rc, all) = run(&["config", "--config", file]);
    assert_eq!(rc, 0);
    let pasted = dir.join("pasted.toml");
    std::fs::write(&pasted, &all).unwrap();
    let (rc, again) = run(&["config", "--config", pasted.to_str().unwrap()]);
    assert_eq!((rc, &again), (0, &all));
    // One key, inside its section; -o overrides it; -d gives defaults.
    let (_, one) = run(&["config", "--config", file, "smtpd.max_sessions"]);
    assert_eq!(one, "[smtpd]\nmax_sessions = 10000\n");
    let (_, one) = run(&[
        "config",
        "--config",
        file,
        "-o",
        "smtpd.max_sessions=7",
        "smtpd.max_sessions",
    ]);
    assert_eq!(one, "[smtpd]\nmax_sessions = 7\n");
    let (_, json) = run(&["config", "-d", "--json", "queue.minimal_backoff_secs"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["queue"]["minimal_backoff_secs"], 300);
    let (rc, _) = run(&["config", "--config", file, "smtpd.nope"]);
    assert_eq!(rc, 1, "an unknown key is an error");
}

/// `sluice address --json` for one address.
fn explain(file: &str, address: &str) -> serde_json::Value {
    let (rc, out) = run(&["address", "--config", file, "--json", address]);
    assert_eq!(rc, 0, "{out}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn address_says_where_mail_goes_like_sendmail_bv() {
    let dir = temp_dir("address");
    let file = site(&dir);
    let file = file.to_str().unwrap();
    let alice = explain(file, "Alice@Example.TEST");
    assert_eq!(alice["rcpt"]["decision"], "local");
    assert_eq!(
        alice["deliveries"][0]["mailbox"],
        "/srv/mail/example.test/alice/"
    );
    let info = explain(file, "info@example.test");
    assert_eq!(info["rcpt"]["aliased"], true);
    let members: Vec<&str> = info["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["to"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["alice@example.test", "bob@example.test"]);
    let ext = explain(file, "ext@example.test");
    assert_eq!(ext["deliveries"][0]["next_hop"], "smtp:[127.0.0.1]:2626");
    assert_eq!(ext["deliveries"][0]["tls"], "encrypt");
    let nobody = explain(file, "nobody@example.test");
    assert_eq!(nobody["rcpt"]["decision"], "refused");
    assert!(nobody["rcpt"]["reply"]
        .as_str()
        .unwrap()
        .starts_with("550 5.1.1 <nobody@example.test>"));
    assert!(nobody["deliveries"].as_array().unwrap().is_empty());
    let relay = explain(file, "someone@relay.test");
    assert_eq!(relay["rcpt"]["decision"], "relay_domain");
    let away = explain(file, "x@elsewhere.test");
    assert_eq!(away["rcpt"]["decision"], "relay_only");
    assert!(away["rcpt"]["refused"]
        .as_str()
        .unwrap()
        .starts_with("554 5.7.1"));
    assert_eq!(away["deliveries"][0]["next_hop"], "smtp:elsewhere.test:25");
    assert_eq!(away["deliveries"][0]["tls"], "may");
    // sendmail -bv answers the same, and says a refusal with EX_NOUSER.
    let (rc, text) = run(&["sendmail", "-C", file, "-bv", "nobody@example.test"]);
    assert_eq!(rc, 67, "{text}");
    assert!(text.contains("550 5.1.1"), "{text}");
    let (rc, text) = run(&["sendmail", "-C", file, "-bv", "info@example.test"]);
    assert_eq!(rc, 0, "{text}");
    assert!(text.contains("<bob@example.test> via Maildir /srv/mail/example.test/bob/"));
}

#[test]
fn lookup_queries_one_table_like_postmap_q() {
    let dir = temp_dir("postmap");
    let file = site(&dir);
    let file = file.to_str().unwrap();
    let (rc, out) = run(&["lookup", "--config", file, "aliases", "info@example.test"]);
    assert_eq!(
        (rc, out.as_str()),
        (0, "alice@example.test, bob@example.test\n")
    );
    let (rc, out) = run(&["lookup", "--config", file, "aliases", "none@example.test"]);
    assert_eq!((rc, out.as_str()), (1, ""));
    let (rc, _) = run(&["lookup", "--config", file, "nosuch", "x"]);
    assert_eq!(rc, 2);
    // A directory that cannot answer: try again later, never "not found".
    let (rc, _) = run(&["lookup", "--config", file, "directory", "a@example.test"]);
    assert_eq!(rc, 75);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_status_and_stop_drive_the_running_daemon() {
    let dir = temp_dir("control");
    let file = dir.join("sluice.toml");
    let text = format!(
        "hostname = \"mx.example.test\"\nrun_as_root = true\ndata_dir = \"{dir}/var\"\n\
         log_file = \"{dir}/maillog\"\nlog_format = \"json\"\n[smtpd]\nlisten = [\"127.0.0.1:0\"]\n",
        dir = dir.display()
    );
    std::fs::write(&file, &text).unwrap();
    let f = file.to_str().unwrap();
    let child = sluice()
        .args(["serve", "--config", f, "-o", "smtpd.max_sessions=5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut daemon = Daemon(child);
    let smtp = listening_in(&dir.join("maillog"), 0, "smtp").await;
    let (rc, status) = run(&["status", "--config", f]);
    assert_eq!(rc, 0, "{status}");
    assert!(status.contains(&format!("running, pid {pid},")), "{status}");
    assert!(status.contains(&smtp.to_string()), "{status}");
    assert!(status.contains("with 1 -o override"), "{status}");
    // What the daemon loaded, the -o included.
    let (rc, json) = run(&["config", "--config", f, "--running", "--json"]);
    assert_eq!(rc, 0, "{json}");
    let running: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(running["settings"]["smtpd"]["max_sessions"], 5);
    assert_eq!(running["listeners"][0], smtp.to_string());
    // A change is applied and said; the -o still holds after it.
    std::fs::write(&file, format!("{text}max_recipients = 50\n")).unwrap();
    let (rc, said) = run(&["reload", "--config", f]);
    assert_eq!(rc, 0, "{said}");
    assert!(said.contains("smtpd"), "{said}");
    let (_, one) = run(&["config", "--config", f, "--running", "smtpd.max_recipients"]);
    assert!(one.ends_with("[smtpd]\nmax_recipients = 50\n"), "{one}");
    let (_, one) = run(&["config", "--config", f, "--running", "smtpd.max_sessions"]);
    assert!(one.ends_with("[smtpd]\nmax_sessions = 5\n"), "{one}");
    // A broken file is refused, said, and the daemon keeps serving.
    std::fs::write(&file, format!("{text}max_recipents = 50\n")).unwrap();
    let (rc, said) = run(&["reload", "--config", f]);
    assert_eq!(rc, 1, "{said}");
    assert!(
        said.contains("max_recipents") && said.contains("keeping"),
        "{said}"
    );
    Client::ready(smtp).await;
    // The public socket (any local account) cannot stop it.
    let public = dir.join("var/public/submit.sock");
    let mut stream = std::os::unix::net::UnixStream::connect(&public).unwrap();
    use std::io::{BufRead, Write};
    stream
        .write_all(b"{\"cmd\":\"control\",\"action\":\"stop\"}\n")
        .unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut answer)
        .unwrap();
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["ok"], false, "{answer}");
    Client::ready(smtp).await;
    // Stop returns once the daemon is gone.
    let (rc, said) = run(&["stop", "--config", f]);
    assert_eq!((rc, said.as_str()), (0, "sluice: stopped\n"));
    // (Its socket is gone first; the process ends right after.)
    let mut exited = None;
    wait_until(30, || {
        exited = daemon.0.try_wait().unwrap();
        exited.is_some()
    })
    .await;
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
    let (rc, _) = run(&["status", "--config", f]);
    assert_eq!(rc, 1, "not running");
}

#[test]
fn check_config_refuses_a_root_start_that_serve_would_refuse() {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let has_account = passwd.lines().any(|l| l.starts_with("sluice:"));
    // SAFETY: geteuid only reads the process's effective uid.
    if unsafe { libc::geteuid() } != 0 || has_account {
        eprintln!("skipped: needs root and no `sluice` account");
        return;
    }
    let dir = temp_dir("root-start");
    let file = dir.join("sluice.toml");
    std::fs::write(&file, "[smtpd]\nlisten = [\"127.0.0.1:0\"]\n").unwrap();
    let f = file.to_str().unwrap();
    let (rc, _) = run(&["check-config", "--config", f]);
    assert_eq!(
        rc, 1,
        "serve refuses this file as root: check-config must too"
    );
    std::fs::write(
        &file,
        "run_as_root = true\n[smtpd]\nlisten = [\"127.0.0.1:0\"]\n",
    )
    .unwrap();
    let (rc, out) = run(&["check-config", "--config", f]);
    assert_eq!((rc, out.as_str()), (0, "configuration ok\n"));
}
