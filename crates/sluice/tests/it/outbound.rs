//! Outbound delivery against next hops that misbehave in precise ways:
//! results already known are kept when the session breaks afterwards, a
//! big body to a slow reader is not cut off, and the reply to the final
//! dot gets its own, longer wait.

use crate::common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How the fake next hop behaves.
#[derive(Clone, Copy, Default)]
struct Hop {
    /// Refuse every RCPT with 550, then drop the connection at RSET.
    refuse_then_drop: bool,
    /// Read the body at most this many bytes per 50 ms (0: as fast as it comes).
    slow_read: usize,
    /// Wait this long before answering the final dot.
    dot_delay: Duration,
    /// Close the connection instead of answering DATA.
    drop_at_data: bool,
    /// Answer DATA with 250 (a broken peer), then close after the body.
    ok_at_data: bool,
    /// Offer no extensions (no PIPELINING): a client that sends a command
    /// before the previous reply gets `554` for everything after it.
    lockstep: bool,
}

async fn fake_hop(hop: Hop) -> std::net::SocketAddr {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(256 << 10).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(serve(s, hop));
        }
    });
    addr
}

async fn serve(mut s: TcpStream, hop: Hop) {
    let _ = s.write_all(b"220 hop.test ESMTP\r\n").await;
    let mut buf = Vec::new();
    let mut in_data = false;
    let mut out_of_turn = false;
    loop {
        let mut chunk = vec![
            0u8;
            if hop.slow_read > 0 {
                hop.slow_read
            } else {
                65536
            }
        ];
        if in_data && hop.slow_read > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let n = s.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        loop {
            let pat: &[u8] = if in_data { b"\r\n.\r\n" } else { b"\r\n" };
            let Some(end) = buf.windows(pat.len()).position(|w| w == pat) else {
                break;
            };
            let line: Vec<u8> = buf.drain(..end + pat.len()).collect();
            if hop.lockstep && !in_data && buf.windows(2).any(|w| w == b"\r\n") {
                out_of_turn = true;
            }
            let reply: &[u8] = if out_of_turn {
                b"554 5.5.0 command sent before the reply to the last one\r\n"
            } else if in_data {
                in_data = false;
                tokio::time::sleep(hop.dot_delay).await;
                b"250 2.0.0 taken\r\n"
            } else if line.starts_with(b"EHLO") && hop.lockstep {
                b"250 hop.test\r\n"
            } else if line.starts_with(b"EHLO") {
                b"250-hop.test\r\n250 PIPELINING\r\n"
            } else if line.starts_with(b"RCPT TO:<gone@")
                || (line.starts_with(b"RCPT") && hop.refuse_then_drop)
            {
                b"550 5.1.1 no such user here\r\n"
            } else if (line.starts_with(b"RSET") && hop.refuse_then_drop)
                || (line.starts_with(b"DATA") && hop.drop_at_data)
            {
                return;
            } else if line.starts_with(b"DATA") && hop.ok_at_data {
                b"250 2.0.0 Ok\r\n"
            } else if line.starts_with(b"DATA") {
                if hop.refuse_then_drop {
                    b"554 5.5.1 no valid recipients\r\n"
                } else {
                    in_data = true;
                    b"354 go\r\n"
                }
            } else if line.starts_with(b"QUIT") {
                let _ = s.write_all(b"221 bye\r\n").await;
                return;
            } else {
                b"250 ok\r\n"
            };
            if s.write_all(reply).await.is_err() {
                return;
            }
        }
    }
}

/// A server that routes dest.test to `hop` and sender.test (where bounces
/// go) to a recording sink; and a client ready to send.
async fn relay_to(
    dir: &std::path::Path,
    hop: std::net::SocketAddr,
) -> (sluice::daemon::Server, sluice_bench::sink::Sink, Client) {
    let sink = recording_sink().await;
    let mut cfg = config(dir, None);
    for (domain, port) in [("dest.test", hop.port()), ("sender.test", sink.addr.port())] {
        cfg.transport.insert(
            domain.into(),
            format!("smtp:[127.0.0.1]:{port}").parse().unwrap(),
        );
    }
    let (server, addr) = start(cfg).await;
    let c = Client::ready(addr).await;
    (server, sink, c)
}

