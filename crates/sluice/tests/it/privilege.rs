//! Least privilege: `sluice serve` started as root (as CI runs it) with
//! `user` set to an account the test creates binds its port, gives root
//! up for good, and everything it made is that account's, 0600/0700, the
//! log 0640. Staying root needs `run_as_root = true`.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::users::TestUser;
use common::*;

/// The daemon's configuration: port 0 (its `listening` event says where),
/// events as JSON.
fn write_config(dir: &Path, extra: &str, hop: std::net::SocketAddr) -> std::path::PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!(
            "hostname = \"mx.test\"\ndata_dir = \"{}\"\nlog_file = \"{}\"\nlog_format = \"json\"\n{extra}\n\
             [smtpd]\nlisten = [\"127.0.0.1:0\"]\n\
             [delivery]\nrelayhost = \"smtp:[{}]:{}\"\n",
            dir.join("var").display(),
            dir.join("log/maillog").display(),
            hop.ip(),
            hop.port()
        ),
    )
    .unwrap();
    path
}

fn ids(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or("")
        .to_string()
}

/// `sluice serve` with `config`, which must refuse to start: its stderr.
fn refused_start(config: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--config", &config.display().to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success(), "started: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mode_and_owner(path: &Path) -> (u32, u32) {
    let m = std::fs::metadata(path).unwrap();
    (m.mode() & 0o777, m.uid())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_start_gives_root_up_and_keeps_its_files_to_itself() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test starts the daemon as root, as CI does: run the suite as root");
    }
    let user = TestUser::create("p");
    let dir = temp_dir("privilege");
    // The account must be able to reach its directory.
    std::fs::set_permissions(&*dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sink = recording_sink().await;
    let config = write_config(&dir, &format!("user = \"{}\"", user.name), sink.addr);
    let mut server = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--config", &config.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log_path = dir.join("log/maillog");
    let listen = listening_in(&log_path, 0, "smtp").await;
    let pid = server.id();
    let uid = user.uid;
    let uids = ids(pid, "Uid:");
    let groups = ids(pid, "Groups:");
    let mut c = Client::ready(listen).await;
    let r = c
        .message("a@b.test", &["x@c.test"], &body("privilege"))
        .await;
    let delivered = wait_until(15, || sink.count() == 1).await;
    let socket = mode_and_owner(&dir.join("var/admin.sock"));
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let _ = server.wait();
    assert!(r.starts_with("250"), "{r}");
    assert!(delivered);
    assert_eq!(
        uids,
        format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}"),
        "no root uid left"
    );
    assert!(
        !groups.split_whitespace().skip(1).any(|g| g == "0"),
        "{groups}"
    );
    let var = dir.join("var");
    assert_eq!(mode_and_owner(&var.join("spool")), (0o700, uid));
    for entry in std::fs::read_dir(var.join("spool")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            assert_eq!(mode_and_owner(&path), (0o600, uid), "{}", path.display());
        }
    }
    assert_eq!(socket, (0o660, uid));
    assert_eq!(mode_and_owner(&log_path), (0o640, uid));
    assert!(
        logged_in(&log_path).iter().any(|l| matches!(
            &l.event,
            Event::RunningAs { user: u, uid: id } if *u == user.name && *id == uid
        )),
        "{:?}",
        logged_in(&log_path)
    );

    // Something in data_dir that is not the account's (planted, or left
    // by a root run): refused, root changes no owner in there.
    let planted = var.join("spool/planted");
    std::fs::write(&planted, "root's").unwrap();
    let err = refused_start(&config);
    assert!(
        err.contains("spool/planted is not") && err.contains("chown -R"),
        "{err}"
    );
    assert_eq!(mode_and_owner(&planted).1, 0, "root changed no owner");

    // Root as the account: refused unless said explicitly.
    let config = write_config(&dir, "user = \"root\"", sink.addr);
    let err = refused_start(&config);
    assert!(err.contains("is root (uid 0)"), "{err}");
}

/// A DKIM key only root can read (mode 0600, root's), with `user` set:
/// `check-config` and `serve` (started as root) both stop, naming the key
/// and the account, before the daemon binds or says it listens (before:
/// "listening", then `Permission denied` after dropping root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_account_cannot_read_stops_the_start() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test starts the daemon as root, as CI does: run the suite as root");
    }
    let user = TestUser::create("k");
    let dir = temp_dir("privilege-key");
    std::fs::set_permissions(&*dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let key = dir.join("dkim.pem");
    sluice::tools::keygen::keygen(
        sluice::tools::keygen::Algorithm::Ed25519,
        "ours.test",
        "s1",
        &key,
    )
    .unwrap();
    let sink = recording_sink().await;
    let extra = format!(
        "user = \"{}\"\n[[dkim.keys]]\ndomain = \"ours.test\"\nselector = \"s1\"\nkey_file = \"{}\"\n",
        user.name,
        key.display()
    );
    let config = write_config(&dir, &extra, sink.addr);
    let conf = config.display().to_string();
    let check = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check-config", "--config", &conf])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(!check.status.success(), "check-config passed: {said}");
    assert!(
        said.contains("DKIM key") && said.contains(&user.name) && said.contains("mode 0600"),
        "{said}"
    );
    let err = refused_start(&config);
    assert!(
        err.contains("DKIM key") && !err.contains("listening"),
        "{err}"
    );
    assert!(
        !logged_in(&dir.join("log/maillog"))
            .iter()
            .any(|l| matches!(l.event, Event::Listening { .. })),
        "it said it listens"
    );
    // Given to the account's group, it starts.
    let _ = Command::new("chgrp")
        .arg(user.name.as_str())
        .arg(&key)
        .status();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check-config", "--config", &conf])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
}
