//! The spool on a small file system (a 40 MB tmpfs mounted in a mount
//! namespace of the daemon's own, by util-linux `unshare`): the default
//! segment size and reserve fit it, so mail is taken; sizes set too large
//! for it are named by `check-config` and `serve` instead of a silent
//! `452` to every message.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;

/// Port 0 (the `listening` event says where), events as JSON.
fn write_config(dir: &Path, spool: &str) -> std::path::PathBuf {
    let path = dir.join("sluice.toml");
    let text = format!(
        "hostname = \"mx.test\"\nrun_as_root = true\ndata_dir = \"{}\"\nlog_file = \"{}\"\n\
         log_format = \"json\"\n[smtpd]\nlisten = [\"127.0.0.1:0\"]\n\
         [delivery]\nrelayhost = \"discard\"\n[spool]\n{spool}\n",
        dir.join("var").display(),
        dir.join("maillog").display(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `sluice <args>` in a mount namespace where `dir/var` is a 40 MB tmpfs.
fn on_small_fs(dir: &Path, args: &str) -> Command {
    std::fs::create_dir_all(dir.join("var")).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--map-root-user",
        "--propagation",
        "private",
        "sh",
        "-c",
    ])
    .arg(format!(
        "mount -t tmpfs -o size=40m tmpfs \"$0\" && exec \"$1\" {args}"
    ))
    .arg(dir.join("var"))
    .arg(env!("CARGO_BIN_EXE_sluice"));
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_40_mb_file_system_takes_mail_with_the_default_sizes() {
    let dir = temp_dir("small-fs");
    let config = write_config(&dir, "");
    let mut server = on_small_fs(&dir, &format!("serve --config {}", config.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listen = listening_on(&dir, 0, "smtp").await;
    let mut c = Client::ready(listen).await;
    let r = c
        .message("a@sender.test", &["b@dest.test"], &body("small"))
        .await;
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let _ = server.wait();
    let log = read_log(&dir);
    assert!(r.starts_with("250"), "{r}\n{log}");
    let started = logged_events(&dir)
        .into_iter()
        .find(|e| matches!(e, Event::Started { .. }));
    assert!(
        matches!(
            started,
            Some(Event::Started {
                segment_mib: 2,
                reserve_mib: 4,
                ..
            })
        ),
        "{log}"
    );
    assert!(
        !any_logged(
            &dir,
            |e| matches!(e, Event::Warning { kind, .. } if kind == "spool_space")
        ),
        "{log}"
    );
}

#[test]
fn sizes_too_large_for_the_file_system_are_named() {
    let dir = temp_dir("small-fs-check");
    let config = write_config(&dir, "segment_mib = 64");
    let out: Output = on_small_fs(&dir, &format!("check-config --config {}", config.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stderr.contains("new mail gets 452 4.3.1 until 192 MiB are free"),
        "{stderr}"
    );
}
