//! Behind a real HAProxy: the PROXY v1 and v2 headers give the real client
//! address, which decides relaying and appears in the log and Received.

mod common;

use common::haproxy::HaProxy;
use common::*;
use sluice::config::listener::{ListenerConfig, ListenerKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_client_behind_haproxy_decides_relaying() {
    let dir = temp_dir("proxy-haproxy");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    // Only 127.0.0.9 may relay; HAProxy itself connects from 127.0.0.1.
    cfg.smtpd.mynetworks = vec!["127.0.0.9/32".into()];
    cfg.smtpd.idle_timeout_secs = 2;
    cfg.smtpd.listen.clear();
    cfg.smtpd.listeners.push(ListenerConfig {
        listen: "127.0.0.1:0".into(),
        kind: ListenerKind::Smtp,
        proxy_protocol: true,
        auth_without_tls: false,
        sender_auth: false,
        dmarc_reject: false,
    });
    let (server, addr) = start(cfg).await;
    let lb = HaProxy::start(&dir, addr);
    for (front, version) in [(lb.v1, "v1"), (lb.v2, "v2")] {
        // The trusted client may relay, through either header version.
        let (mut c, greeting) = Client::connect_from("127.0.0.9", front).await;
        assert!(greeting.starts_with("220 "), "{version}: {greeting}");
        assert!(c.cmd("EHLO client.test").await.starts_with("250"));
        let r = c
            .message("a@b.test", &["x@dest.test"], &body(version))
            .await;
        assert!(r.starts_with("250 2.0.0"), "{version}: {r}");
        // Another client through the same balancer may not.
        let (mut c, _) = Client::connect_from("127.0.0.8", front).await;
        assert!(c.cmd("EHLO client.test").await.starts_with("250"));
        assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
        let r = c.cmd("RCPT TO:<x@dest.test>").await;
        assert!(r.starts_with("554 5.7.1"), "{version}: {r}");
    }
    assert!(wait_until(10, || sink.count() == 2).await);
    for m in sink.messages() {
        let text = String::from_utf8_lossy(&m.body).into_owned();
        assert!(text.contains("([127.0.0.9])"), "{text}");
    }
    // Straight to the listener, without a header: no session.
    let (_c, greeting) = Client::connect(addr).await;
    assert_eq!(greeting, "", "closed without a greeting");
    drop(lb);
    server.shutdown().await;
    let log = read_log(&dir);
    assert!(log.contains("proxied connection from [127.0.0.9]"), "{log}");
    assert!(log.contains("connect from [127.0.0.8]"), "{log}");
    assert!(
        log.contains("no PROXY header") || log.contains("bad PROXY"),
        "{log}"
    );
}
