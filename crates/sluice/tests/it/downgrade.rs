//! Fitting mail to a next hop without 8BITMIME or SMTPUTF8: 8-bit bodies
//! are downgraded to quoted-printable, UTF-8 domains go as A-labels, and
//! what cannot be converted (a UTF-8 local part, UTF-8 headers) bounces
//! with 5.6.7 instead of being sent as 8-bit data.

use crate::common;

use common::*;
use sluice_bench::sink::{Sink, SinkOptions};

async fn seven_bit_sink() -> Sink {
    Sink::start(SinkOptions {
        record: true,
        seven_bit: true,
        ..Default::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_8bit_body_is_downgraded_for_a_7bit_hop() {
    let dir = temp_dir("downgrade-8bit");
    let sink = seven_bit_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    let mut c = Client::ready(addr).await;
    assert!(c
        .cmd("MAIL FROM:<a@sender.test> BODY=8BITMIME")
        .await
        .starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@ours.test>").await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send("Subject: t\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\nGrüße aus Köln\r\n.\r\n".as_bytes())
        .await;
    assert!(c.reply().await.starts_with("250"));
    assert!(wait_until(15, || sink.count() == 1).await);
    server.shutdown().await;
    let got = &sink.messages()[0];
    assert!(got.body.is_ascii(), "no 8-bit octet reached the 7-bit hop");
    let text = String::from_utf8(got.body.clone()).unwrap();
    assert!(
        text.contains("Content-Transfer-Encoding: quoted-printable\r\n"),
        "{text}"
    );
    assert!(text.contains("Gr=C3=BC=C3=9Fe aus K=C3=B6ln\r\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utf8_addresses_to_a_hop_without_smtputf8() {
    let dir = temp_dir("downgrade-utf8");
    let sink = seven_bit_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.transport
        .insert("bücher.test".into(), NextHop::to_addr(sink.addr));
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    // A UTF-8 domain goes as its A-label; a UTF-8 local part cannot go.
    assert!(c
        .cmd("MAIL FROM:<a@sender.test> SMTPUTF8")
        .await
        .starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@bücher.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<jörg@ours.test>").await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send(b"Subject: ascii headers\r\n\r\nhello\r\n.\r\n")
        .await;
    assert!(c.reply().await.starts_with("250"));
    // UTF-8 headers in an SMTPUTF8 message cannot go either.
    assert!(c
        .cmd("MAIL FROM:<a@sender.test> SMTPUTF8")
        .await
        .starts_with("250"));
    assert!(c.cmd("RCPT TO:<y@ours.test>").await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send("Subject: Grüße\r\n\r\nhello\r\n.\r\n".as_bytes())
        .await;
    assert!(c.reply().await.starts_with("250"));
    assert!(
        wait_until(15, || {
            let log = delivery_events(&dir, "");
            ["jörg@ours.test", "y@ours.test"].iter().all(|to| {
                log.iter()
                    .any(|e| matches!(e, Event::Delivery { to: t, .. } if t == to))
            })
        })
        .await
    );
    assert!(wait_until(15, || sink.count() >= 1).await);
    server.shutdown().await;
    // What reached the hop: the one deliverable message, and the bounces
    // (from <>, themselves 7-bit).
    let all = sink.messages();
    let mail: Vec<_> = all.iter().filter(|m| !m.sender.is_empty()).collect();
    assert_eq!(mail.len(), 1, "only the convertible recipient was sent");
    assert_eq!(mail[0].recipients, vec!["x@xn--bcher-kva.test".to_string()]);
    for m in &all {
        assert!(m.body.is_ascii() && m.recipients.iter().all(|r| r.is_ascii()));
    }
    let log = delivery_events(&dir, "");
    for rcpt in ["jörg@ours.test", "y@ours.test"] {
        let line = log
            .iter()
            .find(|e| matches!(e, Event::Delivery { to, .. } if to == rcpt))
            .unwrap();
        assert!(is_delivery(line, rcpt, "bounced", "5.6.7", ""), "{line:?}");
    }
}
