//! Mail that would loop back to Sluice (security review H2): a next hop
//! found in DNS never leads to our own listening address (5.4.6, as
//! Postfix), and a message that already passed through us is not
//! DKIM-signed because of its source address.

use crate::common;

use common::nsd::Nsd;
use common::*;
use sluice::tools::keygen::{keygen, Algorithm};

fn signing_key(dir: &std::path::Path) -> sluice::config::DkimKeyConfig {
    let key = dir.join("ed.pem");
    keygen(Algorithm::Ed25519, "ours.test", "s1", &key).unwrap();
    dkim_key("ours.test", "s1", key)
}

fn message(to: &str, extra: &str) -> String {
    format!(
        "{extra}From: <ceo@ours.test>\r\nTo: <{to}>\r\nSubject: loop\r\nMessage-ID: <{to}@ours.test>\r\n\r\nHello.\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mx_pointing_back_at_us_bounces_5_4_6_and_nothing_is_signed_twice() {
    let dir = temp_dir("loop-mx");
    // Sluice and the inside sink share a port (the MX port) on two
    // loopback addresses: the sink takes a free one on 127.0.0.2 first.
    // back.loop.test's MX is Sluice itself; inside.loop.test's is a sink
    // on another loopback address (allowed by the tests' allow_mx_networks).
    let zone = "$ORIGIN loop.test.\n$TTL 300\n@ SOA ns.loop.test. admin.loop.test. 1 3600 600 86400 300\n\
                @ NS ns\nns A 127.0.0.1\nback MX 10 mx\nmx A 127.0.0.1\ninside MX 10 in\nin A 127.0.0.2\n";
    let nsd = Nsd::start(&dir, &[("loop.test", zone)]);
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.dkim.keys.push(signing_key(&dir));
    // (If 127.0.0.1 has that port taken, the start fails: another pair.)
    let mut started = None;
    for _ in 0..5 {
        let inside = sink_on("127.0.0.2:0".parse().unwrap()).await;
        let port = inside.addr.port();
        cfg.smtpd.listen = vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))];
        cfg.delivery.mx_port = port;
        if let Ok(server) = sluice::daemon::Server::start(cfg.clone()).await {
            started = Some((server, inside));
            break;
        }
    }
    let (server, inside) = started.expect("a port free on both addresses");
    let addr = server.addrs[0];
    let mut c = Client::ready(addr).await;
    for to in ["x@back.loop.test", "y@inside.loop.test"] {
        let r = c.message("ceo@ours.test", &[to], &message(to, "")).await;
        assert!(r.starts_with("250"), "{to}: {r}");
    }
    assert!(
        wait_until(15, || inside.count() == 1).await,
        "an allowed internal MX is used"
    );
    assert!(
        wait_logged(15, &dir, |e| is_delivery(e, "", "bounced", "5.4.6", "")
            && matches!(e, Event::Delivery { to, .. } if to.ends_with("@back.loop.test")))
        .await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    let log = read_log(&dir);
    assert_eq!(
        count_logged(&dir, |e| matches!(
            e,
            Event::Connect { client_ip, .. } if client_ip.to_string() == "127.0.0.1"
        )),
        1,
        "Sluice never connected to itself: {log}"
    );
    assert_eq!(
        count_logged(&dir, |e| matches!(e, Event::DkimSigned { .. })),
        2,
        "each message signed once, on the way in"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_carrying_our_own_trace_is_not_signed_for_its_address_alone() {
    let dir = temp_dir("loop-trace");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.dkim.keys.push(signing_key(&dir));
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    // Our own Received: (hostname mx.test), as a copy that went round.
    let looped = "Received: from evil.test ([192.0.2.1])\r\n\tby mx.test (Sluice) with ESMTP id 1A2B3C;\r\n\tSun, 22 Nov 2026 10:00:00 +0000\r\n";
    for (to, extra) in [("fresh@dest.test", ""), ("looped@dest.test", looped)] {
        let r = c.message("ceo@ours.test", &[to], &message(to, extra)).await;
        assert!(r.starts_with("250"), "{to}: {r}");
    }
    assert!(wait_until(15, || sink.count() == 2).await);
    server.shutdown().await;
    let signed = |rcpt: &str| {
        let m = sink
            .messages()
            .into_iter()
            .find(|m| m.recipients[0] == rcpt)
            .unwrap();
        String::from_utf8_lossy(&m.body).contains("DKIM-Signature:")
    };
    assert!(signed("fresh@dest.test"), "mail from mynetworks is signed");
    assert!(!signed("looped@dest.test"), "a looped copy is not");
}
