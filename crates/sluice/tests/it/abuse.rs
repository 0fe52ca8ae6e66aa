//! Abuse limits (SMTP audit §D): clients that trickle bytes, sessions that
//! never end, and per-client session, connection, message and recipient
//! limits — each answered with its 421/450 and logged.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `prefix`, then trickles `trickle` one byte every 400 ms while a
/// reader collects everything the server says. Returns what was said and
/// how many trickled bytes were sent before the server had closed.
async fn trickle(addr: SocketAddr, prefix: &[&str], trickle: &[u8]) -> (String, usize) {
    let mut c = Client::ready(addr).await;
    for line in prefix {
        let r = c.cmd(line).await;
        assert!(!r.starts_with('4') && !r.starts_with('5'), "{line}: {r}");
    }
    let (mut rd, mut wr) = c.stream.into_split();
    let closed = Arc::new(AtomicBool::new(false));
    let seen = closed.clone();
    let reader = tokio::spawn(async move {
        let mut all = Vec::new();
        let _ = rd.read_to_end(&mut all).await;
        seen.store(true, Ordering::SeqCst);
        String::from_utf8_lossy(&all).into_owned()
    });
    let mut sent = 0;
    for b in trickle {
        if closed.load(Ordering::SeqCst) || wr.write_all(&[*b]).await.is_err() {
            break;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    drop(wr);
    (reader.await.unwrap(), sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_trickled_byte_by_byte_is_cut_off() {
    let dir = temp_dir("abuse-slow-command");
    let mut cfg = config(&dir, None);
    cfg.smtpd.idle_timeout_secs = 2;
    let (server, addr) = start(cfg).await;
    let bytes = b"NOOP xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
    let (said, sent) = trickle(addr, &[], bytes).await;
    assert!(said.contains("421 4.4.2"), "{said:?}");
    assert!(
        sent < bytes.len(),
        "cut off while still trickling ({sent} bytes)"
    );
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::SessionEnd { client_ip, cause, .. }
            if client_ip.to_string() == "127.0.0.1" && cause == "idle_timeout"
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_trickled_below_the_minimum_rate_is_cut_off() {
    let dir = temp_dir("abuse-slow-data");
    let mut cfg = config(&dir, None);
    cfg.delivery.relayhost = Some(NextHop::Discard);
    cfg.smtpd.data_timeout_secs = 2;
    cfg.smtpd.min_data_rate = 100;
    let (server, addr) = start(cfg).await;
    let prefix = ["MAIL FROM:<a@b.test>", "RCPT TO:<x@dest.test>", "DATA"];
    let bytes = [b'z'; 40];
    let (said, sent) = trickle(addr, &prefix, &bytes).await;
    assert!(said.contains("421 4.4.2"), "{said:?}");
    assert!(sent < bytes.len(), "cut off while still trickling");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_at_its_time_limit_however_busy() {
    let dir = temp_dir("abuse-lifetime");
    let mut cfg = config(&dir, None);
    cfg.smtpd.max_session_secs = 2;
    cfg.smtpd.junk_command_limit = 1000;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let mut last = String::new();
    for _ in 0..50 {
        last = c.cmd("NOOP").await;
        if !last.starts_with("250") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(last.starts_with("421 4.4.2"), "{last}");
    assert!(last.contains("session time limit"), "{last}");
    server.shutdown().await;
}

async fn connect_from(local: &str, addr: SocketAddr) -> (TcpStream, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let mut buf = vec![0u8; 512];
    let n = stream.read(&mut buf).await.unwrap();
    (stream, String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_session() {
    let dir = temp_dir("abuse-per-client");
    let mut cfg = untrusted_config(&dir, None);
    cfg.smtpd.client_connection_limit = 2;
    let (server, addr) = start(cfg).await;
    let (_a, ga) = connect_from("127.0.0.1", addr).await;
    let (_b, gb) = connect_from("127.0.0.1", addr).await;
    assert!(ga.starts_with("220") && gb.starts_with("220"), "{ga} {gb}");
    let (_c, gc) = connect_from("127.0.0.1", addr).await;
    assert!(gc.starts_with("421 4.7.0"), "{gc}");
    let (_d, gd) = connect_from("127.0.0.2", addr).await;
    assert!(gd.starts_with("220"), "another client still gets in: {gd}");
    // A trusted client is exempt.
    let (_e, ge) = connect_from("127.0.0.3", addr).await;
    let (_f, gf) = connect_from("127.0.0.3", addr).await;
    let (_g, gg) = connect_from("127.0.0.3", addr).await;
    assert!([ge, gf, gg].iter().all(|g| g.starts_with("220")));
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Reject(Reject::Connect { stage, code: 421, cause, .. })
            if stage == "connect" && cause == "sessions"
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_message_and_recipient_rates_per_client() {
    let dir = temp_dir("abuse-rates");
    let mut cfg = untrusted_config(&dir, None);
    cfg.smtpd.client_connection_rate_limit = 3;
    cfg.smtpd.client_message_rate_limit = 2;
    cfg.smtpd.client_recipient_rate_limit = 3;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    for i in 0..3 {
        let r = c.cmd(&format!("RCPT TO:<u{i}@ours.test>")).await;
        assert!(r.starts_with("250"), "{r}");
    }
    let r = c.cmd("RCPT TO:<u9@ours.test>").await;
    assert!(r.starts_with("450 4.7.1"), "{r}");
    assert!(c.cmd("RSET").await.starts_with("250"));
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(c.cmd("RSET").await.starts_with("250"));
    let r = c.cmd("MAIL FROM:<a@b.test>").await;
    assert!(r.starts_with("450 4.7.1"), "{r}");
    // Connections: this session was the first of three.
    let (_b, gb) = connect_from("127.0.0.1", addr).await;
    let (_c, gc) = connect_from("127.0.0.1", addr).await;
    assert!(gb.starts_with("220") && gc.starts_with("220"), "{gb} {gc}");
    let (_d, gd) = connect_from("127.0.0.1", addr).await;
    assert!(gd.starts_with("421 4.7.0"), "{gd}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_loses_its_session() {
    let dir = temp_dir("abuse-no-read");
    let mut cfg = config(&dir, None);
    cfg.smtpd.max_sessions = 1;
    cfg.smtpd.idle_timeout_secs = 2;
    cfg.smtpd.junk_command_limit = 1_000_000;
    cfg.smtpd.max_errors = 1_000_000;
    let (server, addr) = start(cfg).await;
    // A tiny receive window, then far more replies than fit: HELP × 50,000.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(1024).unwrap();
    let mut hog = socket.connect(addr).await.unwrap();
    let writer = tokio::spawn(async move {
        let _ = hog.write_all(b"EHLO hog.test\r\n").await;
        let _ = hog.write_all(&b"HELP\r\n".repeat(50_000)).await;
        hog // never read from
    });
    // The only session slot comes back once the write deadline passes.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut greeting = String::new();
    while std::time::Instant::now() < deadline {
        let (_c, g) = Client::connect(addr).await;
        greeting = g;
        if greeting.starts_with("220") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(greeting.starts_with("220"), "{greeting}");
    drop(writer);
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::SessionEnd { cause, .. } if cause == "write_timeout"
    )));
}
