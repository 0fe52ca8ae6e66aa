//! Policy delegation (Postfix's SMTP access policy protocol) against a
//! real postgrey: greylisting at RCPT, DATA and the end of the message;
//! trusted clients not asked; a server that is down or silent gets the
//! default action.

use crate::common;

use std::time::{Duration, Instant};

use common::postgrey::Postgrey;
use common::*;
use sluice::config::services::{PolicyAction, PolicyStage, ServiceAddr};
use sluice::config::Config;

const FROM: &str = "someone@sender.test";
const TO: &str = "user@ours.test";

fn policy_config(
    dir: &std::path::Path,
    sink: std::net::SocketAddr,
    service: ServiceAddr,
) -> Config {
    let mut cfg = untrusted_config(dir, Some(sink));
    cfg.smtpd.policy_service = Some(service);
    cfg
}

/// One try of a transaction: the first reply that is not a success (or
/// the final `250 ... queued as`).
async fn attempt(addr: std::net::SocketAddr, stage: PolicyStage, subject: &str) -> String {
    let mut c = Client::ready(addr).await;
    let r = c.cmd(&format!("MAIL FROM:<{FROM}>")).await;
    assert!(r.starts_with("250"), "MAIL: {r}");
    let r = c.cmd(&format!("RCPT TO:<{TO}>")).await;
    if stage == PolicyStage::Rcpt && !r.starts_with("250") {
        return r;
    }
    assert!(r.starts_with("250"), "RCPT: {r}");
    let r = c.cmd("DATA").await;
    if stage == PolicyStage::Data && !r.starts_with("354") {
        return r;
    }
    assert!(r.starts_with("354"), "DATA: {r}");
    c.send(body(subject).as_bytes()).await;
    c.send(b".\r\n").await;
    c.reply().await
}

