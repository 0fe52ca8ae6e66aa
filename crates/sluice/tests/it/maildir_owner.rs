//! `local.maildir_owner` (Postfix: virtual_uid_maps/virtual_gid_maps):
//! Maildirs a Dovecot running as `vmail` reads and writes. Root daemon:
//! directories and files are the owner's, 0700/0600. A daemon that gave
//! root up (the normal case) shares the owner's group: files 0660,
//! directories 2770. Both proven with the real Dovecot (`doveadm fetch`
//! and `doveadm flags add` as the owner); an account the daemon cannot
//! share a group with, or that does not exist, stops `check-config`.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::dovecot::{MailUser, Reader};
use common::users::TestUser;
use common::*;

fn need_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test starts the daemon as root, as CI does: run the suite as root");
    }
}

/// A configuration delivering `local.test` into Maildirs under `base`,
/// with `extra` at the top (`user`, `run_as_root`) and in `[local]`.
fn write_config(dir: &Path, top: &str, local: &str, base: &Path) -> PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!(
            "hostname = \"mx.test\"\ndata_dir = \"{}\"\nlog_file = \"{}\"\nlog_format = \"json\"\n{top}\n\
             [smtpd]\nlisten = [\"127.0.0.1:0\"]\n\
             [local]\ndomains = [\"local.test\"]\nmaildir_base = \"{}\"\n{local}\n",
            dir.join("var").display(),
            dir.join("log/maillog").display(),
            base.display(),
        ),
    )
    .unwrap();
    path
}

fn sluice(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(args);
    cmd
}

