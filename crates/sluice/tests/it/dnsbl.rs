//! DNS block- and allowlists at connect (`smtpd.dnsbl_sites`), with the
//! lists served by a real nsd on loopback: a listed client gets `554 5.7.1`
//! naming the list, an allowlist outweighs it, a list's error code does
//! not count, verdicts are cached, and a list that does not answer holds
//! the greeting no longer than `dnsbl_timeout_ms`.

use crate::common;

use std::time::Duration;

use common::nsd::Nsd;
use common::*;

/// bl.test lists 127.0.0.2 and 127.0.0.3, and answers 127.0.0.5 with the
/// "query refused" code lists use; wl.test allowlists 127.0.0.3.
const BL: &str = "$ORIGIN bl.test.
$TTL 300
@           SOA ns.bl.test. admin.bl.test. 1 3600 600 86400 300
@           NS  ns
ns          A   127.0.0.1
2.0.0.127   A   127.0.0.2
3.0.0.127   A   127.0.0.2
5.0.0.127   A   127.255.255.254
";
const WL: &str = "$ORIGIN wl.test.
$TTL 300
@           SOA ns.wl.test. admin.wl.test. 1 3600 600 86400 300
@           NS  ns
ns          A   127.0.0.1
3.0.0.127   A   127.0.9.1
";

fn dnsbl_config(dir: &std::path::Path, nameserver: std::net::SocketAddr) -> sluice::config::Config {
    let mut cfg = untrusted_config(dir, None);
    cfg.smtpd.mynetworks = vec![net("127.0.0.9/32")];
    cfg.dns.nameservers = vec![nameserver];
    cfg.smtpd.dnsbl_sites = vec![
        "bl.test*2".parse().unwrap(),
        "wl.test=127.0.[0..255].1*-2".parse().unwrap(),
    ];
    cfg.smtpd.dnsbl_threshold = 2;
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_clients_are_refused_and_allowlists_outweigh_lists() {
    let dir = temp_dir("dnsbl");
    let nsd = Nsd::start(&dir, &[("bl.test", BL), ("wl.test", WL)]);
    let (server, addr) = start(dnsbl_config(&dir, nsd.addr)).await;

    let (mut listed, greeting) = Client::connect_from("127.0.0.2", addr).await;
    assert_eq!(
        greeting.trim_end(),
        "554 5.7.1 Service unavailable; client [127.0.0.2] blocked using bl.test"
    );
    assert_eq!(listed.replies_until_closed().await, "", "then closed");
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Reject(Reject::Dnsbl { stage, cause, list, client_ip, .. })
                if stage == "connect"
                    && cause == "dnsbl"
                    && list == "bl.test"
                    && client_ip.to_string() == "127.0.0.2"
        ))
        .await
    );

    // Listed (2) and allowlisted (-2): 0, under the threshold.
    let (_c, greeting) = Client::connect_from("127.0.0.3", addr).await;
    assert!(greeting.starts_with("220 "), "{greeting}");
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Dnsbl { client_ip, score: 0, listed_by, .. }
                if client_ip.to_string() == "127.0.0.3" && *listed_by == ["bl.test", "wl.test"]
        ))
        .await
    );
    // The list's "query refused" answer, and a client not listed at all.
    for client in ["127.0.0.5", "127.0.0.4"] {
        let (_c, greeting) = Client::connect_from(client, addr).await;
        assert!(greeting.starts_with("220 "), "{client}: {greeting}");
    }
    // mynetworks is not looked up (127.0.0.9 has no record either way,
    // so this shows only that the session goes on).
    let (_c, greeting) = Client::connect_from("127.0.0.9", addr).await;
    assert!(greeting.starts_with("220 "), "{greeting}");

    // The verdict is cached: with the lists gone, 127.0.0.2 is still
    // refused, without a lookup.
    drop(nsd);
    let (_c, greeting) = Client::connect_from("127.0.0.2", addr).await;
    assert!(greeting.starts_with("554 5.7.1"), "{greeting}");
    server.shutdown().await;
}

/// M4 of the 2026-11-27 review: on a dual-stack listener (here bound to
/// a v4-mapped address, which shows the peer as `::ffff:a.b.c.d` as
/// `[::]` does) an IPv4 client is looked up as the IPv4 address it is:
/// refused like on a v4 listener, and named as IPv4 in the reply and the
/// event (before: `220`, the list asked for 32 IPv6 nibbles).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_listener_looks_up_ipv4_clients_as_ipv4() {
    let dir = temp_dir("dnsbl-mapped");
    let nsd = Nsd::start(&dir, &[("bl.test", BL), ("wl.test", WL)]);
    let mut cfg = dnsbl_config(&dir, nsd.addr);
    cfg.smtpd.listen = vec!["[::ffff:127.0.0.1]:0".parse().unwrap()];
    let (server, addr) = start(cfg).await;
    let v4 = std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()));
    let (_c, greeting) = Client::connect_from("127.0.0.2", v4).await;
    assert_eq!(
        greeting.trim_end(),
        "554 5.7.1 Service unavailable; client [127.0.0.2] blocked using bl.test"
    );
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Reject(Reject::Dnsbl { cause, client_ip, .. })
                if cause == "dnsbl" && client_ip.to_string() == "127.0.0.2"
        ))
        .await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_does_not_answer_does_not_hold_the_greeting() {
    let dir = temp_dir("dnsbl-silent");
    // A name server that never answers, and a resolver that would wait
    // for it for 30 s.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut cfg = dnsbl_config(&dir, silent.local_addr().unwrap());
    cfg.dns.timeout_ms = 30_000;
    cfg.smtpd.dnsbl_timeout_ms = 300;
    let (server, addr) = start(cfg).await;
    let connect = Client::connect_from("127.0.0.2", addr);
    let (_c, greeting) = tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("greeting held past dnsbl_timeout_ms");
    assert!(greeting.starts_with("220 "), "{greeting}");
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Dnsbl { client_ip, unanswered, .. }
                if client_ip.to_string() == "127.0.0.2" && *unanswered == ["bl.test", "wl.test"]
        ))
        .await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
}
