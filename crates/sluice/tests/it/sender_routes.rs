//! Routes by sender and the egress of named transports (issue 40 items 2
//! and 4), held to a real Postfix 3.7: the same `relayhost`,
//! `sender_dependent_relayhost_maps`,
//! `sender_dependent_default_transport_maps` and transport table, and a
//! master.cf transport `out2` (`smtp -o smtp_helo_name=out2.example -o
//! smtp_bind_address=127.0.0.2`) that Sluice writes as
//! `[transports.out2]`. Each system delivers to three recording sinks of
//! its own; for every sender and recipient, which sink got the message,
//! from which address and with which EHLO name must be the same.
//!
//! Then Sluice's own egress pool: connections shared by weight, each
//! logged with its source (typed `Egress` events); a source address that
//! is not ours is Postfix's warning without `smtp_bind_address_enforce`
//! and a deferral with it.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::common;
use common::postfix::Postfix;
use common::*;
use sluice::config::hop::NextHop;
use sluice::config::transports::{EgressSource, TransportConfig};
use sluice_bench::sink::Sink;

/// (sender, recipient) cases: plain, extension, `@domain`, DUNNO, the
/// null sender, no entry, a default transport with and without a next
/// hop (without: the sender's relayhost, else relayhost), a transport
/// table entry with a next hop (it wins over both maps). A transport table
/// entry without one (`smtp:`) is the recipient domain in Postfix (no
/// relayhost); with no DNS here that case is `routing`'s unit test.
const CASES: &[(&str, &str)] = &[
    ("a@x.example", "r@far.test"),
    ("a+tag@x.example", "r@far.test"),
    ("c@x.example", "r@far.test"),
    ("b@x.example", "r@far.test"),
    ("", "r@far.test"),
    ("z@z.example", "r@far.test"),
    ("s@t.example", "r@far.test"),
    ("s@u.example", "r@far.test"),
    ("a@x.example", "r@tq.example"),
];

/// Where one case's message arrived: the sink (0 relayhost, 1 B, 2 C),
/// the client address, and whether the EHLO name was out2's.
type Arrival = (usize, IpAddr, bool);

struct Sinks([Sink; 3]);

impl Sinks {
    async fn start() -> Sinks {
        Sinks([
            recording_sink().await,
            recording_sink().await,
            recording_sink().await,
        ])
    }

    fn port(&self, i: usize) -> u16 {
        self.0[i].addr.port()
    }

    /// The arrival of the message whose Subject names case `i`.
    fn arrival(&self, case: usize) -> Option<Arrival> {
        let tag = format!("Subject: case {case}\r\n");
        for (i, sink) in self.0.iter().enumerate() {
            for m in sink.messages() {
                if String::from_utf8_lossy(&m.body).contains(&tag) {
                    let ip = m.peer.expect("peer recorded").ip();
                    return Some((i, ip, m.helo.ends_with("out2.example")));
                }
            }
        }
        None
    }

    fn count(&self) -> u64 {
        self.0.iter().map(Sink::count).sum()
    }
}

/// The two tables, in Postfix's syntax, pointing at `sinks`.
fn tables(sinks: &Sinks) -> (String, String) {
    let (b, c) = (sinks.port(1), sinks.port(2));
    let relay = format!(
        "a@x.example [127.0.0.1]:{b}\n@x.example [127.0.0.1]:{c}\n\
         b@x.example DUNNO\n<> [127.0.0.1]:{c}\n"
    );
    let transport = format!("@t.example out2:\n@u.example out2:[127.0.0.1]:{b}\n");
    (relay, transport)
}

fn message(from: &str, to: &str, case: usize) -> String {
    format!(
        "From: <{from}>\r\nTo: <{to}>\r\nSubject: case {case}\r\n\
         Message-ID: <case{case}@sender.test>\r\n\r\nbody\r\n"
    )
}

