//! Outbound TLS through real sockets: opportunistic STARTTLS to another
//! Sluice, `encrypt` to a hop without STARTTLS, `verify` against the right
//! and the wrong CA, and the plain-text fallback after a failed handshake
//! under `may`.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;

use common::*;
use sluice::config::delivery::Level;
use sluice::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn hop(addr: SocketAddr) -> String {
    format!("smtp:[{}]:{}", addr.ip(), addr.port())
}

/// A certificate for `mx.test` and 127.0.0.1 in `dir`: (cert, key).
fn certificate(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let made =
        rcgen::generate_simple_self_signed(vec!["mx.test".into(), "127.0.0.1".into()]).unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

/// A second Sluice (the next hop) relaying to `sink`, with `cert`.
async fn next_hop(
    dir: &Path,
    sink: SocketAddr,
    cert: Option<(&Path, &Path)>,
) -> (sluice::daemon::Server, SocketAddr) {
    let mut cfg = config(&dir.join("hop"), Some(sink));
    cfg.log_file = Some(dir.join("hop.log"));
    if let Some((c, k)) = cert {
        cfg.tls.cert_file = Some(c.to_path_buf());
        cfg.tls.key_file = Some(k.to_path_buf());
    }
    start(cfg).await
}

async fn send_one(addr: SocketAddr, subject: &str) {
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@b.test", &["x@dest.test"], &body(subject))
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_to_a_hop_that_offers_starttls_is_encrypted() {
    let dir = temp_dir("otls-may");
    let sink = recording_sink().await;
    let (hop_server, hop_addr) = next_hop(&dir, sink.addr, None).await;
    let (server, addr) = start(config(&dir, Some(hop_addr))).await;
    send_one(addr, "may").await;
    assert!(wait_until(15, || sink.count() == 1).await);
    let got = String::from_utf8_lossy(&sink.messages()[0].body).into_owned();
    assert!(
        got.contains("with ESMTPS id") && got.contains("(using TLSv1.3"),
        "{got}"
    );
    server.shutdown().await;
    hop_server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::TlsOut { verified: false, relay, .. } if relay.starts_with("127.0.0.1")
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypt_defers_rather_than_send_in_clear() {
    let dir = temp_dir("otls-encrypt");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.delivery
        .tls_policy
        .insert(hop(sink.addr), Level::Encrypt);
    let (server, addr) = start(cfg).await;
    send_one(addr, "encrypt").await;
    assert!(wait_logged(10, &dir, |e| is_delivery(e, "", "deferred", "4.7.4", "")).await);
    server.shutdown().await;
    assert_eq!(sink.count(), 0, "nothing went out in clear");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_checks_the_certificate_against_the_ca() {
    let dir = temp_dir("otls-verify");
    let sink = recording_sink().await;
    let (cert, key) = certificate(&dir, "hop");
    let (other, _) = certificate(&dir, "other");
    let (hop_server, hop_addr) = next_hop(&dir, sink.addr, Some((&cert, &key))).await;
    // The wrong CA: deferred, not sent.
    let wrong = dir.join("wrong");
    let mut cfg: Config = config(&wrong, Some(hop_addr));
    cfg.delivery.tls_security_level = Level::Verify;
    cfg.delivery.tls_ca_file = Some(other);
    let (server, addr) = start(cfg).await;
    send_one(addr, "wrong-ca").await;
    assert!(
        wait_logged(10, &wrong, |e| is_delivery(e, "", "deferred", "4.7.5", "")).await,
        "{}",
        read_log(&wrong)
    );
    server.shutdown().await;
    assert_eq!(sink.count(), 0);
    // The right CA: delivered, and logged as verified.
    let right = dir.join("right");
    let mut cfg: Config = config(&right, Some(hop_addr));
    cfg.delivery.tls_security_level = Level::Verify;
    cfg.delivery.tls_ca_file = Some(cert.clone());
    let (server, addr) = start(cfg).await;
    send_one(addr, "right-ca").await;
    assert!(wait_until(15, || sink.count() >= 1).await);
    server.shutdown().await;
    hop_server.shutdown().await;
    assert!(any_logged(&right, |e| matches!(
        e,
        Event::TlsOut { verified: true, .. }
    )));
}

/// Offers STARTTLS, then breaks the handshake, on the first connection;
/// later connections are passed to `sink` untouched.
async fn broken_starttls_then(sink: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut first, _) = listener.accept().await.unwrap();
        first.write_all(b"220 broken.test ESMTP\r\n").await.unwrap();
        let mut buf = [0u8; 512];
        let _ = first.read(&mut buf).await; // EHLO
        first
            .write_all(b"250-broken.test\r\n250 STARTTLS\r\n")
            .await
            .unwrap();
        let _ = first.read(&mut buf).await; // STARTTLS
        first
            .write_all(b"220 go ahead\r\nthis is not TLS\r\n")
            .await
            .unwrap();
        drop(first);
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut up = TcpStream::connect(sink).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn may_falls_back_to_plain_text_when_the_handshake_fails() {
    let dir = temp_dir("otls-fallback");
    let sink = recording_sink().await;
    let broken = broken_starttls_then(sink.addr).await;
    let (server, addr) = start(config(&dir, Some(broken))).await;
    send_one(addr, "fallback").await;
    assert!(wait_until(15, || sink.count() == 1).await);
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(e, Event::TlsFallback { .. })));
}