/// Sends one message from a@sender.test through `hop`, waits for the one
/// bounce it must cause, stops the server (flushing the mail log); returns
/// the queue ID, its delivery events and what reached the bounce sink.
async fn send_until_bounced(
    dir: &std::path::Path,
    hop: std::net::SocketAddr,
    rcpts: &[&str],
    subject: &str,
) -> (
    String,
    Vec<Event<'static>>,
    Vec<sluice_bench::sink::ReceivedMessage>,
) {
    let (server, sink, mut c) = relay_to(dir, hop).await;
    let r = c.message("a@sender.test", rcpts, &body(subject)).await;
    let qid = qid_of(&r);
    assert!(
        wait_until(10, || sink.count() == 1).await,
        "{}",
        read_log(dir)
    );
    server.shutdown().await;
    (qid.clone(), delivery_events(dir, &qid), sink.messages())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_stands_when_the_rset_after_it_fails() {
    let dir = temp_dir("out-rset");
    let hop = fake_hop(Hop {
        refuse_then_drop: true,
        ..Default::default()
    })
    .await;
    let (qid, log, bounces) = send_until_bounced(&dir, hop, &["gone@dest.test"], "gone").await;
    let relay = format!("127.0.0.1[127.0.0.1]:{}", hop.port());
    assert!(
        log.iter().any(|e| is_delivery(
            e,
            "gone@dest.test",
            "bounced",
            "5.1.1",
            "550 5.1.1 no such user here"
        ) && matches!(
            e,
            Event::Delivery { queue_id, relay: r, .. } if *queue_id == qid.as_str() && *r == relay
        )),
        "{log:?}"
    );
    assert!(String::from_utf8_lossy(&bounces[0].body).contains("Status: 5.1.1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_body_to_a_slow_reader_is_not_cut_off() {
    let dir = temp_dir("out-slow-body");
    // Read through a 256 KiB window every 50 ms: a 20 MB body takes about
    // five seconds in all, while the sender's socket becomes writable again
    // (half its buffer free) every fraction of a second.
    let hop = fake_hop(Hop {
        slow_read: 1 << 20,
        ..Default::default()
    })
    .await;
    let mut cfg = config(&dir, Some(hop));
    cfg.delivery.command_timeout_secs = 3;
    cfg.smtpd.message_size_limit = 25 << 20;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let line = format!("{}\r\n", "z".repeat(78));
    let big = format!("Subject: big\r\n\r\n{}", line.repeat(20_000_000 / 80));
    let r = c.message("a@sender.test", &["x@dest.test"], &big).await;
    let qid = qid_of(&r);
    assert!(
        wait_until(30, || removed(&dir, &qid)).await,
        "{}",
        read_log(&dir)
    );
    assert!(delivered_as(
        &dir,
        &qid,
        "x@dest.test",
        "sent",
        "250 2.0.0 taken"
    ));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_dot_gets_its_own_longer_wait() {
    let dir = temp_dir("out-dot-wait");
    let hop = fake_hop(Hop {
        dot_delay: Duration::from_secs(2),
        ..Default::default()
    })
    .await;
    let mut cfg = config(&dir, Some(hop));
    cfg.delivery.command_timeout_secs = 1;
    cfg.delivery.data_done_timeout_secs = 6;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["x@dest.test"], &body("dot"))
        .await;
    let qid = qid_of(&r);
    assert!(
        wait_until(20, || removed(&dir, &qid)).await,
        "{}",
        read_log(&dir)
    );
    let log = delivery_events(&dir, &qid);
    assert!(
        delivered_as(&dir, &qid, "x@dest.test", "sent", "250 2.0.0 taken"),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|e| is_delivery(e, "", "deferred", "", "")),
        "{log:?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_pipelining_is_spoken_to_in_lock_step() {
    let dir = temp_dir("out-lockstep");
    let hop = fake_hop(Hop {
        lockstep: true,
        ..Default::default()
    })
    .await;
    let (_, log, _) =
        send_until_bounced(&dir, hop, &["ok@dest.test", "gone@dest.test"], "lockstep").await;
    let was = |to: &str, status: &str, reply: &str| {
        log.iter().any(|e| is_delivery(e, to, status, "", reply))
    };
    assert!(was("ok@dest.test", "sent", "250 2.0.0 taken"), "{log:?}");
    assert!(
        was("gone@dest.test", "bounced", "550 5.1.1 no such user here"),
        "{log:?}"
    );
    // Lock step: nothing was sent before its reply, so nothing deferred.
    assert!(
        !log.iter().any(|e| is_delivery(e, "", "deferred", "", "")),
        "{log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_stands_when_the_connection_dies_at_data() {
    let dir = temp_dir("out-drop-data");
    let hop = fake_hop(Hop {
        drop_at_data: true,
        ..Default::default()
    })
    .await;
    // The refused recipient bounces at once; the other waits for a retry.
    let (qid, log, _) =
        send_until_bounced(&dir, hop, &["ok@dest.test", "gone@dest.test"], "cut").await;
    let was = |to: &str, status: &str, dsn: &str| {
        log.iter().any(|e| {
            is_delivery(e, to, status, dsn, "")
                && matches!(e, Event::Delivery { queue_id, .. } if *queue_id == qid.as_str())
        })
    };
    assert!(was("gone@dest.test", "bounced", "5.1.1"), "{log:?}");
    assert!(was("ok@dest.test", "deferred", "4.4.2"), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_reply_to_data_is_not_a_delivery() {
    let dir = temp_dir("out-250-data");
    let hop = fake_hop(Hop {
        ok_at_data: true,
        ..Default::default()
    })
    .await;
    let mut cfg = config(&dir, Some(hop));
    cfg.queue.minimal_backoff_secs = 60;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["x@dest.test"], &body("odd"))
        .await;
    let qid = qid_of(&r);
    let deferred = |e: &Event| {
        is_delivery(e, "x@dest.test", "deferred", "4.5.0", "")
            && matches!(e, Event::Delivery { queue_id, .. } if *queue_id == qid.as_str())
    };
    assert!(wait_logged(10, &dir, deferred).await, "{}", read_log(&dir));
    server.shutdown().await;
    let log = delivery_events(&dir, &qid);
    assert!(
        !log.iter().any(|e| is_delivery(e, "", "sent", "", "")),
        "never recorded as delivered: {log:?}"
    );
    assert!(!removed(&dir, &qid), "{log:?}");
}