async fn send_all(addr: SocketAddr) {
    let mut c = Client::ready(addr).await;
    for (i, (from, to)) in CASES.iter().enumerate() {
        let r = c.message(from, &[*to], &message(from, to, i)).await;
        assert!(r.starts_with("250"), "case {i}: {r}");
    }
}

async fn arrivals(sinks: &Sinks, what: &str) -> Vec<Option<Arrival>> {
    let all = wait_until(30, || sinks.count() >= CASES.len() as u64).await;
    assert!(all, "{what}: {} of {} arrived", sinks.count(), CASES.len());
    (0..CASES.len()).map(|i| sinks.arrival(i)).collect()
}

async fn through_postfix() -> (Vec<Option<Arrival>>, String) {
    let sinks = Sinks::start().await;
    let (relay, transport) = tables(&sinks);
    let (b, c) = (sinks.port(1), sinks.port(2));
    let relayhost = format!("[127.0.0.1]:{}", sinks.port(0));
    let tt = format!("tq.example smtp:[127.0.0.1]:{c}\n");
    let _ = b;
    let postfix = Postfix::start_with(
        &[("relay", &relay), ("transport", &transport), ("tt", &tt)],
        &[
            ("default_transport", "smtp"),
            ("relay_transport", "smtp"),
            ("relayhost", &relayhost),
            ("recipient_delimiter", "+"),
            (
                "sender_dependent_relayhost_maps",
                "texthash:$config_directory/relay",
            ),
            (
                "sender_dependent_default_transport_maps",
                "texthash:$config_directory/transport",
            ),
            ("transport_maps", "texthash:$config_directory/tt"),
        ],
        "out2 unix - - n - - smtp -o smtp_helo_name=out2.example \
         -o smtp_bind_address=127.0.0.2",
    );
    send_all(postfix.addr).await;
    let got = arrivals(&sinks, "postfix").await;
    (got, postfix.maillog())
}

async fn through_sluice() -> Vec<Option<Arrival>> {
    let sinks = Sinks::start().await;
    let dir = temp_dir("sender-routes");
    std::fs::create_dir_all(&*dir).unwrap();
    let (relay, transport) = tables(&sinks);
    let (relay_file, transport_file) = (dir.join("relay"), dir.join("transport"));
    std::fs::write(&relay_file, relay).unwrap();
    std::fs::write(&transport_file, transport).unwrap();
    let relayhost = SocketAddr::from(([127, 0, 0, 1], sinks.port(0)));
    let mut cfg = config(&dir, Some(relayhost));
    cfg.recipient_delimiter = "+".into();
    let d = &mut cfg.delivery;
    d.sender_dependent_relayhost_maps = vec![format!("texthash:{}", relay_file.display())];
    d.sender_dependent_default_transport_maps =
        vec![format!("texthash:{}", transport_file.display())];
    let out2 = TransportConfig {
        smtp_helo_name: Some("out2.example".into()),
        smtp_bind_address: Some("127.0.0.2".parse().unwrap()),
        ..Default::default()
    };
    cfg.transports.insert("out2".into(), out2);
    let c = sinks.port(2);
    let tq = NextHop::parse(&format!("smtp:[127.0.0.1]:{c}")).unwrap();
    cfg.transport.insert("tq.example".into(), tq);
    let (server, addr) = start(cfg).await;
    send_all(addr).await;
    let got = arrivals(&sinks, "sluice").await;
    // Each connection through out2 was logged with its source.
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Egress { address: Some(ip), helo, .. }
            if *ip == IpAddr::from([127, 0, 0, 2]) && helo == "out2.example"
    )));
    server.shutdown().await;
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_choose_routes_and_sources_as_in_postfix() {
    let (postfix, maillog) = through_postfix().await;
    let sluice = through_sluice().await;
    let out2 = IpAddr::from([127, 0, 0, 2]);
    // Not vacuous: the cases take every sink, and out2's address and name.
    let sinks: std::collections::BTreeSet<usize> = postfix.iter().flatten().map(|a| a.0).collect();
    assert_eq!(sinks.len(), 3, "{postfix:?}");
    assert!(
        postfix.iter().flatten().any(|a| a.1 == out2 && a.2),
        "{postfix:?}"
    );
    let table: BTreeMap<usize, (&Option<Arrival>, &Option<Arrival>)> = postfix
        .iter()
        .zip(&sluice)
        .enumerate()
        .filter(|(_, (p, s))| p != s)
        .collect();
    assert!(
        table.is_empty(),
        "cases where Sluice differs (postfix, sluice): {table:?}\n{maillog}"
    );
}

