//! Every configured limit answers with its RFC reply and loses nothing.
//!
//! The replies to a conversation alone are checked on an in-memory
//! session ([`ScriptedSession`]); the rest, and one test per area, through
//! a real socket to a whole server. Command replies: on the socket,
//! `too_many_errors_disconnects`; in memory,
//! `command_errors_have_defined_replies`.

use crate::common;

use common::scripted::ScriptedSession;
use common::*;

#[tokio::test]
async fn command_errors_have_defined_replies() {
    let dir = temp_dir("limits-commands");
    let (mut c, _) = ScriptedSession::connect(config(&dir, None)).await;
    // MAIL before EHLO.
    c.expect("MAIL FROM:<a@b.test>", "503 5.5.1").await;
    c.expect("EHLO x.test", "250").await;
    // RCPT before MAIL.
    c.expect("RCPT TO:<a@b.test>", "503 5.5.1").await;
    // DATA before MAIL.
    c.expect("DATA", "503 5.5.1").await;
    c.expect("FROB", "500 5.5.1").await;
    c.expect("MAIL FROM:a@b.test", "501").await;
    c.expect("MAIL FROM:<a@b.test>", "250").await;
    // Nested MAIL.
    c.expect("MAIL FROM:<a@b.test>", "503 5.5.1").await;
    c.expect("RCPT TO:<>", "501 5.1.3").await;
    c.expect("RCPT TO:<nodomain>", "501 5.1.3").await;
    // No valid recipients.
    c.expect("DATA", "554 5.5.1").await;
    c.expect("VRFY someone", "252 2.0.0").await;
    c.expect("HELP", "214 2.0.0").await;
    c.expect("EXPN list", "502 5.5.1").await;
    // Not inside a transaction.
    c.expect("STARTTLS", "503 5.5.1").await;
    c.expect("RSET", "250 2.0.0").await;
    c.expect("NOOP", "250 2.0.0").await;
    // NUL, bare LF, over-long line.
    c.send(b"NO\0OP\r\n").await;
    assert!(c.reply().await.starts_with("501 5.5.2"));
    c.send(b"NOOP\n").await;
    assert!(c.reply().await.starts_with("500 5.5.2"));
    c.send(format!("NOOP {}\r\n", "x".repeat(600)).as_bytes())
        .await;
    assert!(c
        .reply()
        .await
        .starts_with("500 5.5.2 Error: command line too long"));
    // Still in sync after the long line.
    c.expect("NOOP", "250").await;
    c.expect("QUIT", "221 2.0.0").await;
    c.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_recipient_and_line_limits() {
    let dir = temp_dir("limits-size");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.message_size_limit = 10_000;
    cfg.smtpd.max_recipients = 3;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c
        .cmd("MAIL FROM:<a@b.test> SIZE=20000")
        .await
        .starts_with("552 5.3.4"));
    // Too big on the wire.
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@dest.test>").await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    let big = format!(
        "Subject: big\r\n\r\n{}",
        "0123456789012345678901234567890123456789\r\n".repeat(400)
    );
    c.send(big.as_bytes()).await;
    c.send(b".\r\n").await;
    assert!(c.reply().await.starts_with("552 5.3.4"));
    // Recipients.
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    for i in 0..3 {
        assert!(c
            .cmd(&format!("RCPT TO:<r{i}@dest.test>"))
            .await
            .starts_with("250"));
    }
    assert!(c
        .cmd("RCPT TO:<r4@dest.test>")
        .await
        .starts_with("452 4.5.3"));
    assert!(c.cmd("RSET").await.starts_with("250"));
    // Text line over 1000 octets.
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@dest.test>").await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send(format!("Subject: long\r\n\r\n{}\r\n.\r\n", "y".repeat(1200)).as_bytes())
        .await;
    assert!(c.reply().await.starts_with("554 5.6.0"));
    // A message at the limits still goes through.
    let ok = c
        .message(
            "a@b.test",
            &["x@dest.test"],
            &format!("Subject: ok\r\n\r\n{}\r\n", "z".repeat(998)),
        )
        .await;
    assert!(ok.starts_with("250 2.0.0"), "{ok}");
    assert!(wait_until(10, || sink.count() == 1).await);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_errors_disconnects() {
    let dir = temp_dir("limits-errors");
    let mut cfg = config(&dir, None);
    cfg.smtpd.max_errors = 3;
    let (server, addr) = start(cfg).await;
    let (mut c, _) = Client::connect(addr).await;
    assert!(c.cmd("BAD1").await.starts_with("500"));
    assert!(c.cmd("BAD2").await.starts_with("500"));
    let r = c.cmd("BAD3").await;
    assert!(r.starts_with("500"), "{r}");
    let r = if r.contains("421") {
        r
    } else {
        c.reply().await
    };
    assert!(r.contains("421 4.7.0"), "{r}");
    assert_eq!(c.reply().await, "", "connection closed");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_gives_421() {
    let dir = temp_dir("limits-idle");
    let mut cfg = config(&dir, None);
    cfg.smtpd.idle_timeout_secs = 1;
    let (server, addr) = start(cfg).await;
    let (mut c, _) = Client::connect(addr).await;
    let r = c.reply().await;
    assert!(r.starts_with("421 4.4.2"), "{r}");
    // Also inside DATA.
    let mut cfg2 = config(&temp_dir("limits-idle2"), None);
    cfg2.smtpd.data_timeout_secs = 1;
    cfg2.delivery.relayhost = Some(NextHop::Discard);
    let (server2, addr2) = start(cfg2).await;
    let mut c = Client::ready(addr2).await;
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@dest.test>").await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send(b"Subject: stalled\r\n").await;
    assert!(c.reply().await.starts_with("421 4.4.2"));
    server.shutdown().await;
    server2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_limit_gives_421_and_frees_up() {
    let dir = temp_dir("limits-sessions");
    let mut cfg = config(&dir, None);
    cfg.smtpd.max_sessions = 2;
    let (server, addr) = start(cfg).await;
    let (mut a, ga) = Client::connect(addr).await;
    let (_b, gb) = Client::connect(addr).await;
    assert!(ga.starts_with("220") && gb.starts_with("220"));
    let (_c, gc) = Client::connect(addr).await;
    assert!(gc.starts_with("421 4.3.2"), "{gc}");
    assert!(a.cmd("QUIT").await.starts_with("221"));
    drop(a);
    let mut ok = false;
    for _ in 0..50 {
        let (_d, gd) = Client::connect(addr).await;
        if gd.starts_with("220") {
            ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(ok, "a new session is accepted after one ended");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_is_denied_outside_mynetworks() {
    let dir = temp_dir("limits-relay");
    let mut cfg = config(&dir, None);
    // The test client (127.0.0.1) is outside these networks.
    cfg.smtpd.mynetworks = vec![net("127.0.0.2/32")];
    cfg.smtpd.relay_domains = vec!["ours.test".parse().unwrap()];
    cfg.transport.insert("ours.test".into(), NextHop::Discard);
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<victim@elsewhere.test>").await;
    assert!(
        r.starts_with("554 5.7.1 <victim@elsewhere.test>: Relay access denied"),
        "{r}"
    );
    assert!(c.cmd("RCPT TO:<user@ours.test>").await.starts_with("250"));
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Reject(Reject::Relay { stage, cause, to, .. })
            if stage == "rcpt" && cause == "relay_denied" && to == "victim@elsewhere.test"
    )));

    // From a second loopback address that is in mynetworks, relaying works.
    let dir = temp_dir("limits-relay2");
    let mut cfg = config(&dir, None);
    cfg.smtpd.mynetworks = vec![net("127.0.0.2/32")];
    cfg.transport.insert("*".into(), NextHop::Discard);
    let (server, addr) = start(cfg).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"EHLO t\r\nMAIL FROM:<a@b.test>\r\nRCPT TO:<victim@elsewhere.test>\r\nQUIT\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    stream.read_to_end(&mut all).await.unwrap();
    let text = String::from_utf8_lossy(&all);
    assert!(text.contains("250 2.1.5"), "{text}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_loop_is_refused_by_hop_count() {
    let dir = temp_dir("limits-hops");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.hop_count_limit = 5;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let hops = "Received: from a by b; Sun, 22 Nov 2026 05:00:00 +0000\r\n".repeat(5);
    // Ours makes six: one too many.
    let r = c
        .message(
            "a@b.test",
            &["x@dest.test"],
            &format!("{hops}Subject: loop\r\n\r\nx\r\n"),
        )
        .await;
    assert!(r.starts_with("554 5.4.6"), "{r}");
    // Four plus ours is within the limit; "Received:" in the body does not count.
    let hops = "Received: from a by b; Sun, 22 Nov 2026 05:00:00 +0000\r\n".repeat(4);
    let body = format!(
        "{hops}Subject: ok\r\n\r\n{}",
        "Received: not a header\r\n".repeat(10)
    );
    let r = c.message("a@b.test", &["x@dest.test"], &body).await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    assert!(wait_until(10, || sink.count() == 1).await);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_memory_budget_gives_452_and_is_released() {
    let dir = temp_dir("limits-memory");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.message_memory_budget_kib = 128;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let line = "0123456789012345678901234567890123456789012345678901234567890123456789\r\n";
    let big = format!("Subject: big\r\n\r\n{}", line.repeat(4000)); // ~290 KB
    let r = c.message("a@b.test", &["x@dest.test"], &big).await;
    assert!(r.starts_with("452 4.3.1"), "{r}");
    // The budget held by the refused message is back: a smaller one fits.
    let small = format!("Subject: small\r\n\r\n{}", line.repeat(600)); // ~43 KB
    for _ in 0..3 {
        let r = c.message("a@b.test", &["x@dest.test"], &small).await;
        assert!(r.starts_with("250 2.0.0"), "{r}");
    }
    assert!(wait_until(10, || sink.count() == 3).await);
    server.shutdown().await;
}
