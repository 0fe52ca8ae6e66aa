//! End-to-end relay behaviour over real sockets: server → in-process sink.

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_a_message_with_received_header_and_exact_body() {
    let dir = temp_dir("relay-basic");
    let sink = recording_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    let mut c = Client::ready(addr).await;
    let text = "Subject: dots\r\n\r\n..leading dot\r\n.\r\nx\r\n";
    let r = c
        .message(
            "a@sender.test",
            &["b@dest.test", "c@dest.test"],
            "Subject: dots\r\n\r\n...leading dot\r\n..\r\nx\r\n",
        )
        .await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as "), "{r}");
    let qid = qid_of(&r);
    assert!(wait_until(10, || sink.count() == 1).await);
    let got = &sink.messages()[0];
    assert_eq!(got.sender, "a@sender.test");
    assert_eq!(
        got.recipients,
        vec!["b@dest.test", "c@dest.test"],
        "one transaction for both"
    );
    let body = String::from_utf8(got.body.clone()).unwrap();
    assert!(
        body.starts_with("Received: from client.test ([127.0.0.1])"),
        "{body}"
    );
    assert!(body.contains(&format!("id {qid}")));
    assert!(body.ends_with(text), "{body:?}");
    assert!(wait_until(5, || removed(&dir, &qid)).await);
    let sent = logged_events(&dir);
    assert!(
        sent.iter().any(|e| matches!(
            e,
            Event::Delivery { queue_id, to, relay, status, reason, .. }
                if *queue_id == qid.as_str()
                    && to == "b@dest.test"
                    && relay.starts_with("127.0.0.1[127.0.0.1]")
                    && status == "sent"
                    && *reason == "250 2.0.0 Ok: queued"
        )),
        "{sent:?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_connections_are_reused() {
    let dir = temp_dir("relay-reuse");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.delivery.default_concurrency = 1;
    cfg.delivery.connection_idle_secs = 5;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    for i in 0..20 {
        let r = c
            .message("a@sender.test", &["b@dest.test"], &body(&format!("m{i}")))
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    assert!(
        wait_until(10, || sink.count() == 20).await,
        "{}",
        sink.count()
    );
    let conns = sink
        .stats
        .connections
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(conns <= 2, "20 messages over {conns} connections");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commands_get_all_replies() {
    let dir = temp_dir("relay-pipe");
    let sink = recording_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    let (mut c, _) = Client::connect(addr).await;
    c.send(b"EHLO p.test\r\nMAIL FROM:<a@sender.test>\r\nRCPT TO:<b@dest.test>\r\nRCPT TO:<c@dest.test>\r\nDATA\r\n").await;
    let ehlo = c.reply().await;
    assert!(
        ehlo.contains("250-PIPELINING") && ehlo.contains("250 CHUNKING"),
        "{ehlo}"
    );
    assert!(
        ehlo.contains("250-SIZE ")
            && ehlo.contains("250-8BITMIME")
            && ehlo.contains("250-ENHANCEDSTATUSCODES")
            && ehlo.contains("250-SMTPUTF8")
    );
    for want in ["250 2.1.0", "250 2.1.5", "250 2.1.5", "354 "] {
        let r = c.reply().await;
        assert!(r.starts_with(want), "want {want}, got {r}");
    }
    // Body, end, and the next transaction all in one write.
    c.send(b"Subject: one\r\n\r\nbody\r\n.\r\nMAIL FROM:<a@sender.test>\r\nRCPT TO:<d@dest.test>\r\nDATA\r\n").await;
    assert!(c.reply().await.starts_with("250 2.0.0 Ok: queued"));
    assert!(c.reply().await.starts_with("250 2.1.0"));
    assert!(c.reply().await.starts_with("250 2.1.5"));
    assert!(c.reply().await.starts_with("354"));
    c.send(b"Subject: two\r\n\r\nbody\r\n.\r\nQUIT\r\n").await;
    assert!(c.reply().await.starts_with("250 2.0.0"));
    assert!(c.reply().await.starts_with("221"));
    assert!(wait_until(10, || sink.count() == 2).await);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bdat_chunks_are_assembled() {
    let dir = temp_dir("relay-bdat");
    let sink = recording_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<a@sender.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<b@dest.test>").await.starts_with("250"));
    let part1 = b"Subject: bdat\r\n\r\n";
    let part2 = b".starts with a dot\r\nend\r\n";
    c.send(format!("BDAT {}\r\n", part1.len()).as_bytes()).await;
    c.send(part1).await;
    assert!(c.reply().await.starts_with("250 2.0.0"), "chunk 1");
    c.send(format!("BDAT {} LAST\r\n", part2.len()).as_bytes())
        .await;
    c.send(part2).await;
    let r = c.reply().await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    // DATA is refused once BDAT started; BDAT without a transaction is refused.
    assert!(c.cmd("MAIL FROM:<a@sender.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<b@dest.test>").await.starts_with("250"));
    c.send(b"BDAT 3\r\nabc").await;
    assert!(c.reply().await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("503"));
    assert!(c.cmd("RSET").await.starts_with("250"));
    c.send(b"BDAT 4 LAST\r\nwxyz").await;
    assert!(c.reply().await.starts_with("503 5.5.1"));
    assert!(
        c.cmd("NOOP").await.starts_with("250"),
        "the refused chunk was skipped"
    );
    assert!(wait_until(10, || sink.count() == 1).await);
    let got = String::from_utf8(sink.messages()[0].body.clone()).unwrap();
    assert!(
        got.ends_with("Subject: bdat\r\n\r\n.starts with a dot\r\nend\r\n"),
        "{got:?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_transport_and_unroutable_domain() {
    let dir = temp_dir("relay-routes");
    let mut cfg = config(&dir, None);
    cfg.transport.insert("void.test".into(), NextHop::Discard);
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["x@void.test"], &body("void"))
        .await;
    let qid = qid_of(&r);
    assert!(wait_until(5, || removed(&dir, &qid)).await);
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Delivery { queue_id, transport, status, .. }
            if *queue_id == qid.as_str() && transport == "discard" && status == "sent"
    )));
    let r = c
        .message("a@sender.test", &["x@nowhere.test"], &body("nowhere"))
        .await;
    let qid = qid_of(&r);
    // No route: the domain's own mail hosts, and DNS (here: no answer) is
    // a temporary failure, never a bounce.
    assert!(
        wait_logged(5, &dir, |e| matches!(
            e,
            Event::Delivery { queue_id, to, relay, status, dsn, .. }
                if *queue_id == qid.as_str()
                    && to == "x@nowhere.test"
                    && relay == "nowhere.test:25"
                    && status == "deferred"
                    && *dsn == "4.4.3"
        ))
        .await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_to_an_ipv6_next_hop() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    }
    let dir = temp_dir("relay-ipv6");
    let sink = sink_on("[::1]:0".parse().unwrap()).await;
    let mut cfg = config(&dir, None);
    cfg.delivery.relayhost = Some(NextHop::to_addr(sink.addr));
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["b@dest.test"], &body("v6"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(
        wait_until(10, || sink.count() == 1).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::Delivery { relay, .. } if relay.starts_with("::1[::1]:")
        )),
        "{}",
        read_log(&dir)
    );
}