/// A pool of two sources weighted 3 and 1, one message per connection.
fn pool() -> Vec<EgressSource> {
    let source = |name: &str, ip: &str, weight| EgressSource {
        name: Some(name.into()),
        bind_address: Some(ip.parse().unwrap()),
        bind_address6: None,
        helo_name: Some(format!("{name}.example")),
        weight,
    };
    vec![source("a", "127.0.0.2", 3), source("b", "127.0.0.3", 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_shares_connections_by_weight_and_logs_each_source() {
    let sink = recording_sink().await;
    let dir = temp_dir("egress-pool");
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.delivery.egress_pool = pool();
    cfg.delivery.messages_per_connection = 1;
    cfg.delivery.default_concurrency = 1;
    cfg.delivery.initial_concurrency = 1;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    for i in 0..8 {
        let r = c
            .message("s@sender.test", &["r@far.test"], &body(&format!("m{i}")))
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    assert!(
        wait_until(30, || sink.count() >= 8).await,
        "{}",
        sink.count()
    );
    let from = |ip: [u8; 4], helo: &str| {
        sink.messages()
            .iter()
            .filter(|m| m.peer.map(|p| p.ip()) == Some(IpAddr::from(ip)) && m.helo.ends_with(helo))
            .count()
    };
    let seen: Vec<_> = sink
        .messages()
        .iter()
        .map(|m| (m.peer, m.helo.clone()))
        .collect();
    assert_eq!(
        (
            from([127, 0, 0, 2], "a.example"),
            from([127, 0, 0, 3], "b.example")
        ),
        (6, 2),
        "{seen:?}"
    );
    let logged = |name: &str| {
        events_named(&dir, "egress")
            .iter()
            .filter(|e| e["source"] == name)
            .count()
    };
    // The log is written behind the deliveries: all eight lines, then count.
    wait_until(10, || logged("a") + logged("b") >= 8).await;
    assert_eq!((logged("a"), logged("b")), (6, 2));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_is_not_ours_warns_or_defers_as_postfix() {
    let sink = recording_sink().await;
    for enforce in [false, true] {
        let dir = temp_dir("egress-not-ours");
        let mut cfg = config(&dir, Some(sink.addr));
        // TEST-NET-1: never an address of this machine.
        cfg.delivery.smtp_bind_address = Some("192.0.2.1".parse().unwrap());
        cfg.delivery.smtp_bind_address_enforce = enforce;
        let (server, addr) = start(cfg).await;
        let mut c = Client::ready(addr).await;
        let r = c
            .message("s@sender.test", &["r@far.test"], &body("x"))
            .await;
        let qid = qid_of(&r);
        if enforce {
            let deferred = |e: &Event| is_delivery(e, "r@far.test", "deferred", "", "");
            assert!(
                wait_until(20, || delivery_events(&dir, &qid).iter().any(deferred)).await,
                "{:?}",
                delivery_events(&dir, &qid)
            );
            assert!(!delivered_as(&dir, &qid, "r@far.test", "sent", ""));
        } else {
            assert!(
                wait_until(20, || delivered_as(&dir, &qid, "r@far.test", "sent", "")).await,
                "{:?}",
                delivery_events(&dir, &qid)
            );
            assert!(any_logged(&dir, |e| matches!(
                e,
                Event::Egress { address: None, bind_error: Some(err), .. }
                    if err.contains("192.0.2.1")
            )));
        }
        server.shutdown().await;
    }
}
