//! The checks against a scripted name server (a UDP socket answering as
//! told): replies, statuses, and the bounds (one lookup per name in a
//! flood, a silent server costing at most the timeout, a large answer
//! kept small). What Postfix says in each case is tests/it/restrict_dns.rs.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::proto::op::{Message, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, MX};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};

use super::*;
use crate::config::DnsConfig;

/// A name server: `a.test` has 127.0.0.2 (after 100 ms), `many.test` 60
/// A records, `mx.test` an MX, `null.test` a null MX, `fail.test` and
/// names under it SERVFAIL, `silent.test` and names under it no answer at
/// all, anything else NXDOMAIN.
async fn server(queries: Arc<AtomicUsize>) -> SocketAddr {
    let socket = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            queries.fetch_add(1, Ordering::SeqCst);
            let socket = socket.clone();
            tokio::spawn(async move {
                if let Some(answer) = answer(&query).await {
                    let _ = socket.send_to(&answer.to_vec().unwrap(), from).await;
                }
            });
        }
    });
    addr
}

async fn answer(query: &Message) -> Option<Message> {
    let q = query.queries.first()?.clone();
    let name = q.name().to_ascii();
    let mut m = Message::response(query.metadata.id, query.metadata.op_code);
    m.metadata.authoritative = true;
    m.add_query(q.clone());
    let owner = q.name().clone();
    let a = |last: u8| {
        Record::from_rdata(
            owner.clone(),
            60,
            RData::A(A(Ipv4Addr::new(127, 0, 0, last))),
        )
    };
    let mx = |target: &str| {
        let target = Name::from_ascii(target).unwrap();
        Record::from_rdata(owner.clone(), 60, RData::MX(MX::new(10, target)))
    };
    if name.ends_with("silent.test.") {
        return None;
    }
    match (name.as_str(), q.query_type()) {
        (n, _) if n.ends_with("fail.test.") => m.metadata.response_code = ResponseCode::ServFail,
        ("a.test.", RecordType::A) => {
            tokio::time::sleep(Duration::from_millis(100)).await;
            m.add_answer(a(2));
        }
        ("many.test.", RecordType::A) => {
            m.add_answers((0..60).map(a));
        }
        ("mx.test.", RecordType::MX) => {
            m.add_answer(mx("host.test."));
        }
        ("null.test.", RecordType::MX) => {
            m.add_answer(mx("."));
        }
        ("a.test." | "many.test." | "mx.test." | "null.test.", _) => {}
        _ => m.metadata.response_code = ResponseCode::NXDomain,
    }
    Some(m)
}