/// postgrey at `stage`: the first try is deferred with its text, a retry
/// before the delay still is, one after it is accepted, and the message
/// arrives carrying postgrey's X-Greylist: field below our Received:.
async fn greylists_at(stage: PolicyStage) {
    let dir = temp_dir("policy-grey");
    let grey = Postgrey::start(&dir, 2);
    let sink = recording_sink().await;
    let mut cfg = policy_config(&dir, sink.addr, ServiceAddr::Unix(grey.socket.clone()));
    cfg.smtpd.policy_service_at = vec![stage];
    let (server, addr) = start(cfg).await;

    let first = attempt(addr, stage, "grey").await;
    let started = Instant::now();
    assert!(first.starts_with("450 4.7.1 "), "{stage:?}: {first}");
    assert!(first.contains("Greylisted"), "postgrey's text: {first}");
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Reject(Reject::Policy { cause, code: 450, .. }) if cause == "policy"
        ))
        .await,
        "{:?}",
        logged_events(&dir)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let accepted = loop {
        let r = attempt(addr, stage, "grey").await;
        if r.starts_with("250 2.0.0 Ok: queued as") {
            break r;
        }
        assert!(r.starts_with("450 4.7.1 "), "{stage:?} retry: {r}");
        assert!(Instant::now() < deadline, "postgrey never let the retry in");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "accepted before postgrey's delay"
    );
    assert!(wait_until(20, || sink.count() == 1).await, "{accepted}");
    let got = String::from_utf8(sink.messages()[0].body.clone()).unwrap();
    let fields: Vec<&str> = got.lines().take(8).collect();
    let grey_at = fields
        .iter()
        .position(|l| l.starts_with("X-Greylist: delayed"));
    assert!(
        grey_at.is_some_and(|i| i > 0) && fields[0].starts_with("Received: "),
        "X-Greylist: below our Received: {fields:?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgrey_greylists_at_rcpt() {
    greylists_at(PolicyStage::Rcpt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgrey_greylists_at_data() {
    greylists_at(PolicyStage::Data).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgrey_greylists_at_the_end_of_the_message() {
    greylists_at(PolicyStage::EndOfMessage).await;
}

/// Clients that may relay are not asked (Postfix's usual order:
/// permit_mynetworks before check_policy_service), unless configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_clients_are_not_asked_unless_configured() {
    let dir = temp_dir("policy-trusted");
    let grey = Postgrey::start(&dir, 60);
    let sink = recording_sink().await;
    let mut cfg = policy_config(&dir, sink.addr, ServiceAddr::Unix(grey.socket.clone()));
    cfg.smtpd.mynetworks = vec![net("127.0.0.0/8")];
    let (server, addr) = start(cfg.clone()).await;
    let r = attempt(addr, PolicyStage::Rcpt, "trusted").await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    server.shutdown().await;

    let dir = temp_dir("policy-trusted-asked");
    cfg.data_dir = dir.join("var");
    cfg.log_file = Some(dir.join("maillog"));
    cfg.smtpd.policy_service_exempt_trusted = false;
    let (server, addr) = start(cfg).await;
    let r = attempt(addr, PolicyStage::Rcpt, "asked").await;
    assert!(r.starts_with("450 4.7.1 "), "{r}");
    server.shutdown().await;
}

/// A server that is not there, or that accepts and says nothing, gets the
/// default action: Postfix's 451 4.3.5, or what is configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_silent_server_gets_the_default_action() {
    let dir = temp_dir("policy-dead");
    let sink = recording_sink().await;
    let gone = ServiceAddr::Unix(dir.join("nobody.sock"));
    let mut cfg = policy_config(&dir, sink.addr, gone);
    cfg.smtpd.policy_service_try_limit = 1;
    let (server, addr) = start(cfg.clone()).await;
    let r = attempt(addr, PolicyStage::Rcpt, "dead").await;
    assert!(
        r.starts_with(
            "451 4.3.5 <user@ours.test>: Recipient address rejected: Server configuration problem"
        ),
        "{r}"
    );
    let failed = |e: &Event| matches!(e, Event::PolicyFailed { client_ip, .. } if client_ip.to_string() == "127.0.0.1");
    assert!(wait_logged(10, &dir, failed).await);
    server.shutdown().await;

    // Silent: accepts, reads, never answers; one try of one second.
    let silent_path = dir.join("silent.sock");
    let silent = tokio::net::UnixListener::bind(&silent_path).unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            open.push(s);
        }
    });
    cfg.smtpd.policy_service = Some(ServiceAddr::Unix(silent_path));
    cfg.smtpd.policy_service_timeout_secs = 1;
    cfg.smtpd.policy_service_default_action = PolicyAction::Dunno;
    let (server, addr) = start(cfg).await;
    let r = attempt(addr, PolicyStage::Rcpt, "silent").await;
    assert!(
        r.starts_with("250 2.0.0 Ok: queued as"),
        "DUNNO by default: {r}"
    );
    let timed_out =
        |e: &Event| matches!(e, Event::PolicyFailed { error, .. } if error.contains("timeout"));
    assert!(
        wait_logged(10, &dir, timed_out).await,
        "{:?}",
        logged_events(&dir)
    );
    held.abort();
    server.shutdown().await;
}

/// A BDAT refused at its first chunk ends the transaction: the chunks
/// the client pipelined behind it are read and refused, never queued as
/// a message that lacks its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_first_chunk_ends_the_transaction() {
    let dir = temp_dir("policy-bdat");
    let sink = recording_sink().await;
    let gone = ServiceAddr::Unix(dir.join("nobody.sock"));
    let mut cfg = policy_config(&dir, sink.addr, gone);
    cfg.smtpd.policy_service_at = vec![PolicyStage::Data];
    cfg.smtpd.policy_service_try_limit = 1;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c
        .cmd(&format!("MAIL FROM:<{FROM}>"))
        .await
        .starts_with("250"));
    assert!(c.cmd(&format!("RCPT TO:<{TO}>")).await.starts_with("250"));
    let head = "Subject: start\r\n\r\n";
    let tail = "the rest\r\n";
    c.send(
        format!(
            "BDAT {}\r\n{head}BDAT {} LAST\r\n{tail}",
            head.len(),
            tail.len()
        )
        .as_bytes(),
    )
    .await;
    let first = c.reply().await;
    assert!(
        first.starts_with("451 4.3.5 <DATA>: Data command rejected"),
        "{first}"
    );
    let second = c.reply().await;
    assert!(second.starts_with("503 "), "no transaction left: {second}");
    assert!(c.cmd("QUIT").await.starts_with("221"));
    assert!(!any_logged(&dir, |e| matches!(e, Event::Received { .. })));
    server.shutdown().await;
    assert_eq!(sink.count(), 0);
}
