//! Postfix's DNS restrictions (issue 38, item 3), case by case against a
//! real Postfix whose DNS is a test nsd (`Postfix::start_with_dns`), all
//! in a network namespace of the test's own where 198.51.100.0/24 is
//! local (clients outside 127.0.0.0/8, whose PTRs resolvers answer
//! themselves): each case's keyword, in a restriction class chosen by the
//! recipient, sees one client address (198.51.100.N, with or without a
//! PTR, confirmed or not), HELO name, sender and recipient; Postfix's RCPT
//! reply is held to what `sluice::receive::dnscheck` decides for the same
//! case, asked directly (on a runtime inside the namespace) with a
//! resolver pointed at the same nsd, and to what a Sluice server with
//! the same lists (`sluice_config`), in the same namespace and resolving
//! through the same nsd, replies.
//!
//! Each case runs twice in one session: the class is `KEYWORD,
//! check_sender_access TAIL, permit`, where TAIL rejects the sender
//! `then-reject@…` and lets `then-permit@…` through. The two replies tell
//! every outcome apart: a pass gives 250, then TAIL's refusal; a permit
//! 250 twice; a refusal its reply twice; `defer_if_permit` its reply, then
//! TAIL's refusal; `defer_if_reject` 250, then its reply (in place of
//! TAIL's). Two instances: Postfix's defaults, and every code and
//! tempfail action changed (`CHANGED`).
//!
//! The case table ([`cases`]) is the place to add cases; [`replies`]
//! sends a case to any SMTP server.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use sluice::config::DnsConfig;
use sluice::receive::access::Reply;
use sluice::receive::dnscheck::{
    DnsCheck, DnsCheckCodes, DnsChecker, DnsList, Limits, TempfailAction,
};
use sluice::routing::dns::Dns;

use crate::common::netns::Netns;
use crate::common::nsd::Nsd;
use crate::common::postfix::{Postfix, Session};
use crate::common::temp_dir;
use crate::common::Client;

mod config;
use config::{main_cf, recipients, sluice_config};

