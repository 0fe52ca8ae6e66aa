//! LMTP delivery (RFC 2033) to a real Dovecot: local domains delivered
//! through `local.transport = "lmtp:unix:..."`, one outcome per recipient
//! from the replies after the message (delivered, over quota, unknown
//! user), connections reused, and mail kept while Dovecot is down.

use crate::common;

use common::dovecot::{Dovecot, User};
use common::*;
use sluice::config::hop::NextHop;
use sluice::config::services::ServiceAddr;

fn lmtp_config(
    dir: &std::path::Path,
    socket: &std::path::Path,
    notices: std::net::SocketAddr,
) -> sluice::config::Config {
    // Bounces go to the sender's domain through the relay host: a sink.
    let mut cfg = config(dir, Some(notices));
    cfg.local.domains = vec!["local.test".parse().unwrap()];
    cfg.local.transport = NextHop::Lmtp(ServiceAddr::Unix(socket.to_path_buf()));
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_recipient_gets_its_own_outcome_from_dovecot() {
    let dir = temp_dir("lmtp-outcomes");
    let users = [
        User {
            name: "alice",
            quota: None,
        },
        User {
            name: "full",
            quota: Some(100),
        },
    ];
    let dovecot = Dovecot::start(&dir, &users);
    let notices = recording_sink().await;
    let (server, addr) = start(lmtp_config(&dir, &dovecot.socket, notices.addr)).await;
    let mut c = Client::ready(addr).await;
    let to = ["alice@local.test", "full@local.test", "nobody@local.test"];
    let r = c
        .message("sender@sender.test", &to, &body("to dovecot"))
        .await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_until(20, || removed(&dir, &qid)).await,
        "{:?}",
        delivery_events(&dir, &qid)
    );
    let outcome = |to: &str| {
        delivery_events(&dir, &qid)
            .into_iter()
            .find(|e| matches!(e, Event::Delivery { to: t, .. } if t == to))
            .unwrap_or_else(|| panic!("no delivery to {to}"))
    };
    let alice = outcome("alice@local.test");
    assert!(is_delivery(&alice, "", "sent", "", ""), "{alice:?}");
    assert!(
        matches!(&alice, Event::Delivery { transport, .. } if transport == "lmtp"),
        "{alice:?}"
    );
    let full = outcome("full@local.test");
    assert!(is_delivery(&full, "", "bounced", "", ""), "{full:?}");
    assert!(
        is_delivery(&full, "", "bounced", "5.2.2", ""),
        "over quota: {full:?}"
    );
    let nobody = outcome("nobody@local.test");
    assert!(is_delivery(&nobody, "", "bounced", "", ""), "{nobody:?}");
    assert!(
        is_delivery(&nobody, "", "bounced", "5.1.1", ""),
        "unknown user: {nobody:?}"
    );
    let mail = dovecot.messages("alice");
    assert_eq!(mail.len(), 1);
    assert!(mail[0].contains("Subject: to dovecot"), "{}", mail[0]);
    assert!(dovecot.messages("full").is_empty());
    // One notice to the sender, for the two that bounced.
    assert!(wait_until(20, || notices.count() == 1).await);
    // With no mailbox table, the operator is told that unknown users
    // become bounces (backscatter) instead of 550 at RCPT.
    assert!(any_logged(
        &dir,
        |e| matches!(e, Event::Warning { kind, .. } if kind == "config")
    ));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_to_dovecot_are_reused() {
    let dir = temp_dir("lmtp-reuse");
    let dovecot = Dovecot::start(
        &dir,
        &[User {
            name: "alice",
            quota: None,
        }],
    );
    let notices = recording_sink().await;
    let mut cfg = lmtp_config(&dir, &dovecot.socket, notices.addr);
    cfg.delivery.connection_idle_secs = 30;
    let lmtp_key = cfg.local.transport.key();
    cfg.delivery.destination_concurrency.insert(lmtp_key, 1);
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    for n in 0..5 {
        let r = c
            .message(
                "sender@sender.test",
                &["alice@local.test"],
                &body(&format!("m{n}")),
            )
            .await;
        assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    }
    assert!(wait_until(20, || dovecot.messages("alice").len() == 5).await);
    assert_eq!(dovecot.sessions(), 1, "five messages, one LMTP session");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_waits_while_dovecot_is_down() {
    let dir = temp_dir("lmtp-down");
    let socket = dir.join("dovecot").join("lmtp");
    let notices = recording_sink().await;
    let (server, addr) = start(lmtp_config(&dir, &socket, notices.addr)).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("sender@sender.test", &["alice@local.test"], &body("later"))
        .await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_until(20, || delivered_as(
            &dir,
            &qid,
            "alice@local.test",
            "deferred",
            ""
        ))
        .await
    );
    let dovecot = Dovecot::start(
        &dir,
        &[User {
            name: "alice",
            quota: None,
        }],
    );
    assert!(
        wait_until(30, || dovecot.messages("alice").len() == 1).await,
        "delivered after the retry"
    );
    assert!(wait_until(20, || removed(&dir, &qid)).await);
    assert_eq!(notices.count(), 0, "no bounce");
    server.shutdown().await;
}
