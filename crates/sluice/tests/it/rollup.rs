//! MX rollup and destination rate limits, through a real nsd: domains
//! hosted on one MX host share one destination (one window, one rate,
//! connections reused across the domains).

use crate::common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::nsd::Nsd;
use common::*;

const ZONE: &str = "$ORIGIN roll.test.
$TTL 300
@   SOA ns.roll.test. admin.roll.test. 1 3600 600 86400 300
@   NS  ns
ns  A   127.0.0.1
mx  A   127.0.0.1
a   MX  10 mx
b   MX  10 mx
c   MX  10 mx
";

/// Waits until nsd answers (the server's own resolver caches nothing yet).
async fn nsd_ready(nsd: &Nsd) {
    let dns = sluice::routing::dns::Dns::new(&sluice::config::DnsConfig {
        nameservers: vec![nsd.addr],
        timeout_ms: 500,
        attempts: 1,
        trust_anchor_file: None,
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while dns.mail_hosts("a.roll.test").await.is_err() {
        assert!(Instant::now() < deadline, "nsd did not answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Six messages, two to each of three domains on one MX host; returns the
/// sink and the time from the first to the last delivery.
async fn six_messages(
    name: &str,
    tune: impl FnOnce(&mut sluice::config::Config, u16),
) -> (sluice_bench::sink::Sink, Duration) {
    let dir = temp_dir(name);
    let nsd = Nsd::start(&dir, &[("roll.test", ZONE)]);
    let sink = recording_sink().await;
    let port = sink.addr.port();
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    // The domains' own MX hosts, on the sink's port.
    cfg.delivery.mx_port = port;
    cfg.delivery.initial_concurrency = 1;
    cfg.delivery.connection_idle_secs = 30;
    tune(&mut cfg, port);
    let (server, addr) = start(cfg).await;
    nsd_ready(&nsd).await;
    let mut c = Client::ready(addr).await;
    for i in 0..6 {
        let d = ["a", "b", "c"][i % 3];
        let r = c
            .message(
                "s@sender.test",
                &[&format!("u{i}@{d}.roll.test")],
                &body(&format!("m{i}")),
            )
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    assert!(
        wait_until(30, || sink.count() == 6).await,
        "all six delivered"
    );
    server.shutdown().await;
    let s = &sink.stats;
    let spread = s.last_ms.load(Ordering::SeqCst) - s.first_ms.load(Ordering::SeqCst);
    (sink, Duration::from_millis(spread))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domains_on_one_mx_host_share_a_destination() {
    let (sink, _) = six_messages("rollup-share", |cfg, port| {
        // One connection for the whole group.
        cfg.delivery
            .destination_concurrency
            .insert(format!("mx:mx.roll.test:{port}"), 1);
    })
    .await;
    assert_eq!(
        sink.stats.connections.load(Ordering::SeqCst),
        1,
        "one connection carried the mail of all three domains"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_rate_limit_spaces_deliveries() {
    let (_, spread) = six_messages("rollup-rate", |cfg, port| {
        // 120 a minute: one every half second, over the group.
        cfg.delivery
            .destination_rate_limit
            .insert(format!("mx:mx.roll.test:{port}"), 120);
    })
    .await;
    assert!(
        spread >= Duration::from_millis(2400),
        "six messages at two a second take at least 2.5 s: {spread:?}"
    );
}

/// Two domains share their best MX host (down) but each has its own
/// backup; a third publishes a null MX. Rolled up by the best host alone,
/// one domain's mail went to the other's backup (security review H1).
const SPLIT_ZONE: &str = "$ORIGIN split.test.
$TTL 300
@      SOA ns.split.test. admin.split.test. 1 3600 600 86400 300
@      NS  ns
ns     A   127.0.0.1
mx     A   127.0.0.4
backa  A   127.0.0.2
backb  A   127.0.0.3
a      MX  10 mx
a      MX  20 backa
b      MX  10 mx
b      MX  20 backb
n      MX  0 .
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_domain_keeps_its_own_mail_hosts_when_its_best_mx_is_shared() {
    let dir = temp_dir("rollup-split");
    let nsd = Nsd::start(&dir, &[("split.test", SPLIT_ZONE)]);
    let back_a = sink_on("127.0.0.2:0".parse().unwrap()).await;
    let port = back_a.addr.port();
    let back_b = sink_on(format!("127.0.0.3:{port}").parse().unwrap()).await;
    // Nothing listens on 127.0.0.4: the shared best MX is down.
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.delivery.mx_port = port;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    for (i, to) in [
        "x@a.split.test",
        "y@b.split.test",
        "z@a.split.test",
        "w@b.split.test",
    ]
    .iter()
    .enumerate()
    {
        let r = c
            .message("s@sender.test", &[to], &body(&format!("m{i}")))
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    let r = c
        .message("s@sender.test", &["v@n.split.test"], &body("null"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(
        wait_until(30, || back_a.count() + back_b.count() == 4).await,
        "all four delivered"
    );
    assert!(
        wait_logged(10, &dir, |e| is_delivery(e, "", "bounced", "5.1.10", "")
            && matches!(e, Event::Delivery { to, .. } if to.ends_with("@n.split.test")))
        .await
    );
    server.shutdown().await;
    let to = |s: &sluice_bench::sink::Sink| -> Vec<String> {
        let mut r: Vec<String> = s
            .messages()
            .into_iter()
            .flat_map(|m| m.recipients)
            .collect();
        r.sort();
        r
    };
    assert_eq!(to(&back_a), ["x@a.split.test", "z@a.split.test"]);
    assert_eq!(to(&back_b), ["w@b.split.test", "y@b.split.test"]);
}
