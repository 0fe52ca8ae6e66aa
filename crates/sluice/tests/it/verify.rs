//! Address verification (issue 38, `reject_unverified_*`; Postfix's
//! verify(8)) against real next hops: a Postfix that knows its relay
//! recipients, a Dovecot LMTP server, a next hop that is down, one that
//! never answers and one whose replies hold control characters. And,
//! for the same next hop, what a real Postfix with
//! `reject_unverified_recipient` / `reject_unverified_sender` answers,
//! held to what Sluice with the same restriction lists answers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::config::services::ServiceAddr;
use sluice::config::Config;
use sluice::deliver::smtp::{Command, Prober};
use sluice::deliver::verify::{Kind, Unknown, Verifier, VerifySettings, VerifyStatus};
use sluice::log::Logger;
use sluice::receive::restrict::unverified::{verdict, Verdict};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::common::dovecot::{Dovecot, User};
use crate::common::postfix::{Postfix, Reply as PostfixReply};
use crate::common::{config, reserve, temp_dir, wait_until, NextHop};

/// A next hop that knows `known@b.test` only (550 5.1.1 for any other
/// b.test address).
fn next_hop() -> Postfix {
    Postfix::start_with(
        &[("rcpts", "known@b.test OK\n")],
        &[
            ("myhostname", "hop.test"),
            ("mydomain", "hop.test"),
            ("relay_domains", "b.test"),
            ("relay_recipient_maps", "texthash:$config_directory/rcpts"),
        ],
        "",
    )
}

/// A configuration routing `routes` (domain, next hop) by the transport
/// table.
fn routed(dir: &std::path::Path, routes: &[(&str, NextHop)]) -> Config {
    let mut cfg = config(dir, None);
    for (domain, hop) in routes {
        cfg.transport.insert(domain.to_string(), hop.clone());
    }
    cfg
}

/// Probes answer within a poll window of 10 s (they end sooner).
fn settings() -> VerifySettings {
    VerifySettings {
        poll_count: 10,
        poll_delay_secs: 1,
        ..VerifySettings::default()
    }
}

fn verifier(cfg: &Config, settings: VerifySettings) -> Verifier {
    let (mailboxes, router) = sluice::daemon::routing(cfg).unwrap();
    let prober = Prober::standalone(Arc::new(cfg.clone()), Logger::disabled()).unwrap();
    Verifier::new(settings, router, mailboxes, prober, &cfg.data_dir)
}

/// SMTP sessions the Postfix next hop has seen begin.
fn connections(p: &Postfix) -> usize {
    p.maillog().matches("]: connect from ").count()
}

