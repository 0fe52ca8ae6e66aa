//! MX resolution against a real authoritative server (nsd) on loopback:
//! preference order, random among equals, IPv6 and IPv4 addresses,
//! implicit MX, CNAME, null MX, and which failures are permanent.

use crate::common;

use std::time::{Duration, Instant};

use common::nsd::Nsd;
use common::*;
use sluice::config::DnsConfig;
use sluice::routing::dns::{Dns, DnsError};

const ZONE: &str = "$ORIGIN mx.test.
$TTL 300
@        SOA ns.mx.test. admin.mx.test. 1 3600 600 86400 300
@        NS  ns
ns       A   127.0.0.1
pref     MX  10 mx1.pref
pref     MX  20 mx2.pref
pref     MX  10 mx3.pref
mx1.pref A   127.0.0.11
mx2.pref A   127.0.0.12
mx3.pref A   127.0.0.13
mx3.pref AAAA ::1
implicit A   127.0.0.14
alias    CNAME implicit
null     MX  0 .
nodata   TXT \"no mail here\"
";

fn dns(nameserver: &str) -> Dns {
    Dns::new(&DnsConfig {
        nameservers: vec![nameserver.parse().unwrap()],
        timeout_ms: 500,
        attempts: 1,
        trust_anchor_file: None,
    })
    .unwrap()
}

/// A resolver for `nsd`, once nsd answers for `probe`.
async fn answering(nsd: &Nsd, probe: &str) -> Dns {
    let d = dns(&nsd.addr.to_string());
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.mail_hosts(probe).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "nsd did not answer; see {}",
            nsd.dir.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_hosts_from_a_real_authoritative_server() {
    let dir = temp_dir("dns-mx");
    let nsd = Nsd::start(&dir, &[("mx.test", ZONE)]);
    let d = answering(&nsd, "implicit.mx.test").await;
    // Preference order; the two at 10 in both orders over many lookups.
    let mut firsts = std::collections::HashSet::new();
    for _ in 0..40 {
        let hosts = d.mail_hosts("pref.mx.test").await.unwrap();
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names.len(), 3);
        assert_eq!(names[2], "mx2.pref.mx.test");
        firsts.insert(names[0].to_string());
        let mx3 = hosts.iter().find(|h| h.name == "mx3.pref.mx.test").unwrap();
        assert_eq!(
            mx3.addrs,
            vec![
                "::1".parse::<std::net::IpAddr>().unwrap(),
                "127.0.0.13".parse().unwrap()
            ]
        );
    }
    assert_eq!(
        firsts.len(),
        2,
        "equal preferences are shuffled: {firsts:?}"
    );
    // No MX: the domain itself; through a CNAME too.
    for name in ["implicit.mx.test", "alias.mx.test"] {
        let hosts = d.mail_hosts(name).await.unwrap();
        assert_eq!(hosts.len(), 1);
        assert_eq!(
            hosts[0].addrs,
            vec!["127.0.0.14".parse::<std::net::IpAddr>().unwrap()]
        );
    }
    // Definite answers are permanent.
    assert!(matches!(
        d.mail_hosts("null.mx.test").await,
        Err(DnsError::NullMx(_))
    ));
    assert!(matches!(
        d.mail_hosts("nosuch.mx.test").await,
        Err(DnsError::NoSuchDomain(_))
    ));
    assert!(matches!(
        d.mail_hosts("nodata.mx.test").await,
        Err(DnsError::NoMailHost(_))
    ));
    // A server that refuses (not its zone) or does not answer: temporary.
    let refused = d.mail_hosts("elsewhere.test").await.unwrap_err();
    assert!(!refused.is_permanent(), "{refused:?}");
    // A UDP socket that never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead = dns(&silent.local_addr().unwrap().to_string());
    let err = dead.mail_hosts("pref.mx.test").await.unwrap_err();
    assert!(!err.is_permanent(), "{err:?}");
    assert!(err.to_string().starts_with("4.4.3"), "{err}");
}