/// Starts `sluice serve`, sends one message to alice@local.test, waits
/// until it is in her `new/`; the daemon, and the file.
async fn deliver_one(dir: &Path, config: &Path, maildir: &Path) -> (Child, PathBuf) {
    let server = sluice(&["serve", "--config", &config.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = dir.join("log/maillog");
    let listen = listening_in(&log, 0, "smtp").await;
    let mut c = Client::ready(listen).await;
    let r = c
        .message("s@remote.test", &["alice@local.test"], &body("owned"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let new = maildir.join("new");
    let arrived = wait_until(15, || {
        std::fs::read_dir(&new).is_ok_and(|mut d| d.next().is_some())
    })
    .await;
    assert!(arrived, "{:?}", events_in(&log));
    let file = std::fs::read_dir(&new)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    (server, file)
}

fn stop(mut server: Child) {
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let _ = server.wait();
}

/// (mode bits incl. setgid, uid, gid) of `path`, not following a link.
fn owner(path: &Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

/// Dovecot, as the mail user, reads the message Sluice delivered and
/// flags it (a rename in the Maildir, and its index files written).
fn dovecot_reads_and_flags(dir: &Path, user: &TestUser, home: &Path) {
    let reader = Reader::start(
        dir,
        &[MailUser {
            address: "alice@local.test",
            uid: user.uid,
            gid: user.gid(),
            home,
        }],
    );
    let fetch = [
        "fetch",
        "-u",
        "alice@local.test",
        "hdr.subject",
        "mailbox",
        "INBOX",
        "all",
    ];
    let (code, out, err) = reader.doveadm(&fetch);
    assert_eq!(code, 0, "doveadm fetch: {out} {err}");
    assert!(out.contains("owned"), "{out}");
    let flag = [
        "flags",
        "add",
        "-u",
        "alice@local.test",
        "\\Seen",
        "mailbox",
        "INBOX",
        "all",
    ];
    let (code, out, err) = reader.doveadm(&flag);
    assert_eq!(code, 0, "doveadm flags add: {out} {err}");
    let maildir = home.join("Maildir");
    let seen = ["new", "cur"].iter().any(|sub| {
        std::fs::read_dir(maildir.join(sub))
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(":2,S"))
    });
    assert!(seen, "the flag is in the file's name");
    let (code, out, err) = reader.doveadm(&fetch);
    assert_eq!(code, 0, "doveadm fetch after flags: {out} {err}");
    let log = std::fs::read_to_string(reader.dir.join("dovecot.log")).unwrap_or_default();
    assert!(!log.contains("Error"), "{log}");
}

/// Root daemon (`run_as_root`): everything it makes below the base is
/// the owner's, 0700 and 0600, as Postfix's virtual(8) makes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_daemon_gives_the_maildir_to_its_owner() {
    need_root();
    let vmail = TestUser::create("vm");
    let dir = temp_dir("maildir-owner-root");
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = dir.join("vmail");
    let config = write_config(
        &dir,
        "user = \"root\"\nrun_as_root = true",
        &format!("maildir_owner = \"{}\"", vmail.name),
        &base,
    );
    let home = base.join("local.test/alice");
    let maildir = home.join("Maildir");
    let (server, file) = deliver_one(&dir, &config, &maildir).await;
    stop(server);
    let (uid, gid) = (vmail.uid, vmail.gid());
    assert_eq!(owner(&file), (0o600, uid, gid), "{}", file.display());
    for d in [
        base.clone(),
        base.join("local.test"),
        home.clone(),
        maildir.clone(),
        maildir.join("tmp"),
        maildir.join("new"),
        maildir.join("cur"),
    ] {
        assert_eq!(owner(&d), (0o700, uid, gid), "{}", d.display());
    }
    dovecot_reads_and_flags(&dir, &vmail, &home);

    // The same owner as numbers.
    let numbers = write_config(
        &dir,
        "user = \"root\"\nrun_as_root = true",
        &format!("maildir_owner = \"{uid}:{gid}\""),
        &base,
    );
    let out = sluice(&["check-config", "--config", &numbers.display().to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The daemon dropped to its own account, a member of the owner's group:
/// files 0660 and directories 2770 in that group, which Dovecot, running
/// as the owner, reads and writes. Its account outside the group: the
/// start is refused, naming the group and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprivileged_daemon_shares_the_owners_group() {
    need_root();
    let vmail = TestUser::create("vg");
    let daemon = TestUser::create("dg");
    let dir = temp_dir("maildir-owner-group");
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The operator makes the base, the owner's, open to its group.
    let base = dir.join("vmail");
    std::fs::create_dir(&base).unwrap();
    let (uid, gid) = (vmail.uid, vmail.gid());
    std::os::unix::fs::chown(&base, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let config = write_config(
        &dir,
        &format!("user = \"{}\"", daemon.name),
        &format!("maildir_owner = \"{}\"", vmail.name),
        &base,
    );
    let conf = config.display().to_string();

    // Not a member yet: check-config and serve refuse, saying why.
    let out = sluice(&["check-config", "--config", &conf])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "check-config passed: {said}");
    assert!(
        said.contains("local.maildir_owner")
            && said.contains(&daemon.name)
            && said.contains("usermod -a -G"),
        "{said}"
    );
    let out = sluice(&["serve", "--config", &conf]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve started: {said}");
    assert!(said.contains("local.maildir_owner"), "{said}");

    daemon.join(&vmail.name);
    let out = sluice(&["check-config", "--config", &conf])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let home = base.join("local.test/alice");
    let maildir = home.join("Maildir");
    let (server, file) = deliver_one(&dir, &config, &maildir).await;
    let groups = std::fs::read_to_string(format!("/proc/{}/status", server.id())).unwrap();
    // A reload to an owner whose group the running daemon lacks: refused.
    let other = TestUser::create("vo");
    write_config(
        &dir,
        &format!("user = \"{}\"", daemon.name),
        &format!("maildir_owner = \"{}\"", other.name),
        &base,
    );
    let _ = Command::new("kill")
        .args(["-HUP", &server.id().to_string()])
        .status();
    let log = dir.join("log/maillog");
    let refused = wait_until(10, || {
        logged_in(&log).iter().any(|l| {
            matches!(
                &l.event,
                Event::Reload(Reload::Refused { result, error, .. })
                    if result == "refused" && error.contains("local.maildir_owner")
            )
        })
    })
    .await;
    stop(server);
    assert!(refused, "{:?}", events_in(&log));
    let groups = groups
        .lines()
        .find(|l| l.starts_with("Groups:"))
        .unwrap_or("")
        .to_string();
    assert!(
        !groups.split_whitespace().skip(1).any(|g| g == "0"),
        "{groups}"
    );
    assert_eq!(owner(&file), (0o660, daemon.uid, gid), "{}", file.display());
    for d in [
        base.join("local.test"),
        home.clone(),
        maildir.clone(),
        maildir.join("tmp"),
        maildir.join("new"),
        maildir.join("cur"),
    ] {
        assert_eq!(owner(&d), (0o2770, daemon.uid, gid), "{}", d.display());
    }
    dovecot_reads_and_flags(&dir, &vmail, &home);
}

/// An account that does not exist stops `check-config`, naming the key.
#[test]
fn an_unknown_owner_is_a_configuration_error() {
    let dir = temp_dir("maildir-owner-unknown");
    let config = write_config(
        &dir,
        "",
        "maildir_owner = \"no-such-vmail-account\"",
        &dir.join("vmail"),
    );
    let out = sluice(&["check-config", "--config", &config.display().to_string()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("local.maildir_owner") && said.contains("no-such-vmail-account"),
        "{said}"
    );
    for bad in ["5000:", ":5000", "5000:x", "0:0x"] {
        let config = write_config(
            &dir,
            "",
            &format!("maildir_owner = \"{bad}\""),
            &dir.join("vmail"),
        );
        let out = sluice(&["check-config", "--config", &config.display().to_string()])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad}: {out:?}");
    }
}
