//! One intake for every door (`intake/`): the same message sent by SMTP
//! (from a mynetworks client) and by sendmail(1) is treated alike — signed
//! alike, loop-checked alike (a message that already passed through us is
//! not signed; 101 `Received:` fields are refused), and a 2,000-byte line
//! refused alike. Before there was one intake, sendmail's mail was not
//! signed and skipped the hop and line checks.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use sluice::tools::keygen::{keygen, Algorithm};

/// `sendmail -C conf -f a@ours.test x@ours.test` with `message` on stdin:
/// (exit status, stderr).
async fn sendmail(bin: PathBuf, conf: PathBuf, message: String) -> (i32, String) {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(bin);
        cmd.args(["-C", &conf.display().to_string(), "-i", "-f", "a@ours.test"])
            .arg("x@ours.test");
        let (status, _, err) = output_of(cmd, message.as_bytes());
        (status, err)
    })
    .await
    .unwrap()
}

fn message(subject: &str, extra_headers: &str, body: &str) -> String {
    format!(
        "{extra_headers}From: <a@ours.test>\r\nTo: <x@ours.test>\r\nSubject: {subject}\r\nDate: Sun, 22 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{subject}@ours.test>\r\n\r\n{body}"
    )
}

fn signatures(sink: &sluice_bench::sink::Sink, subject: &str) -> Vec<usize> {
    sink.messages()
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .filter(|t| t.contains(&format!("Subject: {subject}\r\n")))
        .map(|t| t.matches("DKIM-Signature:").count())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_and_sendmail_mail_go_through_the_same_intake() {
    let dir = temp_dir("intake");
    let key = dir.join("ed.pem");
    keygen(Algorithm::Ed25519, "ours.test", "s1", &key).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.dkim.keys.push(dkim_key("ours.test", "s1", key));
    let conf = client_config(&dir, &dir.join("var"));
    let bin = dir.join("sendmail");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &bin).unwrap();
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let smtp = |subject: &str| format!("smtp-{subject}");
    let local = |subject: &str| format!("local-{subject}");

    // Signed alike.
    let r = c
        .message(
            "a@ours.test",
            &["x@ours.test"],
            &message(&smtp("plain"), "", "hi\r\n"),
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    let (code, err) = sendmail(
        bin.clone(),
        conf.clone(),
        message(&local("plain"), "", "hi\r\n"),
    )
    .await;
    assert_eq!(code, 0, "{err}");

    // A message that already passed through us: taken, not signed, alike.
    let ours = "Received: from a ([192.0.2.1])\r\n\tby mx.test (Sluice) with ESMTP id 1;\r\n\tSun, 22 Nov 2026 09:00:00 +0000\r\n";
    let r = c
        .message(
            "a@ours.test",
            &["x@ours.test"],
            &message(&smtp("looped"), ours, "hi\r\n"),
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    let (code, err) = sendmail(
        bin.clone(),
        conf.clone(),
        message(&local("looped"), ours, "hi\r\n"),
    )
    .await;
    assert_eq!(code, 0, "{err}");

    // A 2,000-byte line: refused alike.
    let long = format!("{}\r\n", "x".repeat(2000));
    let r = c
        .message(
            "a@ours.test",
            &["x@ours.test"],
            &message(&smtp("long"), "", &long),
        )
        .await;
    assert!(r.starts_with("554 5.6.0"), "{r}");
    let (code, err) = sendmail(
        bin.clone(),
        conf.clone(),
        message(&local("long"), "", &long),
    )
    .await;
    assert_eq!(code, 65, "EX_DATAERR: {err}");
    assert!(err.contains("longer than 1000 octets"), "{err}");

    // 101 Received: fields: refused alike (a loop).
    let hops = "Received: from x by y.test; Sun, 22 Nov 2026 09:00:00 +0000\r\n".repeat(101);
    let r = c
        .message(
            "a@ours.test",
            &["x@ours.test"],
            &message(&smtp("hops"), &hops, "hi\r\n"),
        )
        .await;
    assert!(r.starts_with("554 5.4.6"), "{r}");
    let (code, err) = sendmail(
        bin.clone(),
        conf.clone(),
        message(&local("hops"), &hops, "hi\r\n"),
    )
    .await;
    assert_eq!(code, 65, "EX_DATAERR: {err}");
    assert!(err.contains("too many hops"), "{err}");

    assert!(
        wait_until(15, || sink.count() == 4).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    for door in ["smtp", "local"] {
        assert_eq!(
            signatures(&sink, &format!("{door}-plain")),
            vec![1],
            "{door}"
        );
        assert_eq!(
            signatures(&sink, &format!("{door}-looped")),
            vec![0],
            "{door}"
        );
        for refused in ["long", "hops"] {
            assert!(signatures(&sink, &format!("{door}-{refused}")).is_empty());
        }
    }
}