/// The keywords, each with its argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    UnknownSender,
    UnknownRecipient,
    UnknownHelo,
    UnknownClient,
    UnknownReverse,
    Rbl(&'static str),
    Dnswl(&'static str),
    RhsblClient(&'static str),
    RhsblReverse(&'static str),
    RhsblSender(&'static str),
    RhsblHelo(&'static str),
}

impl Check {
    /// The restriction as main.cf writes it.
    fn restriction(self) -> String {
        match self {
            Check::UnknownSender => "reject_unknown_sender_domain".into(),
            Check::UnknownRecipient => "reject_unknown_recipient_domain".into(),
            Check::UnknownHelo => "reject_unknown_helo_hostname".into(),
            Check::UnknownClient => "reject_unknown_client_hostname".into(),
            Check::UnknownReverse => "reject_unknown_reverse_client_hostname".into(),
            Check::Rbl(l) => format!("reject_rbl_client {l}"),
            Check::Dnswl(l) => format!("permit_dnswl_client {l}"),
            Check::RhsblClient(l) => format!("reject_rhsbl_client {l}"),
            Check::RhsblReverse(l) => format!("reject_rhsbl_reverse_client {l}"),
            Check::RhsblSender(l) => format!("reject_rhsbl_sender {l}"),
            Check::RhsblHelo(l) => format!("reject_rhsbl_helo {l}"),
        }
    }
}

/// One conversation: what the client is and says.
struct Case {
    check: Check,
    what: &'static str,
    client: &'static str,
    helo: &'static str,
    /// The sender's domain (its local part is TAIL's).
    sender_domain: &'static str,
    /// The recipient, for `reject_unknown_recipient_domain` (others get
    /// one of `dest.test`, a relay domain, named after their class).
    rcpt: Option<&'static str>,
}

/// A client without PTR, a HELO name and a sender domain that exist.
const PLAIN: (&str, &str, &str) = ("198.51.100.20", "helo-a.test", "a.test");

fn case(check: Check, what: &'static str) -> Case {
    Case {
        check,
        what,
        client: PLAIN.0,
        helo: PLAIN.1,
        sender_domain: PLAIN.2,
        rcpt: None,
    }
}

fn cases() -> Vec<Case> {
    use Check::*;
    let client = |check, what, client| Case {
        client,
        ..case(check, what)
    };
    let helo = |check, what, helo| Case {
        helo,
        ..case(check, what)
    };
    let sender = |check, what, sender_domain| Case {
        sender_domain,
        ..case(check, what)
    };
    let rcpt = |what, rcpt| Case {
        rcpt: Some(rcpt),
        ..case(UnknownRecipient, what)
    };
    vec![
        sender(UnknownSender, "MX only", "mx.test"),
        sender(UnknownSender, "A only", "a.test"),
        sender(UnknownSender, "AAAA only", "aaaa.test"),
        sender(UnknownSender, "NXDOMAIN", "nx.test"),
        sender(UnknownSender, "no MX/A/AAAA (NODATA)", "txtonly.test"),
        sender(UnknownSender, "null MX", "nullmx.test"),
        sender(UnknownSender, "MX to an invalid name", "badmx.test"),
        sender(UnknownSender, "MX to a numeric name", "nummx.test"),
        sender(UnknownSender, "SERVFAIL", "x.fail.test"),
        sender(UnknownSender, "no answer (timeout)", "x.silent.test"),
        sender(UnknownSender, "address literal", "[192.0.2.1]"),
        rcpt("MX only", "u@mx.test"),
        rcpt("NXDOMAIN", "u@nx.test"),
        rcpt("NODATA", "u@txtonly.test"),
        rcpt("null MX", "u@nullmx.test"),
        rcpt("MX to an invalid name", "u@badmx.test"),
        rcpt("SERVFAIL", "u@x.fail.test"),
        helo(UnknownHelo, "A", "helo-a.test"),
        helo(UnknownHelo, "MX only", "helo-mx.test"),
        helo(UnknownHelo, "null MX only", "helo-null.test"),
        helo(UnknownHelo, "NODATA", "helo-none.test"),
        helo(UnknownHelo, "NXDOMAIN", "helo-nx.test"),
        helo(UnknownHelo, "SERVFAIL", "helo.fail.test"),
        helo(UnknownHelo, "MX to an invalid name only", "helo-badmx.test"),
        helo(UnknownHelo, "bare address", "192.0.2.1"),
        helo(UnknownHelo, "address literal", "[192.0.2.1]"),
        client(UnknownClient, "confirmed PTR", "198.51.100.10"),
        client(UnknownClient, "PTR not confirmed", "198.51.100.11"),
        client(UnknownClient, "no PTR", "198.51.100.12"),
        client(UnknownClient, "PTR's name SERVFAIL", "198.51.100.13"),
        client(UnknownClient, "PTR's name NXDOMAIN", "198.51.100.14"),
        client(UnknownClient, "PTR with _", "198.51.100.15"),
        client(UnknownClient, "numeric PTR", "198.51.100.16"),
        client(UnknownClient, "PTR SERVFAIL", "198.51.100.17"),
        client(UnknownClient, "PTR no answer (timeout)", "198.51.100.19"),
        client(UnknownReverse, "confirmed PTR", "198.51.100.10"),
        client(UnknownReverse, "PTR not confirmed", "198.51.100.11"),
        client(UnknownReverse, "no PTR", "198.51.100.12"),
        client(UnknownReverse, "numeric PTR", "198.51.100.16"),
        client(UnknownReverse, "PTR SERVFAIL", "198.51.100.17"),
        client(Rbl("bl.test"), "listed, TXT", "198.51.100.10"),
        client(Rbl("bl.test"), "listed, no TXT", "198.51.100.11"),
        client(Rbl("bl.test"), "not listed", "198.51.100.20"),
        client(Rbl("bl.test=127.0.0.2"), "listed as .2", "198.51.100.10"),
        client(Rbl("bl.test=127.0.0.2"), "listed as .4", "198.51.100.11"),
        client(
            Rbl("bl.test=127.0.0.[3..5]"),
            "listed as .4",
            "198.51.100.11",
        ),
        client(Rbl("blfail.test"), "list SERVFAIL", "198.51.100.10"),
        client(Rbl("blfail.test"), "list SERVFAIL", "198.51.100.20"),
        client(
            Rbl("silent.test"),
            "list no answer (timeout)",
            "198.51.100.10",
        ),
        client(Dnswl("wl.test"), "listed", "198.51.100.10"),
        client(Dnswl("wl.test"), "not listed", "198.51.100.20"),
        client(Dnswl("wlfail.test"), "list SERVFAIL", "198.51.100.10"),
        client(
            RhsblClient("rhsbl.test"),
            "confirmed name listed",
            "198.51.100.18",
        ),
        client(
            RhsblClient("rhsbl.test"),
            "unconfirmed name listed",
            "198.51.100.11",
        ),
        client(
            RhsblClient("rhsbl.test"),
            "confirmed name not listed",
            "198.51.100.10",
        ),
        client(RhsblClient("rhfail.test"), "list SERVFAIL", "198.51.100.18"),
        client(
            RhsblReverse("rhsbl.test"),
            "unconfirmed name listed",
            "198.51.100.11",
        ),
        client(
            RhsblReverse("rhsbl.test"),
            "name not listed",
            "198.51.100.10",
        ),
        client(RhsblReverse("rhsbl.test"), "no PTR", "198.51.100.12"),
        sender(RhsblSender("rhsbl.test"), "listed, two TXT", "spam.test"),
        sender(RhsblSender("rhsbl.test"), "not listed", "a.test"),
        sender(RhsblSender("rhsbl.test"), "address literal", "[192.0.2.1]"),
        sender(RhsblSender("rhfail.test"), "list SERVFAIL", "spam.test"),
        helo(RhsblHelo("rhsbl.test"), "listed", "badhelo.test"),
        helo(RhsblHelo("rhsbl.test"), "not listed", "helo-a.test"),
        helo(RhsblHelo("rhsbl.test"), "address literal", "[192.0.2.1]"),
    ]
}

const SOA: &str = "$TTL 60\n@ SOA ns.test. hostmaster.test. 1 3600 600 86400 60\n@ NS ns.test.\n";

/// The zones: `test` (domains, HELO names, the lists), the PTRs of
/// 198.51.100.0/24, and zones without data (nsd answers SERVFAIL for
/// them): `fail.test`, the lists `blfail.test`, `wlfail.test`,
/// `rhfail.test`, and the PTR of 198.51.100.17. Names under `silent.test`
/// and the PTR of 198.51.100.19 get no answer at all ([`silent_front`]).
fn zones() -> Vec<(&'static str, String)> {
    let test = format!(
        "$ORIGIN test.\n{SOA}ns A 127.0.0.1\n\
         mx MX 10 mail.mx\n\
         a A 192.0.2.10\n\
         aaaa AAAA 2001:db8::10\n\
         txtonly TXT \"no mail\"\n\
         nullmx MX 0 .\n\
         badmx MX 10 -bad.test.\n\
         nummx MX 10 1.2.3.4.\n\
         helo-a A 192.0.2.20\n\
         helo-mx MX 10 mail.mx\n\
         helo-null MX 0 .\n\
         helo-none TXT \"no address\"\n\
         helo-badmx MX 10 -bad.test.\n\
         good A 198.51.100.10\n\
         liar A 198.51.100.99\n\
         under_score A 198.51.100.15\n\
         listed A 198.51.100.18\n\
         10.100.51.198.bl A 127.0.0.2\n\
         10.100.51.198.bl TXT \"Listed; see http://bl.test/?198.51.100.10\"\n\
         11.100.51.198.bl A 127.0.0.4\n\
         10.100.51.198.wl A 127.0.10.1\n\
         listed.test.rhsbl A 127.0.0.2\n\
         liar.test.rhsbl A 127.0.0.2\n\
         liar.test.rhsbl TXT \"liar\"\n\
         spam.test.rhsbl A 127.0.0.2\n\
         spam.test.rhsbl TXT \"first\\009reason\"\n\
         spam.test.rhsbl TXT \"second reason\"\n\
         badhelo.test.rhsbl A 127.0.0.2\n"
    );
    let ptr = format!(
        "$ORIGIN 100.51.198.in-addr.arpa.\n{SOA}\
         10 PTR good.test.\n\
         11 PTR liar.test.\n\
         13 PTR host.fail.test.\n\
         14 PTR nx-forward.test.\n\
         15 PTR under_score.test.\n\
         16 PTR 1.2.3.4.\n\
         18 PTR listed.test.\n"
    );
    vec![
        ("test", test),
        ("100.51.198.in-addr.arpa", ptr),
        ("fail.test", String::new()),
        ("blfail.test", String::new()),
        ("wlfail.test", String::new()),
        ("rhfail.test", String::new()),
        ("17.100.51.198.in-addr.arpa", String::new()),
    ]
}

/// The second instance's codes and actions: every one changed.
const CHANGED: DnsCheckCodes = DnsCheckCodes {
    unknown_address_reject_code: 550,
    unknown_client_reject_code: 551,
    unknown_hostname_reject_code: 552,
    maps_rbl_reject_code: 553,
    unknown_address_tempfail_action: TempfailAction::Defer,
    unknown_helo_hostname_tempfail_action: TempfailAction::Defer,
};

/// What a RCPT reply was: taken, TAIL's refusal, or another reply.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Taken,
    Tail,
    Reply(Reply),
}

/// Postfix's outcome, read from the two replies (see the head comment).
fn outcome(first: &Seen, second: &Seen) -> String {
    match (first, second) {
        (Seen::Taken, Seen::Tail) => "pass".into(),
        (Seen::Taken, Seen::Taken) => "permit".into(),
        // (The texts may name the sender, which differs.)
        (Seen::Reply(a), Seen::Reply(b)) if a.code == b.code => format!("reject {}", show(a)),
        (Seen::Reply(a), Seen::Tail) => format!("defer_if_permit {}", show(a)),
        (Seen::Taken, Seen::Reply(b)) => format!("defer_if_reject {}", show(b)),
        (a, b) => format!("unexpected {a:?} then {b:?}"),
    }
}

fn show(r: &Reply) -> String {
    format!(
        "{} {} {}",
        r.code,
        r.enhanced.as_deref().unwrap_or("-"),
        r.text
    )
}

/// What the two replies must be for our outcomes (with TAIL permitting,
/// then rejecting).
fn expected(permitting: &DnsCheck, rejecting: &DnsCheck) -> (Seen, Seen) {
    let first = match permitting {
        DnsCheck::Pass | DnsCheck::Permit | DnsCheck::DeferIfReject(_) => Seen::Taken,
        DnsCheck::Reject(r) | DnsCheck::Defer(r) | DnsCheck::DeferIfPermit(r) => {
            Seen::Reply(r.clone())
        }
    };
    let second = match rejecting {
        DnsCheck::Pass | DnsCheck::DeferIfPermit(_) => Seen::Tail,
        DnsCheck::Permit => Seen::Taken,
        DnsCheck::Reject(r) | DnsCheck::Defer(r) | DnsCheck::DeferIfReject(r) => {
            Seen::Reply(r.clone())
        }
    };
    (first, second)
}

/// Our outcome for `case` with `sender`.
async fn ours(checker: &DnsChecker, case: &Case, sender: &str, rcpt: &str) -> DnsCheck {
    let ip: IpAddr = case.client.parse().unwrap();
    let names = checker.client_names(ip).await;
    let list = |l: &str| l.parse::<DnsList>().unwrap();
    match case.check {
        Check::UnknownSender => checker.unknown_sender_domain(sender).await,
        Check::UnknownRecipient => checker.unknown_recipient_domain(rcpt).await,
        Check::UnknownHelo => checker.unknown_helo_hostname(case.helo).await,
        Check::UnknownClient => checker.unknown_client_hostname(&names, ip),
        Check::UnknownReverse => checker.unknown_reverse_client_hostname(&names, ip),
        Check::Rbl(l) => checker.rbl_client(&list(l), ip).await,
        Check::Dnswl(l) => checker.dnswl_client(&list(l), ip).await,
        Check::RhsblClient(l) => checker.rhsbl_client(&list(l), &names).await,
        Check::RhsblReverse(l) => checker.rhsbl_reverse_client(&list(l), &names).await,
        Check::RhsblSender(l) => checker.rhsbl_sender(&list(l), sender).await,
        Check::RhsblHelo(l) => checker.rhsbl_helo(&list(l), case.helo).await,
    }
}

/// One case's two transactions with the SMTP server at `server` (Postfix
/// here; any server configured with the same classes and TAIL).
async fn replies(server: SocketAddr, case: &Case, rcpt: &str) -> (Seen, Seen) {
    let (client, greeting) = Client::connect_from(case.client, server).await;
    assert!(greeting.starts_with("220 "), "{greeting}");
    let mut session = Session { client };
    let ehlo = session.cmd(&format!("EHLO {}", case.helo)).await;
    assert_eq!(ehlo.code, 250, "EHLO: {ehlo:?}");
    let mut seen = Vec::new();
    for local in ["then-permit", "then-reject"] {
        let sender = format!("{local}@{}", case.sender_domain);
        let mail = session.cmd(&format!("MAIL FROM:<{sender}>")).await;
        assert_eq!(mail.code, 250, "MAIL: {mail:?}");
        let reply = session.cmd(&format!("RCPT TO:<{rcpt}>")).await;
        let tail = format!("<{sender}>: Sender address rejected: then");
        seen.push(match reply {
            r if r.code == 250 => Seen::Taken,
            r if r.code == 554 && r.text == tail => Seen::Tail,
            r => Seen::Reply(Reply {
                code: r.code,
                enhanced: r.enhanced,
                text: r.text,
            }),
        });
        let rset = session.cmd("RSET").await;
        assert_eq!(rset.code, 250, "RSET: {rset:?}");
    }
    (seen[0].clone(), seen[1].clone())
}

/// Where the resolvers ask (a [`silent_front`]), and where nsd answers,
/// inside the namespace.
const NAMESERVER: &str = "198.51.100.53:53";
const NSD: &str = "198.51.100.54:53";

/// Names nothing answers for: queries for them are dropped.
fn silent(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.ends_with("silent.test.") || name == "19.100.51.198.in-addr.arpa."
}

/// A UDP front for nsd at `listen`: each query is relayed to `upstream`
/// and its answer back, except queries for [`silent`] names, which get
/// no answer at all (a resolver's timeout). Runs until the runtime ends.
async fn silent_front(listen: SocketAddr, upstream: SocketAddr) {
    use hickory_resolver::proto::op::Message;
    let socket = Arc::new(tokio::net::UdpSocket::bind(listen).await.unwrap());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, client)) = socket.recv_from(&mut buf).await {
            let query = buf[..n].to_vec();
            let dropped = Message::from_vec(&query)
                .ok()
                .and_then(|m| m.queries.first().map(|q| silent(&q.name().to_ascii())))
                .unwrap_or(true);
            if dropped {
                continue;
            }
            let socket = socket.clone();
            tokio::spawn(async move {
                let relay = tokio::net::UdpSocket::bind((upstream.ip(), 0))
                    .await
                    .unwrap();
                relay.send_to(&query, upstream).await.unwrap();
                let mut answer = vec![0u8; 4096];
                let wait = std::time::Duration::from_secs(2);
                if let Ok(Ok(n)) = tokio::time::timeout(wait, relay.recv(&mut answer)).await {
                    let _ = socket.send_to(&answer[..n], client).await;
                }
            });
        }
    });
}

