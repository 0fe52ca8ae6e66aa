//! The spool on a small file system (a 40 MB tmpfs mounted in a mount
//! namespace of the daemon's own, by util-linux `unshare`): the default
//! segment size and reserve fit it, so mail is taken; sizes set too large
//! for it are named by `check-config` and `serve` instead of a silent
//! `452` to every message.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;

fn write_config(dir: &Path, listen: std::net::SocketAddr, spool: &str) -> std::path::PathBuf {
    let path = dir.join("sluice.toml");
    let text = format!(
        "hostname = \"mx.test\"\nrun_as_root = true\ndata_dir = \"{}\"\nlog_file = \"{}\"\n[smtpd]\nlisten = [\"{listen}\"]\n\
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
    let listen = free_addr();
    let config = write_config(&dir, listen, "");
    let mut server = on_small_fs(&dir, &format!("serve --config {}", config.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listening = format!("listening on {listen}");
    let up = wait_until(20, || read_log(&dir).contains(&listening)).await;
    assert!(up, "did not start: {}", read_log(&dir));
    let mut c = Client::ready(listen).await;
    let r = c
        .message("a@sender.test", &["b@dest.test"], &body("small"))
        .await;
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let _ = server.wait();
    let log = read_log(&dir);
    assert!(r.starts_with("250"), "{r}\n{log}");
    assert!(log.contains("segments of 2 MiB, 4 MiB kept free"), "{log}");
    assert!(!log.contains("warning: spool"), "{log}");
}

#[test]
fn sizes_too_large_for_the_file_system_are_named() {
    let dir = temp_dir("small-fs-check");
    let config = write_config(&dir, free_addr(), "segment_mib = 64");
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
