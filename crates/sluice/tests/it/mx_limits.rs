//! Caps on the MX hosts a delivery attempt uses, through a real nsd: a
//! zone with hundreds of MX hosts gets the first
//! `delivery.mx_address_limit` addresses tried (and looked up), not all
//! of them; hosts that each defer the whole transaction get at most
//! `delivery.mx_session_limit` sessions (Postfix's smtp_mx_address_limit
//! and smtp_mx_session_limit).

use crate::common;

use std::fmt::Write;

use common::nsd::Nsd;
use common::*;

/// 200 MX hosts of one preference, each on its own loopback address.
fn many_mx_zone() -> String {
    let mut zone = String::from(
        "$ORIGIN many.test.
$TTL 300
@   SOA ns.many.test. admin.many.test. 1 3600 600 86400 300
@   NS  ns
ns  A   127.0.0.1
",
    );
    for i in 0..200 {
        writeln!(zone, "@ MX 10 mx{i:03}").unwrap();
        writeln!(zone, "mx{i:03} A 127.0.{}.{}", 2 + i / 250, 1 + i % 250).unwrap();
    }
    zone
}

/// The events up to the first delivery event of `rcpt` (how the first
/// attempt ended; the log keeps the order events happened in).
async fn first_attempt(dir: &std::path::Path, rcpt: &str) -> Vec<Event<'static>> {
    let end = |e: &Event| matches!(e, Event::Delivery { to, .. } if to == rcpt);
    assert!(
        wait_until(60, || any_logged(dir, end)).await,
        "{}",
        read_log(dir)
    );
    let mut all = logged_events(dir);
    let last = all.iter().position(end).unwrap();
    all.truncate(last + 1);
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_with_hundreds_of_mx_hosts_gets_five_addresses_tried() {
    let dir = temp_dir("mx-address-limit");
    let zone = many_mx_zone();
    let nsd = Nsd::start(&dir, &[("many.test", &zone)]);
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.dns.timeout_ms = 2000;
    // Nothing listens there: every connection is refused at once.
    let refusing = reserve();
    cfg.delivery.mx_port = refusing.addr.port();
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@sender.test", &["u@many.test"], &body("many"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let log = first_attempt(&dir, "u@many.test").await;
    server.shutdown().await;
    let tried = log
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::ConnectFailed(ConnectFailed::Host { host, .. }) if host.ends_with(".many.test")
            )
        })
        .count();
    assert_eq!(tried, 5, "the first five addresses, no more: {log:?}");
    assert!(
        log.iter().any(|e| is_delivery(e, "", "deferred", "", "")),
        "{log:?}"
    );
    assert!(
        log.iter().any(|e| matches!(
            e,
            Event::MxTruncated { domain, hosts: 200, limit: 5 } if domain == "many.test"
        )),
        "the cut is logged: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mx_hosts_that_defer_everything_get_two_sessions() {
    let dir = temp_dir("mx-session-limit");
    let first = sink_on("127.0.0.21:0".parse().unwrap()).await;
    let port = first.addr.port();
    let _second = sink_on(format!("127.0.0.22:{port}").parse().unwrap()).await;
    let _third = sink_on(format!("127.0.0.23:{port}").parse().unwrap()).await;
    let zone = "$ORIGIN three.test.
$TTL 300
@   SOA ns.three.test. admin.three.test. 1 3600 600 86400 300
@   NS  ns
ns  A   127.0.0.1
@   MX  10 mx1
@   MX  20 mx2
@   MX  30 mx3
mx1 A   127.0.0.21
mx2 A   127.0.0.22
mx3 A   127.0.0.23
";
    let nsd = Nsd::start(&dir, &[("three.test", zone)]);
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.delivery.mx_port = port;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    // The sinks answer 451 to defer-* recipients: the whole transaction.
    let r = c
        .message("s@sender.test", &["defer-me@three.test"], &body("three"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let log = first_attempt(&dir, "defer-me@three.test").await;
    server.shutdown().await;
    assert_eq!(
        log.iter()
            .filter(|e| matches!(e, Event::Failover { next: true, .. }))
            .count(),
        1,
        "two sessions, one failover: {log:?}"
    );
    assert!(
        log.iter().any(|e| is_delivery(e, "", "deferred", "", "")),
        "{log:?}"
    );
    // No event names the third host (its address in any field).
    assert!(
        !log.iter().any(|e| {
            let fields = serde_json::to_string(e).unwrap();
            fields.contains("127.0.0.23") || e.to_string().contains("127.0.0.23")
        }),
        "the third host is not tried: {log:?}"
    );
}