async fn checker(codes: DnsCheckCodes) -> (DnsChecker, Arc<AtomicUsize>) {
    let queries = Arc::new(AtomicUsize::new(0));
    let addr = server(queries.clone()).await;
    let dns = Dns::new(&DnsConfig {
        nameservers: vec![addr],
        timeout_ms: 200,
        attempts: 1,
        ..DnsConfig::default()
    })
    .unwrap();
    let limits = Limits {
        timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    (DnsChecker::new(Arc::new(dns), codes, limits), queries)
}

fn r(code: u16, enhanced: &str, text: &str) -> Reply {
    Reply {
        code,
        enhanced: Some(enhanced.into()),
        text: text.into(),
    }
}

#[tokio::test]
async fn a_flood_of_one_name_costs_one_lookup() {
    let (checker, queries) = checker(DnsCheckCodes::default()).await;
    let lookups = &checker.lookups;
    let all = (0..50).map(|_| lookups.fact(Query::A("a.test".into())));
    let facts = futures_join_all(all).await;
    assert!(facts
        .iter()
        .all(|f| **f == Fact::V4(vec![Ipv4Addr::new(127, 0, 0, 2)])));
    assert_eq!(queries.load(Ordering::SeqCst), 1, "one query for 50 askers");
    // Kept: asking again costs nothing.
    lookups.fact(Query::A("a.test".into())).await;
    assert_eq!(queries.load(Ordering::SeqCst), 1);
    assert_eq!(lookups.pending(), 0);
}

/// Runs the futures at once (no futures crate: a JoinSet of scoped
/// borrows is not possible, so they are polled together by one select).
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let futures: Vec<_> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    let mut futures: Vec<Option<_>> = futures.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (slot, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        match done {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("polled to the end"))
        .collect()
}

#[tokio::test]
async fn silence_and_failure_are_temporary_never_a_permit() {
    let (checker, _) = checker(DnsCheckCodes::default()).await;
    let started = std::time::Instant::now();
    let got = checker.unknown_sender_domain("s@silent.test").await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the timeouts"
    );
    let want = r(
        450,
        "4.1.8",
        "<s@silent.test>: Sender address rejected: Domain not found",
    );
    assert_eq!(got, DnsCheck::DeferIfPermit(want));
    let got = checker.unknown_recipient_domain("r@fail.test").await;
    let want = r(
        450,
        "4.1.2",
        "<r@fail.test>: Recipient address rejected: Domain not found",
    );
    assert_eq!(got, DnsCheck::DeferIfPermit(want));
    let list: DnsList = "fail.test".parse().unwrap();
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    assert_eq!(checker.rbl_client(&list, ip).await, DnsCheck::Pass);
    let got = checker.dnswl_client(&list, ip).await;
    let want = r(
        450,
        "4.7.1",
        "<192.0.2.1>: Client host rejected: Service unavailable",
    );
    assert_eq!(got, DnsCheck::DeferIfReject(want));
    let names = checker.client_names("192.0.2.1".parse().unwrap()).await;
    assert_eq!(
        names,
        ClientNames::unknown(NameStatus::Perm),
        "NXDOMAIN PTR"
    );
}

#[tokio::test]
async fn codes_and_actions_follow_the_settings() {
    let codes = DnsCheckCodes {
        unknown_address_reject_code: 550,
        unknown_address_tempfail_action: TempfailAction::Defer,
        ..DnsCheckCodes::default()
    };
    let (checker, _) = checker(codes).await;
    let got = checker.unknown_sender_domain("s@nx.test").await;
    let want = r(
        550,
        "5.1.8",
        "<s@nx.test>: Sender address rejected: Domain not found",
    );
    assert_eq!(got, DnsCheck::Reject(want));
    let got = checker.unknown_recipient_domain("r@fail.test").await;
    let want = r(
        450,
        "4.1.2",
        "<r@fail.test>: Recipient address rejected: Domain not found",
    );
    assert_eq!(got, DnsCheck::Defer(want));
    let got = checker.unknown_recipient_domain("r@null.test").await;
    let text =
        "<r@null.test>: Recipient address rejected: Domain null.test does not accept mail (nullMX)";
    assert_eq!(got, DnsCheck::Reject(r(556, "5.1.10", text)));
    assert_eq!(
        checker.unknown_sender_domain("s@mx.test").await,
        DnsCheck::Pass
    );
    assert_eq!(checker.unknown_sender_domain("").await, DnsCheck::Pass);
    assert_eq!(
        checker.unknown_sender_domain("s@[192.0.2.1]").await,
        DnsCheck::Pass
    );
}

#[tokio::test]
async fn a_large_answer_is_kept_small() {
    let (checker, _) = checker(DnsCheckCodes::default()).await;
    let fact = checker.lookups.fact(Query::A("many.test".into())).await;
    match &*fact {
        Fact::V4(addrs) => assert_eq!(addrs.len(), lookup::MAX_RECORDS),
        other => panic!("{other:?}"),
    }
}

#[test]
fn replies_are_bounded_and_printable() {
    let got = reply(554, "4.7.1", format!("x\r\n{}", "y".repeat(600)));
    assert_eq!(got.enhanced.as_deref(), Some("5.7.1"));
    assert!(got.text.starts_with("x  y"));
    assert_eq!(4 + 5 + 1 + got.text.len(), 510);
    assert_eq!(expansion("a\u{e9}b"), "a__b");
}