#[test]
fn dns_restrictions_decide_as_postfix_decides() {
    let dir = temp_dir("restrict_dns");
    let netns = Netns::create("198.51.100.0/24");
    let zones = zones();
    let zone_refs: Vec<(&str, &str)> = zones.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let nsd = Nsd::start_in(&netns, NSD.parse().unwrap(), &dir, &zone_refs);
    let mut differences = Vec::new();
    for codes in [DnsCheckCodes::default(), CHANGED] {
        // Every socket of the sessions and of our resolver is made on
        // this one thread, inside the namespace.
        differences.extend(netns.within(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let nameserver: SocketAddr = NAMESERVER.parse().unwrap();
                silent_front(nameserver, nsd.addr).await;
                run_cases(&netns, nameserver, codes).await
            })
        }));
    }
    drop(nsd);
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// Every case against an instance with `codes`, and against our checks
/// with the same codes: the rows that differ.
async fn run_cases(netns: &Netns, nameserver: SocketAddr, codes: DnsCheckCodes) -> Vec<String> {
    let cases = cases();
    let mut classes: Vec<String> = Vec::new();
    for c in &cases {
        if !classes.contains(&c.check.restriction()) {
            classes.push(c.check.restriction());
        }
    }
    let (rcpts, table) = recipients(&cases, &classes);
    let files = [
        ("classes", table.as_str()),
        ("tail", "then-reject@ REJECT then\n"),
    ];
    let cf = main_cf(&codes, &classes);
    let cf: Vec<(&str, &str)> = cf.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let pf = Postfix::start_with_dns(&files, &cf, "", nameserver.ip(), Some(netns));
    let dir = temp_dir("restrict_dns-sluice");
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let (server, sluice) =
        crate::common::start(sluice_config(&dir, nameserver, &codes, &classes)).await;
    let dns = Dns::new(&DnsConfig {
        nameservers: vec![nameserver],
        // (Silence costs Postfix a second a query; ours need not wait as
        // long to decide the same.)
        timeout_ms: 300,
        attempts: 1,
        trust_anchor_file: None,
    })
    .unwrap();
    let checker = DnsChecker::new(Arc::new(dns), codes, Limits::default());
    let mut differences = Vec::new();
    for (case, rcpt) in cases.iter().zip(&rcpts) {
        let got = replies(pf.addr, case, rcpt).await;
        let permitting = format!("then-permit@{}", case.sender_domain);
        let rejecting = format!("then-reject@{}", case.sender_domain);
        let want = expected(
            &ours(&checker, case, &permitting, rcpt).await,
            &ours(&checker, case, &rejecting, rcpt).await,
        );
        let row = format!(
            "{} | {} | {} | {}",
            case.check.restriction(),
            case.what,
            if codes == CHANGED {
                "changed"
            } else {
                "defaults"
            },
            outcome(&got.0, &got.1)
        );
        println!("{row}");
        if got != want {
            differences.push(format!("{row}\n    ours: {}", outcome(&want.0, &want.1)));
        }
        // And Sluice's own sessions, with the same lists.
        let mine = replies(sluice, case, rcpt).await;
        if mine != got {
            differences.push(format!("{row}\n    Sluice: {}", outcome(&mine.0, &mine.1)));
        }
    }
    drop(server);
    differences
}
