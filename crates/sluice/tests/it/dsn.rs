//! The DSN extension (RFC 3461): NOTIFY, ORCPT, RET and ENVID are
//! accepted, kept in the spool, passed to a next hop that offers DSN, and
//! honoured here otherwise: a "relayed" notice for NOTIFY=SUCCESS, no
//! bounce for NOTIFY=NEVER, the whole message returned for RET=FULL.

use crate::common;

use common::*;
use sluice_bench::sink::{ReceivedMessage, Sink, SinkOptions};

async fn sink(dsn: bool) -> Sink {
    Sink::start(SinkOptions {
        record: true,
        test_replies: true,
        dsn,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// One message with DSN parameters, from sender@ours.test (so notices
/// come back to the same sink).
async fn send(c: &mut Client, rcpt: &str, notify: &str, ret: &str, subject: &str) {
    let r = c
        .cmd(&format!(
            "MAIL FROM:<sender@ours.test> RET={ret} ENVID=QQ314159"
        ))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let r = c
        .cmd(&format!(
            "RCPT TO:<{rcpt}> NOTIFY={notify} ORCPT=rfc822;orig+2Bx@ours.test"
        ))
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send(body(subject).as_bytes()).await;
    c.send(b"body line one\r\n.\r\n").await;
    assert!(c.reply().await.starts_with("250"));
}

fn notices(sink: &Sink) -> Vec<ReceivedMessage> {
    sink.messages()
        .into_iter()
        .filter(|m| m.sender.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsn_parameters_are_offered_checked_and_passed_on() {
    let dir = temp_dir("dsn-pass");
    let hop = sink(true).await;
    let (server, addr) = start(config(&dir, Some(hop.addr))).await;
    let (mut c, _) = Client::connect(addr).await;
    let ehlo = c.cmd("EHLO client.test").await;
    assert!(ehlo.contains("250-DSN"), "{ehlo}");
    assert!(c
        .cmd("MAIL FROM:<a@ours.test> RET=SOME")
        .await
        .starts_with("501 5.5.4"));
    assert!(c
        .cmd("MAIL FROM:<a@ours.test> RET=HDRS")
        .await
        .starts_with("250"));
    for bad in ["NOTIFY=NEVER,SUCCESS", "ORCPT=x@y", "NOTIFY=SOMETIMES"] {
        let r = c.cmd(&format!("RCPT TO:<x@ours.test> {bad}")).await;
        assert!(r.starts_with("501 5.5.4"), "{bad}: {r}");
    }
    assert!(c.cmd("RSET").await.starts_with("250"));
    send(&mut c, "x@ours.test", "SUCCESS,FAILURE", "HDRS", "passed").await;
    assert!(wait_until(15, || hop.count() == 1).await);
    server.shutdown().await;
    let got = &hop.messages()[0];
    assert_eq!(
        got.commands,
        vec![
            "MAIL FROM:<sender@ours.test> SIZE=".to_string()
                + &got.body.len().to_string()
                + " RET=HDRS ENVID=QQ314159",
            "RCPT TO:<x@ours.test> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;orig+2Bx@ours.test".into(),
        ]
    );
    assert!(notices(&hop).is_empty(), "the next hop reports; we do not");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_is_reported_as_relayed_to_a_hop_without_dsn() {
    let dir = temp_dir("dsn-relayed");
    let hop = sink(false).await;
    let (server, addr) = start(config(&dir, Some(hop.addr))).await;
    let mut c = Client::ready(addr).await;
    send(&mut c, "x@ours.test", "SUCCESS", "HDRS", "relayed").await;
    assert!(
        wait_until(15, || hop.count() == 2).await,
        "the message and a notice"
    );
    server.shutdown().await;
    let n = notices(&hop);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].recipients, vec!["sender@ours.test".to_string()]);
    let text = String::from_utf8_lossy(&n[0].body);
    for want in [
        "Subject: Successful Mail Delivery Report",
        "Original-Envelope-Id: QQ314159",
        "Original-Recipient: rfc822;orig+2Bx@ours.test\r\nFinal-Recipient: rfc822; x@ours.test\r\nAction: relayed\r\nStatus: 2.0.0",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
    let plain = hop
        .messages()
        .into_iter()
        .find(|m| !m.sender.is_empty())
        .unwrap();
    assert!(
        plain.commands.iter().all(|c| !c.contains("NOTIFY")),
        "no DSN parameters to a hop that does not offer DSN: {:?}",
        plain.commands
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_never_means_no_bounce_and_ret_full_returns_the_body() {
    let dir = temp_dir("dsn-failure");
    let hop = sink(false).await;
    let (server, addr) = start(config(&dir, Some(hop.addr))).await;
    let mut c = Client::ready(addr).await;
    // The sink refuses reject-* recipients with 550.
    send(&mut c, "reject-a@ours.test", "NEVER", "FULL", "silent").await;
    send(&mut c, "reject-b@ours.test", "FAILURE", "FULL", "loud").await;
    assert!(
        wait_until(15, || {
            any_logged(
                &dir,
                |e| matches!(e, Event::NoticeSkipped { why, .. } if why == "notify"),
            ) && any_logged(
                &dir,
                |e| matches!(e, Event::Notice { kind, .. } if kind == "failure"),
            )
        })
        .await
    );
    assert!(wait_until(15, || notices(&hop).len() == 1).await);
    server.shutdown().await;
    let n = notices(&hop);
    assert_eq!(n.len(), 1, "one bounce: for reject-b only");
    let text = String::from_utf8_lossy(&n[0].body);
    assert!(
        text.contains("Final-Recipient: rfc822; reject-b@ours.test"),
        "{text}"
    );
    assert!(text.contains("Content-Type: message/rfc822"), "{text}");
    assert!(
        text.contains("body line one"),
        "the whole message came back: {text}"
    );
}

/// A client that may not relay (a stranger, unauthenticated) asking
/// RET=FULL gets headers only, success or failure: it cannot make us
/// reflect a body of its choosing to the sender address it claims
/// (security review, Low: DSN reflection). The trusted client's RET=FULL
/// above returns the whole message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_asking_ret_full_gets_headers_only() {
    let dir = temp_dir("dsn-stranger");
    let hop = sink(false).await;
    let (server, addr) = start(untrusted_config(&dir, Some(hop.addr))).await;
    let mut c = Client::ready(addr).await;
    send(&mut c, "x@ours.test", "SUCCESS", "FULL", "reflected").await;
    send(&mut c, "reject-b@ours.test", "FAILURE", "FULL", "bounced").await;
    assert!(
        wait_until(15, || notices(&hop).len() == 2).await,
        "a relayed notice and a bounce: {}",
        read_log(&dir)
    );
    server.shutdown().await;
    for n in notices(&hop) {
        let text = String::from_utf8_lossy(&n.body);
        assert!(text.contains("Content-Type: text/rfc822-headers"), "{text}");
        assert!(
            !text.contains("body line one"),
            "the body came back: {text}"
        );
    }
    assert!(
        any_logged(&dir, |e| matches!(e, Event::RetFullRefused { .. })),
        "{}",
        read_log(&dir)
    );
}
