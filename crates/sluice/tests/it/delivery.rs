//! Delivery outcomes: retries, bounces, and the null sender.

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_hop_down_then_up_defers_then_delivers() {
    let dir = temp_dir("deliver-down-up");
    let hop = reserve();
    let (server, addr) = start(config(&dir, Some(hop.addr))).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["b@dest.test"], &body("later"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Delivery { queue_id, to, status, relay, .. }
                if *queue_id == qid.as_str()
                    && to == "b@dest.test"
                    && status == "deferred"
                    && relay.starts_with("127.0.0.1")
        ))
        .await,
        "{}",
        read_log(&dir)
    );
    let sink = hop.sink().await;
    assert!(
        wait_until(15, || sink.count() == 1).await,
        "{}",
        read_log(&dir)
    );
    assert!(wait_until(5, || removed(&dir, &qid)).await);
    // Removed from the queue: nothing is left to send; the drained stop
    // makes the count final.
    server.shutdown().await;
    assert_eq!(sink.count(), 1, "delivered exactly once");
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
    assert!(wait_until(5, || removed(&dir, &qid)).await);
    assert!(delivered_as(
        &dir,
        &qid,
        "reject-me@dest.test",
        "bounced",
        ""
    ));
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Notice { queue_id, kind, .. } if *queue_id == qid.as_str() && kind == "failure"
    )));
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
        wait_until(10, || removed(&dir, &qid)).await,
        "{}",
        read_log(&dir)
    );
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::NoticeSkipped { queue_id, to, why, .. }
            if *queue_id == qid.as_str() && to == "reject-this@dest.test" && why == "null_sender"
    )));
    assert!(
        !any_logged(&dir, |e| matches!(e, Event::Notice { .. })),
        "{}",
        read_log(&dir)
    );
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
    // The drained stop also flushes the mail log.
    server.shutdown().await;
    let log = read_log(&dir);
    let attempts = count_logged(&dir, |e| {
        matches!(
            e,
            Event::Delivery { queue_id, to, status, .. }
                if *queue_id == qid.as_str() && to == "defer-me@dest.test" && status == "deferred"
        )
    });
    assert!(attempts >= 2, "retried: {attempts} attempts\n{log}");
    assert!(
        delivered_as(&dir, &qid, "defer-me@dest.test", "expired", ""),
        "{log}"
    );
    let bounce = &sink.messages()[0];
    assert!(bounce.sender.is_empty());
    let text = String::from_utf8_lossy(&bounce.body);
    assert!(
        text.contains(
            "Final-Recipient: rfc822; defer-me@dest.test\r\nAction: failed\r\nStatus: 5.4.7\r\n"
        ),
        "{text}"
    );
    // The last error came from the next hop, which the report names.
    assert!(text.contains("Remote-MTA: dns; 127.0.0.1\r\n"), "{text}");
    assert!(
        text.contains("Diagnostic-Code: X-Sluice; message expired after "),
        "{text}"
    );
    assert!(text.contains("last error: 451 "), "{text}");
}

/// A next hop that accepts connections and then never says a word.
async fn silent_hop() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_dead_destinations_do_not_hold_up_others() {
    let dir = temp_dir("deliver-fair");
    let fast = recording_sink().await;
    let dead = reserve(); // nothing listens: every connect fails
    let silent = silent_hop().await; // accepts, never answers
    let mut cfg = config(&dir, Some(fast.addr));
    for (domain, hop) in [("dead.test", dead.addr), ("silent.test", silent)] {
        cfg.transport.insert(domain.into(), NextHop::to_addr(hop));
    }
    cfg.queue.minimal_backoff_secs = 30;
    cfg.delivery.command_timeout_secs = 300;
    cfg.queue.shutdown_drain_secs = 2;
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    for i in 0..20 {
        for to in ["x@dead.test", "z@silent.test", "y@fast.test"] {
            let r = c
                .message("a@sender.test", &[to], &body(&format!("{i}{to}")))
                .await;
            assert!(r.starts_with("250"), "{r}");
        }
    }
    // The silent hop holds its whole window for minutes; the fast one flows.
    assert!(
        wait_until(10, || fast.count() == 20).await,
        "{}",
        fast.count()
    );
    assert!(
        wait_logged(10, &dir, |e| matches!(e, Event::DestinationDead { .. })).await,
        "{}",
        read_log(&dir)
    );
    assert!(
        !any_logged(&dir, |e| matches!(
            e,
            Event::Delivery { to, .. } if to == "z@silent.test"
        )),
        "still waiting on the silent hop: {}",
        read_log(&dir)
    );
    // The stop does not wait 300 s for the silent hop: the drain deadline
    // abandons those deliveries (they stay queued) and says so.
    let stop = tokio::time::timeout(
        std::time::Duration::from_secs(cfg.queue.shutdown_drain_secs + 10),
        server.shutdown(),
    );
    assert!(stop.await.is_ok(), "shutdown is bounded by its deadline");
    assert!(any_logged(
        &dir,
        |e| matches!(e, Event::Drained { abandoned, .. } if *abandoned > 0)
    ));
}