fn disconnections(p: &Postfix) -> usize {
    p.maillog().matches("]: disconnect from ").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_postfix_decides_and_nothing_is_delivered_and_answers_outlive_a_restart() {
    let dir = temp_dir("verify-postfix");
    let hop = next_hop();
    let cfg = routed(&dir, &[("b.test", NextHop::to_addr(hop.addr))]);
    let v = verifier(&cfg, settings());

    assert_eq!(
        v.status("known@b.test", Kind::Recipient).await,
        VerifyStatus::Deliverable
    );
    let VerifyStatus::Undeliverable(why) = v.status("nobody@b.test", Kind::Recipient).await else {
        panic!("nobody@b.test is not undeliverable");
    };
    assert_eq!(why.code(), 550);
    assert_eq!(
        why.enhanced().map(|e| e.to_string()).as_deref(),
        Some("5.1.1")
    );
    assert_eq!(why.command(), Some(Command::Rcpt));
    assert!(
        why.relay().is_some_and(|r| r.contains("127.0.0.1")),
        "{why:?}"
    );
    // Many asks at once for a new address: one probe.
    let mut asks = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let v = v.clone();
        asks.spawn(async move { v.status("Other@B.test", Kind::Sender).await });
    }
    while let Some(answer) = asks.join_next().await {
        assert!(matches!(answer.unwrap(), VerifyStatus::Undeliverable(_)));
    }
    assert_eq!(v.probes_started(), 3);

    // The next hop saw three sessions, each without DATA: nothing queued.
    assert!(
        wait_until(10, || disconnections(&hop) == 3).await,
        "{}",
        hop.maillog()
    );
    let log = hop.maillog();
    assert_eq!(connections(&hop), 3, "{log}");
    // (Postfix opens a queue file at an accepted RCPT: `client=`, and
    // drops it at QUIT: never a `message-id=`.)
    let sessions = log.lines().filter(|l| l.contains("disconnect from"));
    assert!(sessions.clone().all(|l| !l.contains(" data=")), "{log}");
    assert_eq!(
        sessions.filter(|l| l.contains(" rcpt=1 ")).count(),
        1,
        "{log}"
    );
    assert!(!log.contains("message-id="), "{log}");
    assert!(hop.deliveries().is_empty(), "{log}");

    // A new verifier on the same directory answers from the file.
    drop(v);
    let again = verifier(&cfg, settings());
    assert_eq!(
        again.status("known@b.test", Kind::Recipient).await,
        VerifyStatus::Deliverable
    );
    let VerifyStatus::Undeliverable(cached) = again.status("nobody@b.test", Kind::Sender).await
    else {
        panic!("the undeliverable answer was not kept");
    };
    assert_eq!(cached, why);
    assert_eq!(again.probes_started(), 0);
    // Stale at once: still given, and not probed again within 1000 s of
    // the last probe (as Postfix's verify).
    let stale = verifier(
        &cfg,
        VerifySettings {
            positive_refresh_secs: 0,
            negative_refresh_secs: 0,
            ..settings()
        },
    );
    let known = stale.status("known@b.test", Kind::Recipient).await;
    assert_eq!(known, VerifyStatus::Deliverable);
    let nobody = stale.status("nobody@b.test", Kind::Recipient).await;
    assert!(matches!(nobody, VerifyStatus::Undeliverable(_)));
    assert_eq!(stale.probes_started(), 0);
    assert_eq!(connections(&hop), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_domains_are_answered_from_the_tables_without_a_probe() {
    let dir = temp_dir("verify-local");
    std::fs::write(dir.join("mailboxes"), "a@local.test a/Maildir/\n").unwrap();
    std::fs::write(dir.join("aliases"), "null@local.test discard\n").unwrap();
    // Anything probed would go to a next hop that is down.
    let down = reserve();
    let mut cfg = config(&dir, Some(down.addr));
    cfg.local.domains = vec!["local.test".parse().unwrap()];
    cfg.local.mailbox_table = Some("mailboxes".into());
    cfg.local.alias_table = Some("aliases".into());
    for name in ["mailboxes", "aliases"] {
        let mut t: sluice::config::tables::TableConfig =
            toml::from_str("kind = \"static\"").unwrap();
        t.path = Some(dir.join(name));
        cfg.tables.insert(name.into(), t);
    }
    let v = verifier(&cfg, settings());
    for known in ["a@local.test", "null@local.test"] {
        let status = v.status(known, Kind::Recipient).await;
        assert_eq!(status, VerifyStatus::Deliverable, "{known}");
    }
    let VerifyStatus::Undeliverable(why) = v.status("zz@local.test", Kind::Recipient).await else {
        panic!("zz@local.test is not undeliverable");
    };
    assert_eq!(why.code(), 550);
    assert_eq!(
        why.enhanced().map(|e| e.to_string()).as_deref(),
        Some("5.1.1")
    );
    assert_eq!(why.relay(), None);
    assert_eq!(v.probes_started(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dovecot_lmtp_by_the_transport_table() {
    let dir = temp_dir("verify-lmtp");
    let users = [User {
        name: "alice",
        quota: None,
    }];
    let dovecot = Dovecot::start(&dir, &users);
    let lmtp = NextHop::Lmtp(ServiceAddr::Unix(dovecot.socket.clone()));
    let cfg = routed(&dir, &[("local.test", lmtp)]);
    let v = verifier(&cfg, settings());
    assert_eq!(
        v.status("alice@local.test", Kind::Recipient).await,
        VerifyStatus::Deliverable
    );
    let VerifyStatus::Undeliverable(why) = v.status("nobody@local.test", Kind::Recipient).await
    else {
        panic!("nobody@local.test is not undeliverable");
    };
    assert_eq!((why.code(), why.command()), (550, Some(Command::Rcpt)));
    assert_eq!(
        why.enhanced().map(|e| e.to_string()).as_deref(),
        Some("5.1.1")
    );
    assert!(dovecot.messages("alice").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_hop_that_is_down_is_unknown_and_not_cached() {
    let dir = temp_dir("verify-down");
    let down = reserve();
    let cfg = routed(&dir, &[("c.test", NextHop::to_addr(down.addr))]);
    let v = verifier(&cfg, settings());
    let first = v.status("u@c.test", Kind::Recipient).await;
    let VerifyStatus::Unknown(Unknown::Failed(why)) = &first else {
        panic!("not a temporary failure: {first:?}");
    };
    assert_eq!(why.code() / 100, 4, "{why:?}");
    // Not cached: the next ask probes again, a new verifier too.
    let second = v.status("u@c.test", Kind::Recipient).await;
    assert!(matches!(second, VerifyStatus::Unknown(Unknown::Failed(_))));
    assert_eq!(v.probes_started(), 2);
    let again = verifier(&cfg, settings());
    let third = again.status("u@c.test", Kind::Recipient).await;
    assert!(matches!(third, VerifyStatus::Unknown(Unknown::Failed(_))));
    assert_eq!(again.probes_started(), 1);
    let Verdict::DeferIfPermit(reply) = verdict(&first, Kind::Recipient, "u@c.test", &settings())
    else {
        panic!("not defer_if_permit");
    };
    assert_eq!(
        (reply.code, reply.enhanced.as_deref()),
        (450, Some("4.1.1"))
    );
}

/// A next hop that takes connections and never says a word; returns its
/// address and a count of connections taken.
async fn silent_hop() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = taken.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(s);
        }
    });
    (addr, taken)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_hop_that_never_answers_is_bounded_by_the_probe_timeout() {
    let dir = temp_dir("verify-silent");
    let (addr, taken) = silent_hop().await;
    let cfg = routed(&dir, &[("d.test", NextHop::to_addr(addr))]);
    // Polls for at most 1 s: the first ask answers "in progress".
    let quick = VerifySettings {
        poll_count: 1,
        poll_delay_secs: 1,
        probe_timeout_secs: 2,
        ..VerifySettings::default()
    };
    let v = verifier(&cfg, quick);
    let first = v.status("u@d.test", Kind::Recipient).await;
    assert_eq!(first, VerifyStatus::Unknown(Unknown::Pending));
    let Verdict::DeferIfPermit(reply) = verdict(&first, Kind::Recipient, "u@d.test", v.settings())
    else {
        panic!("not defer_if_permit");
    };
    assert!(reply
        .text
        .ends_with("unverified address: Address verification in progress"));
    // The probe gives up (the timeout, not the 300 s command timeout).
    assert!(
        wait_until(30, || v.probes_pending() == 0).await,
        "probe never ended"
    );
    assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 1);
    // A poll window longer than the probe's limit sees the timeout.
    let patient = VerifySettings {
        poll_count: 20,
        poll_delay_secs: 1,
        probe_timeout_secs: 1,
        ..VerifySettings::default()
    };
    let v = verifier(&cfg, patient);
    let status = v.status("u@d.test", Kind::Recipient).await;
    let VerifyStatus::Unknown(Unknown::Failed(why)) = &status else {
        panic!("not a timeout: {status:?}");
    };
    assert_eq!(why.text(), "probe timed out after 1 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_and_pending_probes_are_bounded() {
    let dir = temp_dir("verify-bounds");
    let (addr, taken) = silent_hop().await;
    let cfg = routed(&dir, &[("d.test", NextHop::to_addr(addr))]);
    let bounded = VerifySettings {
        poll_count: 0,
        max_concurrent_probes: 1,
        pending_request_limit: 2,
        probe_timeout_secs: 4,
        ..VerifySettings::default()
    };
    let v = verifier(&cfg, bounded);
    for address in ["a@d.test", "b@d.test", "c@d.test"] {
        let status = v.status(address, Kind::Recipient).await;
        assert_eq!(status, VerifyStatus::Unknown(Unknown::Pending), "{address}");
    }
    // The third found two pending: no probe.
    assert_eq!(v.probes_started(), 2);
    assert!(wait_until(10, || taken.load(std::sync::atomic::Ordering::SeqCst) == 1).await);
    // One connected, the other waiting for its slot.
    assert_eq!((v.probes_connected(), v.probes_pending()), (1, 2));
    assert!(
        wait_until(30, || v.probes_pending() == 0).await,
        "probes never ended"
    );
    assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(v.probes_connected(), 0);
}

/// A next hop whose refusal holds control characters.
async fn hostile_hop() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (r, mut w) = s.into_split();
                let mut lines = BufReader::new(r).lines();
                w.write_all(b"220 hostile.test ESMTP\r\n").await.unwrap();
                while let Ok(Some(line)) = lines.next_line().await {
                    let reply: &[u8] = match line.get(..4).map(str::to_ascii_uppercase) {
                        Some(v) if v == "RCPT" => {
                            b"550 5.1.1 gone\x1b]0;owned\x07 \x00\x7f\x0b end\r\n"
                        }
                        Some(v) if v == "QUIT" => b"221 bye\r\n",
                        _ => b"250 ok\r\n",
                    };
                    if w.write_all(reply).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_hops_control_characters_never_reach_a_reply() {
    let dir = temp_dir("verify-hostile");
    let addr = hostile_hop().await;
    let cfg = routed(&dir, &[("e.test", NextHop::to_addr(addr))]);
    let v = verifier(&cfg, settings());
    let status = v.status("u@e.test", Kind::Recipient).await;
    let VerifyStatus::Undeliverable(why) = &status else {
        panic!("the 550 was not taken: {status:?}");
    };
    assert!(!why.describe().chars().any(char::is_control), "{why:?}");
    let s = settings();
    for kind in [Kind::Recipient, Kind::Sender] {
        let reply = match verdict(&status, kind, "u@e.test", &s) {
            Verdict::Reject(r) | Verdict::Defer(r) | Verdict::DeferIfPermit(r) => r,
            Verdict::Pass => panic!("passed"),
        };
        assert!(!reply.text.chars().any(char::is_control), "{reply:?}");
    }
    // The words around the control characters are kept.
    assert!(
        why.text().contains("gone") && why.text().ends_with("end"),
        "{why:?}"
    );
}

/// Asks `p` for a RCPT reply (from `sender`) until its verification is no
/// longer in progress.
async fn settled(p: &Postfix, sender: &str, rcpt: &str) -> PostfixReply {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut s = p.session().await;
    loop {
        let reply = s.rcpt_replies(sender, &[rcpt.to_string()]).await.remove(0);
        if !reply.text.contains("in progress") || Instant::now() > deadline {
            return reply;
        }
    }
}

/// The words of a reply up to its reason's details: `<a@b>: Recipient
/// address rejected: unverified address`.
fn head(text: &str) -> &str {
    let start = text
        .find("rejected: ")
        .map_or(0, |i| i + "rejected: ".len());
    match text[start..].find(": ") {
        Some(end) => &text[..start + end],
        None => text,
    }
}

/// As [`settled`], from Sluice listening at `addr`.
async fn settled_at(addr: SocketAddr, sender: &str, rcpt: &str) -> PostfixReply {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = crate::common::Client::ready(addr).await;
        let mail = c.cmd(&format!("MAIL FROM:<{sender}>")).await;
        assert!(mail.starts_with("250"), "{mail}");
        let reply = PostfixReply::parse(&c.cmd(&format!("RCPT TO:<{rcpt}>")).await);
        if !reply.text.contains("in progress") || Instant::now() > deadline {
            return reply;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_are_a_real_postfixs_for_the_same_next_hop() {
    differential(450).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_are_a_real_postfixs_with_a_5xx_reject_code() {
    differential(550).await;
}

/// The cases below through a Postfix with `reject_unverified_*` and
/// `unverified_*_reject_code = reject_code`, and through Sluice with the
/// same lists and code, both verifying at the same next hops: the same
/// RCPT reply.
async fn differential(reject_code: u16) {
    let dir = temp_dir("verify-differential");
    let code = reject_code.to_string();
    let hop = next_hop();
    let down = reserve();
    let transport = format!(
        "b.test smtp:[127.0.0.1]:{}\nc.test smtp:[127.0.0.1]:{}\n",
        hop.addr.port(),
        down.addr.port()
    );
    // Addresses a later restriction rejects: tells a reject from a
    // defer_if_permit.
    let later = "later-nobody@b.test REJECT\nlater@c.test REJECT\n";
    let verifying = Postfix::start_with(
        &[("transport", transport.as_str()), ("later", later)],
        &[
            ("relay_domains", "b.test c.test"),
            ("transport_maps", "texthash:$config_directory/transport"),
            (
                "smtpd_sender_restrictions",
                "reject_unverified_sender, check_sender_access texthash:$config_directory/later",
            ),
            (
                "smtpd_recipient_restrictions",
                "reject_unverified_recipient, \
                 check_recipient_access texthash:$config_directory/later, \
                 permit_mynetworks, reject_unauth_destination",
            ),
            ("address_verify_poll_count", "3"),
            ("address_verify_poll_delay", "1s"),
            ("unverified_recipient_reject_code", code.as_str()),
            ("unverified_sender_reject_code", code.as_str()),
        ],
        "",
    );
    std::fs::write(dir.join("later"), later).unwrap();
    let mut cfg = routed(
        &dir,
        &[
            ("b.test", NextHop::to_addr(hop.addr)),
            ("c.test", NextHop::to_addr(down.addr)),
        ],
    );
    cfg.smtpd.relay_domains = vec!["b.test".parse().unwrap(), "c.test".parse().unwrap()];
    let later_table = format!("texthash:{}", dir.join("later").display());
    cfg.restrictions.sender =
        format!("reject_unverified_sender, check_sender_access {later_table}");
    cfg.restrictions.recipient = format!(
        "reject_unverified_recipient, check_recipient_access {later_table}, \
         permit_mynetworks, reject_unauth_destination"
    );
    cfg.verify = VerifySettings {
        unverified_recipient_reject_code: reject_code,
        unverified_sender_reject_code: reject_code,
        ..settings()
    };
    let (server, addr) = crate::common::start(cfg).await;
    // (sender, recipient)
    let cases = [
        ("", "known@b.test"),
        ("", "nobody@b.test"),
        ("", "u@c.test"),
        ("nobody@b.test", "known@b.test"),
        ("", "later-nobody@b.test"),
        ("", "later@c.test"),
        ("later-nobody@b.test", "known@b.test"),
    ];
    for (sender, rcpt) in cases {
        let theirs = settled(&verifying, sender, rcpt).await;
        let ours = settled_at(addr, sender, rcpt).await;
        let what = format!("<{sender}> to <{rcpt}>: {theirs:?} / {ours:?}");
        assert_eq!(
            (ours.code, &ours.enhanced),
            (theirs.code, &theirs.enhanced),
            "{what}"
        );
        // The same words up to the reason's details; the next hop's own
        // reply after `said:`.
        assert_eq!(head(&ours.text), head(&theirs.text), "{what}");
        if let Some((_, said)) = theirs.text.split_once(" said: ") {
            let mine = ours.text.split_once(" said: ").map(|x| x.1);
            assert_eq!(mine, Some(said), "{what}");
        }
    }
    drop(server);
}