const DEST_ZONE: &str = "$ORIGIN dest.test.
$TTL 300
@        SOA ns.dest.test. admin.dest.test. 1 3600 600 86400 300
@        NS  ns
ns       A   127.0.0.1
@        MX  10 dead
@        MX  20 live
dead     A   127.0.0.2
live     A   127.0.0.1
null     MX  0 .
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_follows_mx_fails_over_and_bounces_a_null_mx() {
    let dir = temp_dir("dns-delivery");
    let nsd = Nsd::start(&dir, &[("dest.test", DEST_ZONE)]);
    let sink = recording_sink().await;
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    // MX lookup for dest.test (not bracketed), on the sink's port: the
    // first MX (127.0.0.2) refuses, the second is the sink.
    let port = sink.addr.port();
    cfg.transport.insert(
        "dest.test".into(),
        format!("smtp:dest.test:{port}").parse().unwrap(),
    );
    let (server, addr) = start(cfg).await;
    answering(&nsd, "dest.test").await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["x@dest.test"], &body("mx"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(wait_until(15, || sink.count() == 1).await);
    // A null MX is a definite no: bounced at once, not retried.
    let r = c
        .message("a@sender.test", &["y@null.dest.test"], &body("null"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(
        wait_logged(10, &dir, |e| is_delivery(
            e,
            "y@null.dest.test",
            "bounced",
            "5.1.10",
            ""
        ))
        .await
    );
    server.shutdown().await;
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::ConnectFailed(ConnectFailed::Host { host, ip, .. })
                if host == "dead.dest.test" && ip.to_string() == "127.0.0.2"
        )),
        "the first MX was tried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_mx_is_not_tried_for_every_message() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncWriteExt;
    let dir = temp_dir("dns-dead-host");
    let nsd = Nsd::start(&dir, &[("dest.test", DEST_ZONE)]);
    let sink = recording_sink().await;
    let port = sink.addr.port();
    // The first MX (127.0.0.2) answers every connection with 421.
    let busy = tokio::net::TcpListener::bind(("127.0.0.2", port))
        .await
        .unwrap();
    let tries = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = tries.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = busy.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(b"421 4.3.2 busy\r\n").await;
        }
    });
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.delivery.dead_host_secs = 60;
    cfg.delivery.connection_idle_secs = 1;
    cfg.delivery.messages_per_connection = 1;
    cfg.transport.insert(
        "dest.test".into(),
        format!("smtp:dest.test:{port}").parse().unwrap(),
    );
    let (server, addr) = start(cfg).await;
    answering(&nsd, "dest.test").await;
    let mut c = Client::ready(addr).await;
    for i in 1..=5u64 {
        let r = c
            .message(
                "a@sender.test",
                &["x@dest.test"],
                &body(&format!("dead{i}")),
            )
            .await;
        assert!(r.starts_with("250"), "{r}");
        assert!(
            wait_until(15, || sink.count() == i).await,
            "message {i} delivered"
        );
    }
    server.shutdown().await;
    assert_eq!(
        tries.load(Ordering::SeqCst),
        1,
        "the 421 host was tried once, then skipped"
    );
}

/// A scripted next hop on `ip:port`: greets, takes EHLO (no PIPELINING),
/// answers MAIL with `mail_reply`, RSET and QUIT politely. Counts MAILs.
async fn deferring_host(
    ip: &str,
    port: u16,
    mail_reply: &'static str,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
    let mails = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = mails.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let (r, mut w) = s.into_split();
                let mut lines = BufReader::new(r).lines();
                let _ = w.write_all(b"220 busy.test ESMTP\r\n").await;
                while let Ok(Some(line)) = lines.next_line().await {
                    let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
                    let reply = match verb.as_str() {
                        "EHLO" => "250-busy.test\r\n250 8BITMIME\r\n",
                        "MAIL" => {
                            seen.fetch_add(1, Ordering::SeqCst);
                            mail_reply
                        }
                        "QUIT" => "221 2.0.0 bye\r\n",
                        _ => "250 2.0.0 ok\r\n",
                    };
                    if w.write_all(reply.as_bytes()).await.is_err() || verb == "QUIT" {
                        break;
                    }
                }
            });
        }
    });
    mails
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_transaction_deferred_by_one_mx_goes_to_the_next() {
    use std::sync::atomic::Ordering;
    let dir = temp_dir("dns-4xx-failover");
    let nsd = Nsd::start(&dir, &[("dest.test", DEST_ZONE)]);
    let sink = recording_sink().await;
    let port = sink.addr.port();
    // The first MX talks, then defers every MAIL: the second must get it.
    let mails = deferring_host("127.0.0.2", port, "421 4.7.0 too busy, try later\r\n").await;
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.transport.insert(
        "dest.test".into(),
        format!("smtp:dest.test:{port}").parse().unwrap(),
    );
    let (server, addr) = start(cfg).await;
    answering(&nsd, "dest.test").await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["x@dest.test"], &body("failover"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(
        wait_until(15, || sink.count() == 1).await,
        "delivered by the second MX in the same attempt"
    );
    server.shutdown().await;
    assert_eq!(
        mails.load(Ordering::SeqCst),
        1,
        "the first MX was asked once"
    );
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Failover { peer, next: true, .. } if peer.starts_with("dead.dest.test[127.0.0.2]")
    )));
}
