//! System users and local(8) delivery (`[system]`): real accounts made
//! with useradd (the suite runs as root), mail over SMTP to
//! user@mydestination, and what lands in their mbox (the `From ` line,
//! `Return-Path:`, `X-Original-To:`, `Delivered-To:`, owned by the user)
//! or Maildir; aliases(5) to users and to a /file, `:include:`, `owner-`
//! lists, `.forward`, an unknown user refused at RCPT, a forwarding loop
//! bounced 5.4.6. The same cases against a real Postfix in
//! `system_users_diff.rs`.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::users::TestUser;
use common::*;
use sluice::config::Config;

pub(crate) fn need_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test creates local accounts: run the suite as root, as CI does");
    }
}

/// A test directory others may traverse (homes live in it), with a mail
/// spool `mail/` (0755, root's: mailboxes are created by root and
/// chowned, as Postfix does there) and an aliases file.
pub(crate) fn site(name: &str, aliases: &str) -> (TestDir, Config) {
    need_root();
    let dir = temp_dir(name);
    std::fs::set_permissions(&*dir, PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(dir.join("mail")).unwrap();
    std::fs::set_permissions(dir.join("mail"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("aliases"), aliases).unwrap();
    let mut cfg = config(&dir, None);
    cfg.recipient_delimiter = "+".into();
    cfg.system.mydestination = vec!["mx.test".parse().unwrap()];
    cfg.system.mail_spool_directory = dir.join("mail");
    cfg.system.alias_maps = vec![format!("hash:{}", dir.join("aliases").display())];
    (dir, cfg)
}

/// The mbox of `user` once it holds `n` messages.
async fn mbox(path: &Path, n: usize) -> String {
    let arrived = wait_until(15, || {
        std::fs::read_to_string(path)
            .is_ok_and(|t| t.matches("\nFrom ").count() + 1 >= n && t.ends_with("\n\n"))
    })
    .await;
    assert!(arrived, "{} has no {n} messages", path.display());
    std::fs::read_to_string(path).unwrap()
}

pub(crate) async fn send(addr: std::net::SocketAddr, to: &[&str], subject: &str) {
    let mut c = Client::ready(addr).await;
    let r = c.message("s@remote.test", to, &body(subject)).await;
    assert!(r.starts_with("250"), "{r}");
}

pub(crate) fn home(dir: &Path, tag: &str) -> PathBuf {
    dir.join(format!("home-{tag}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_to_a_system_user_lands_in_their_mbox_as_local_8_writes_it() {
    let (dir, cfg) = site("sys-mbox", "");
    let alice = TestUser::with_home("ma", &home(&dir, "a"));
    let (_server, addr) = start(cfg).await;
    let to = format!("{}+tag@mx.test", alice.name);
    send(addr, &[&to], "first").await;
    let path = dir.join("mail").join(&alice.name);
    let text = mbox(&path, 1).await;
    assert!(text.starts_with("From s@remote.test  "), "{text}");
    let headers = format!(
        "\nReturn-Path: <s@remote.test>\nX-Original-To: {to}\nDelivered-To: {to}\nReceived: "
    );
    assert!(text.contains(&headers), "{text}");
    assert!(!text.contains('\r'), "LF line ends in an mbox: {text:?}");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.uid(), alice.uid, "the mailbox is the user's");
    assert_eq!(meta.mode() & 0o777, 0o600);
    // A second message is appended, its body's From_ lines quoted.
    let mut c = Client::ready(addr).await;
    let msg = "Subject: two\r\n\r\nFrom here on\r\n>From there\r\n";
    let r = c.message("", &[&to], msg).await;
    assert!(r.starts_with("250"), "{r}");
    let text = mbox(&path, 2).await;
    assert!(text.contains("\nFrom MAILER-DAEMON  "), "{text}");
    assert!(text.contains("\n>From here on\n>From there\n\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_user_is_refused_at_rcpt_and_home_mailbox_is_a_maildir() {
    let (dir, mut cfg) = site("sys-maildir", "");
    let bob = TestUser::with_home("mb", &home(&dir, "b"));
    cfg.system.home_mailbox = "Maildir/".into();
    let (_server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<no-such-user-zq@mx.test>").await;
    assert_eq!(
        r.trim(),
        "550 5.1.1 <no-such-user-zq@mx.test>: Recipient address rejected: User unknown in local recipient table"
    );
    send(addr, &[&format!("{}@mx.test", bob.name)], "md").await;
    let new = home(&dir, "b").join("Maildir/new");
    assert!(
        wait_until(15, || std::fs::read_dir(&new)
            .is_ok_and(|mut d| d.next().is_some()))
        .await
    );
    let file = std::fs::read_dir(&new)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("Return-Path: <s@remote.test>\nX-Original-To: "),
        "{text}"
    );
    assert_eq!(std::fs::metadata(&file).unwrap().uid(), bob.uid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliases_reach_two_users_a_file_an_include_and_an_owner_list() {
    let (dir, cfg) = site("sys-alias", "");
    let a = TestUser::with_home("aa", &home(&dir, "a"));
    let b = TestUser::with_home("ab", &home(&dir, "b"));
    let c = TestUser::with_home("ac", &home(&dir, "c"));
    let log = dir.join("archive.mbox");
    // The file is written as default_privs (nobody): it must let them.
    std::fs::write(&log, "").unwrap();
    std::fs::set_permissions(&log, PermissionsExt::from_mode(0o666)).unwrap();
    let list = dir.join("list.inc");
    std::fs::write(&list, format!("# members\n{}\n", c.name)).unwrap();
    let aliases = format!(
        "team: {a}, {b}, {log}\nlist: :include:{list}\nowner-list: {a}\n",
        a = a.name,
        b = b.name,
        log = log.display(),
        list = list.display()
    );
    std::fs::write(dir.join("aliases"), aliases).unwrap();
    let (_server, addr) = start(cfg).await;
    send(addr, &["team@mx.test"], "team").await;
    for u in [&a, &b] {
        let text = mbox(&dir.join("mail").join(&u.name), 1).await;
        assert!(
            text.contains("\nX-Original-To: team@mx.test\nDelivered-To: team@mx.test\n"),
            "{text}"
        );
    }
    let text = mbox(&log, 1).await;
    assert!(text.contains("Delivered-To: team@mx.test"), "{text}");
    send(addr, &["list@mx.test"], "list").await;
    let text = mbox(&dir.join("mail").join(&c.name), 1).await;
    let owner = "owner-list@mx.test";
    assert!(
        text.starts_with(&format!("From {owner}  ")),
        "the owner- alias is the sender: {text}"
    );
    assert!(text.contains(&format!("Return-Path: <{owner}>")), "{text}");
    assert!(
        text.contains("Delivered-To: list@mx.test"),
        "forwarded with its Delivered-To: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_file_sends_mail_on_and_a_forwarding_loop_bounces_5_4_6() {
    let (dir, cfg) = site("sys-forward", "");
    let a = TestUser::with_home("fa", &home(&dir, "a"));
    let b = TestUser::with_home("fb", &home(&dir, "b"));
    let fwd = home(&dir, "a").join(".forward");
    std::fs::write(&fwd, format!("{}\n", b.name)).unwrap();
    std::os::unix::fs::chown(&fwd, Some(a.uid), None).unwrap();
    let (_server, addr) = start(cfg).await;
    send(addr, &[&format!("{}@mx.test", a.name)], "fwd").await;
    let text = mbox(&dir.join("mail").join(&b.name), 1).await;
    let (da, db) = (format!("{}@mx.test", a.name), format!("{}@mx.test", b.name));
    assert!(
        text.contains(&format!("Delivered-To: {db}\nDelivered-To: {da}\n")),
        "{text}"
    );
    assert!(
        !dir.join("mail").join(&a.name).exists(),
        "a forwarded everything"
    );
    // b forwards back to a: the loop is seen at a again.
    let fwd_b = home(&dir, "b").join(".forward");
    std::fs::write(&fwd_b, format!("{}\n", a.name)).unwrap();
    std::os::unix::fs::chown(&fwd_b, Some(b.uid), None).unwrap();
    send(addr, &[&da], "loop").await;
    let looped = wait_event(15, &dir, "delivery", |e| {
        e["status"] == "bounced" && e["dsn"] == "5.4.6"
    })
    .await;
    assert!(looped, "{:?}", deliveries(&dir, ""));
    let bounced = deliveries(&dir, "");
    let line = bounced.iter().find(|e| e["status"] == "bounced").unwrap();
    assert!(
        line.to_string().contains("mail forwarding loop for"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_cannot_make_the_daemon_write_what_they_could_not() {
    let (dir, cfg) = site("sys-hostile", "");
    let m = TestUser::with_home("hm", &home(&dir, "m"));
    let victim = dir.join("root-only");
    std::fs::write(&victim, "secret\n").unwrap();
    std::fs::set_permissions(&victim, PermissionsExt::from_mode(0o644)).unwrap();
    // A .forward naming a root file, and a symlink planted as the mailbox.
    let fwd = home(&dir, "m").join(".forward");
    std::fs::write(&fwd, format!("{}\n", victim.display())).unwrap();
    std::os::unix::fs::chown(&fwd, Some(m.uid), None).unwrap();
    let (_server, addr) = start(cfg).await;
    send(addr, &[&format!("{}@mx.test", m.name)], "evil").await;
    let failed = wait_event(15, &dir, "delivery", |e| e["status"] == "deferred").await;
    assert!(failed, "{:?}", deliveries(&dir, ""));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret\n");
    std::fs::remove_file(&fwd).unwrap();
    let planted = dir.join("mail").join(&m.name);
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    send(addr, &[&format!("{}@mx.test", m.name)], "evil2").await;
    let refused = wait_event(15, &dir, "delivery", |e| e["status"] == "bounced").await;
    assert!(refused, "{:?}", deliveries(&dir, ""));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret\n");
}

/// `sluice newaliases` (Postfix's newaliases/postalias): postalias's
/// warnings for a line without a colon and a duplicate name, exit 0; an
/// aliases file others may write is refused (exit 1), and so is the
/// daemon's start with it.
#[test]
fn newaliases_reports_like_postalias_and_refuses_a_writable_file() {
    let dir = temp_dir("sys-newaliases");
    let aliases = dir.join("aliases");
    std::fs::write(&aliases, "root: admin\nbroken line\nroot: other\n").unwrap();
    std::fs::set_permissions(&aliases, PermissionsExt::from_mode(0o644)).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "hostname = \"mx.test\"\ndata_dir = \"{}\"\n[system]\nmydestination = [\"mx.test\"]\nalias_maps = [\"hash:{}\"]\n",
            dir.join("var").display(),
            aliases.display()
        ),
    )
    .unwrap();
    let run = || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(["newaliases", "--config", &config.display().to_string()]);
        output_of(cmd, b"")
    };
    let (code, out, err) = run();
    assert_eq!(code, 0, "{out}{err}");
    let shown = aliases.display();
    assert!(
        err.contains(&format!("warning: {shown}, line 2: need name:value pair")),
        "{err}"
    );
    assert!(
        err.contains(&format!("warning: {shown}: duplicate entry: \"root\"")),
        "{err}"
    );
    assert!(out.contains("1 aliases"), "{out}");
    // The same words as Postfix's own postalias on the same file.
    ensure_package("/usr/sbin/postalias", "postfix");
    std::fs::write(dir.join("main.cf"), "").unwrap();
    let mut pa = std::process::Command::new("postalias");
    pa.arg("-c").arg(&*dir).arg(format!("hash:{shown}"));
    let (_, _, theirs) = output_of(pa, b"");
    for line in theirs.lines().filter(|l| l.contains("warning:")) {
        let warning = &line[line.find("warning:").unwrap()..].replace(".db:", ":");
        assert!(
            err.contains(warning),
            "postalias said {warning:?}; we said {err}"
        );
    }
    assert!(theirs.contains("line 2"), "{theirs}");
    std::fs::set_permissions(&aliases, PermissionsExt::from_mode(0o666)).unwrap();
    let (code, _, err) = run();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("writable by others"), "{err}");
}

/// Hostile `.forward`s: an `:include:` of /etc/shadow is read with the
/// user's rights (deferred, nothing of it delivered), and thousands of
/// targets stop at `expansion_limit` (5.4.6), nothing forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_cannot_read_root_files_or_explode() {
    let (dir, mut cfg) = site("sys-explode", "");
    cfg.system.expansion_limit = 50;
    let r = TestUser::with_home("xr", &home(&dir, "r"));
    let e = TestUser::with_home("xe", &home(&dir, "e"));
    let write = |u: &TestUser, tag: &str, text: String| {
        let fwd = home(&dir, tag).join(".forward");
        std::fs::write(&fwd, text).unwrap();
        std::os::unix::fs::chown(&fwd, Some(u.uid), None).unwrap();
    };
    write(&r, "r", ":include:/etc/shadow\n".into());
    let many: String = (0..5000).map(|i| format!("x{i}@far.test\n")).collect();
    write(&e, "e", many);
    let (_server, addr) = start(cfg).await;
    send(addr, &[&format!("{}@mx.test", r.name)], "shadow").await;
    send(addr, &[&format!("{}@mx.test", e.name)], "bomb").await;
    let deferred = wait_event(15, &dir, "delivery", |d| {
        d["status"] == "deferred" && d.to_string().contains("/etc/shadow")
    })
    .await;
    assert!(deferred, "{:?}", deliveries(&dir, ""));
    let limited = wait_event(15, &dir, "delivery", |d| {
        d["status"] == "bounced" && d.to_string().contains("expansion limit")
    })
    .await;
    assert!(limited, "{:?}", deliveries(&dir, ""));
    assert!(
        !deliveries(&dir, "")
            .iter()
            .any(|d| d.to_string().contains("far.test")),
        "nothing forwarded"
    );
}
