//! Delivery outcomes: retries, bounces, and the null sender.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_hop_down_then_up_defers_then_delivers() {
    let dir = temp_dir("deliver-down-up");
    let hop = free_addr();
    let (server, addr) = start(config(&dir, Some(hop))).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["b@dest.test"], &body("later"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_until(10, || read_log(&dir)
            .contains(&format!("{qid}: to=<b@dest.test>, relay=127.0.0.1"))
            && read_log(&dir).contains("status=deferred"))
        .await,
        "{}",
        read_log(&dir)
    );
    let sink = sink_on(hop).await;
    assert!(
        wait_until(15, || sink.count() == 1).await,
        "{}",
        read_log(&dir)
    );
    assert!(wait_until(5, || read_log(&dir).contains(&format!("{qid}: removed"))).await);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(sink.count(), 1, "delivered exactly once");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_failure_bounces_to_the_sender() {
    let dir = temp_dir("deliver-bounce");
    let sink = recording_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message(
            "sender@origin.test",
            &["ok@dest.test", "reject-me@dest.test"],
            &body("bounce"),
        )
        .await;
    let qid = qid_of(&r);
    assert!(
        wait_until(10, || sink.count() == 2).await,
        "{}",
        read_log(&dir)
    );
    let msgs = sink.messages();
    let delivered = msgs
        .iter()
        .find(|m| m.sender == "sender@origin.test")
        .expect("original");
    assert_eq!(delivered.recipients, vec!["ok@dest.test"]);
    let bounce = msgs
        .iter()
        .find(|m| m.sender.is_empty())
        .expect("a bounce from <>");
    assert_eq!(bounce.recipients, vec!["sender@origin.test"]);
    let text = String::from_utf8_lossy(&bounce.body);
    assert!(
        text.contains("multipart/report; report-type=delivery-status"),
        "{text}"
    );
    assert!(text.contains("Final-Recipient: rfc822; reject-me@dest.test"));
    assert!(text.contains("Status: 5.1.1"));
    assert!(
        text.contains("Subject: bounce"),
        "original headers attached"
    );
    assert!(!text.contains("Final-Recipient: rfc822; ok@dest.test"));
    assert!(wait_until(5, || read_log(&dir).contains(&format!("{qid}: removed"))).await);
    let log = read_log(&dir);
    assert!(
        log.contains(&format!("{qid}: to=<reject-me@dest.test>")) && log.contains("status=bounced")
    );
    assert!(log.contains(&format!("{qid}: sender non-delivery notification")));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_sender_never_gets_a_bounce() {
    let dir = temp_dir("deliver-null");
    let sink = recording_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("", &["reject-this@dest.test"], &body("null"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_until(10, || read_log(&dir).contains(&format!("{qid}: removed"))).await,
        "{}",
        read_log(&dir)
    );
    let log = read_log(&dir);
    assert!(log.contains(&format!(
        "{qid}: to=<reject-this@dest.test>: undeliverable mail from the null sender discarded, no bounce sent"
    )));
    assert!(!log.contains("non-delivery notification"), "{log}");
    // The shutdown drain waits for anything still being delivered.
    server.shutdown().await;
    assert_eq!(sink.count(), 0, "no bounce was sent anywhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporary_failures_retry_then_expire_into_a_bounce() {
    let dir = temp_dir("deliver-expire");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.queue.maximal_lifetime_secs = 2;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message(
            "sender@origin.test",
            &["defer-me@dest.test"],
            &body("expire"),
        )
        .await;
    let qid = qid_of(&r);
    assert!(
        wait_until(15, || sink.count() == 1).await,
        "{}",
        read_log(&dir)
    );
    let log = read_log(&dir);
    let attempts = log
        .matches(&format!("{qid}: to=<defer-me@dest.test>, relay=127.0.0.1"))
        .count();
    assert!(attempts >= 2, "retried: {attempts} attempts\n{log}");
    assert!(log.contains("status=expired"), "{log}");
    let bounce = &sink.messages()[0];
    assert!(bounce.sender.is_empty());
    let text = String::from_utf8_lossy(&bounce.body);
    assert!(text.contains("Final-Recipient: rfc822; defer-me@dest.test"));
    assert!(text.contains("expired"), "{text}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_destination_does_not_hold_up_others() {
    let dir = temp_dir("deliver-fair");
    let fast = recording_sink().await;
    let dead = free_addr(); // nothing listens: every connect fails
    let mut cfg = config(&dir, Some(fast.addr));
    cfg.transport.insert(
        "dead.test".into(),
        format!("smtp:[{}]:{}", dead.ip(), dead.port()),
    );
    cfg.queue.minimal_backoff_secs = 30;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    for i in 0..20 {
        c.message("a@sender.test", &["x@dead.test"], &body(&format!("d{i}")))
            .await;
        c.message("a@sender.test", &["y@fast.test"], &body(&format!("f{i}")))
            .await;
    }
    assert!(
        wait_until(10, || fast.count() == 20).await,
        "{}",
        fast.count()
    );
    let log = read_log(&dir);
    assert!(
        log.contains("destination marked dead") || log.contains("is not responding"),
        "{log}"
    );
    server.shutdown().await;
}
