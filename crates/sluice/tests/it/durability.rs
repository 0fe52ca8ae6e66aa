//! What a `250` promises: the message is kept whole, a clean stop records
//! what was delivered, and nothing is accepted that cannot be kept.

use crate::common;

use std::sync::Arc;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Notify};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bdat_over_the_memory_budget_is_refused_not_queued_empty() {
    let dir = temp_dir("dura-bdat-budget");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    // 256 KiB: the first chunk fits (with the buffer's spare capacity,
    // which counts), the second does not.
    cfg.smtpd.message_memory_budget_kib = 256;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@dest.test>").await.starts_with("250"));
    let chunk = vec![b'x'; 100_000];
    c.send(b"BDAT 100000\r\n").await;
    c.send(&chunk).await;
    let r = c.reply().await;
    assert!(r.starts_with("250"), "{r}");
    let chunk = vec![b'x'; 200_000];
    c.send(b"BDAT 200000 LAST\r\n").await;
    c.send(&chunk).await;
    let r = c.reply().await;
    assert!(r.starts_with("452 4.3.1"), "over the budget: {r}");
    // The budget is back, and a message that fits arrives whole.
    let body = format!("{}\r\nSubject: fits\r\n\r\nHello.\r\n", "X-Pad: y");
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@dest.test>").await.starts_with("250"));
    c.send(format!("BDAT {} LAST\r\n", body.len()).as_bytes())
        .await;
    c.send(body.as_bytes()).await;
    let r = c.reply().await;
    assert!(r.starts_with("250 2.0.0 Ok: queued"), "{r}");
    server.shutdown().await;
    let got = sink.messages();
    assert_eq!(got.len(), 1, "only the message that fitted was delivered");
    assert!(String::from_utf8_lossy(&got[0].body).ends_with("Subject: fits\r\n\r\nHello.\r\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alias_expansion_may_not_pass_the_recipient_limit() {
    let dir = temp_dir("dura-alias-cap");
    std::fs::write(
        dir.join("aliases"),
        "team@local.test a@local.test, b@local.test, c@local.test, d@local.test\n",
    )
    .unwrap();
    let mut cfg = config(&dir, None);
    cfg.smtpd.max_recipients = 3;
    cfg.local.domains = vec!["local.test".parse().unwrap()];
    cfg.local.alias_table = Some("aliases".into());
    let mut t: sluice::config::tables::TableConfig = toml::from_str("kind = \"static\"").unwrap();
    t.path = Some(dir.join("aliases"));
    cfg.tables.insert("aliases".into(), t);
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<team@local.test>").await;
    assert!(
        r.starts_with("452 4.5.3"),
        "four targets over a limit of three: {r}"
    );
    assert!(c.cmd("RCPT TO:<a@local.test>").await.starts_with("250"));
    server.shutdown().await;
}

/// A next hop that takes the whole message, then holds its final reply
/// until released.
async fn slow_next_hop() -> (std::net::SocketAddr, Arc<Notify>, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got_body = Arc::new(Notify::new());
    let (release, released) = oneshot::channel::<()>();
    let notify = got_body.clone();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        s.write_all(b"220 slow.test ESMTP\r\n").await.unwrap();
        let mut buf = Vec::new();
        let mut in_data = false;
        let mut released = Some(released);
        loop {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            while let Some(end) = find(&buf, if in_data { b"\r\n.\r\n" } else { b"\r\n" }) {
                let line: Vec<u8> = buf.drain(..end).collect();
                if in_data {
                    in_data = false;
                    notify.notify_one();
                    if let Some(r) = released.take() {
                        let _ = r.await;
                    }
                    s.write_all(b"250 2.0.0 taken\r\n").await.unwrap();
                } else if line.starts_with(b"DATA") {
                    in_data = true;
                    s.write_all(b"354 go\r\n").await.unwrap();
                } else if line.starts_with(b"EHLO") {
                    s.write_all(b"250-slow.test\r\n250 PIPELINING\r\n")
                        .await
                        .unwrap();
                } else {
                    s.write_all(b"250 ok\r\n").await.unwrap();
                }
            }
        }
    });
    (addr, got_body, release)
}

fn find(buf: &[u8], pat: &[u8]) -> Option<usize> {
    buf.windows(pat.len())
        .position(|w| w == pat)
        .map(|i| i + pat.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_waits_for_deliveries_and_records_them() {
    let dir = temp_dir("dura-drain");
    let (hop, got_body, release) = slow_next_hop().await;
    let cfg = config(&dir, Some(hop));
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@b.test", &["x@dest.test"], &body("drain"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    // The next hop has the body and is thinking about it: stop now.
    got_body.notified().await;
    let stopping = tokio::spawn(server.shutdown());
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Draining { in_flight: 1, .. }
        ))
        .await,
        "{}",
        read_log(&dir)
    );
    let _ = release.send(());
    stopping.await.unwrap();
    let log = read_log(&dir);
    assert!(delivered_as(&dir, &qid, "x@dest.test", "sent", ""), "{log}");
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::Drained {
                finished: 1,
                abandoned: 0
            }
        )),
        "{log}"
    );
    // Started again on the same spool, there is nothing left to send.
    let sink = recording_sink().await;
    let mut cfg = cfg;
    cfg.delivery.relayhost = Some(NextHop::to_addr(sink.addr));
    let before = starts(&dir);
    let (server, _) = start(cfg).await;
    // This start's own event (the log is written asynchronously).
    assert!(wait_until(10, || starts(&dir) > before).await);
    let started = logged_events(&dir)
        .into_iter()
        .rfind(|e| matches!(e, Event::Started { .. }))
        .unwrap();
    assert!(
        matches!(started, Event::Started { to_deliver: 0, .. }),
        "{started:?}"
    );
    server.shutdown().await;
    assert_eq!(
        sink.count(),
        0,
        "delivered once, not again after the restart"
    );
}
