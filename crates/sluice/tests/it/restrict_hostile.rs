//! Restriction lists under hostile or broken input: a table answer with a
//! control character, a class nested through a table without end, an
//! answer naming a table the configuration does not, a table server that
//! is down — each a `4XX` with Postfix's code, never a relay opened, and
//! the refusal a typed event naming the restriction.

use crate::common::*;

use sluice::config::Config;

/// Keys in `ours.test`, the relay domain: the relay list lets them
/// through to the recipient list.
const ACCESS: &str = "\
ctl@ours.test REJECT bad\u{b}text
loop@ours.test loopclass
passwd@ours.test check_recipient_access hash:/etc/passwd
ok@ours.test OK
listed@ours.test permit_mynetworks, reject
";

fn hostile_config(dir: &std::path::Path) -> Config {
    std::fs::write(dir.join("access"), ACCESS).unwrap();
    let mut cfg = untrusted_config(dir, None);
    let table = format!("texthash:{}", dir.join("access").display());
    let r = &mut cfg.restrictions;
    r.classes.insert(
        "loopclass".into(),
        format!("check_recipient_access {table}"),
    );
    r.recipient = format!("check_recipient_access {table}, reject_unauth_destination");
    cfg
}

async fn rcpt(addr: std::net::SocketAddr, to: &str) -> String {
    let mut c = Client::ready(addr).await;
    let r = c.cmd("MAIL FROM:<a@ext.test>").await;
    assert!(r.starts_with("250"), "{r}");
    c.cmd(&format!("RCPT TO:<{to}>")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_answers_defer_and_never_open_the_relay() {
    let dir = temp_dir("restrict-hostile");
    let (server, addr) = start(hostile_config(&dir)).await;

    // A control character in an answer: not a reply of the table's making.
    let r = rcpt(addr, "ctl@ours.test").await;
    assert!(r.starts_with("451 4.3.5 "), "{r}");
    assert!(!r.contains('\u{b}'), "{r:?}");
    // A class the table names again and again: bounded, then 451.
    let r = rcpt(addr, "loop@ours.test").await;
    assert!(r.starts_with("451 4.3.5 "), "{r}");
    // An answer may not make Sluice open a table of its choosing.
    let r = rcpt(addr, "passwd@ours.test").await;
    assert!(r.starts_with("451 4.3.5 "), "{r}");
    // OK from the table permits (the operator's choice) ...
    let r = rcpt(addr, "ok@ours.test").await;
    assert!(r.starts_with("250 "), "{r}");
    // ... and a list it answers is applied in place.
    let r = rcpt(addr, "listed@ours.test").await;
    assert!(r.starts_with("554 5.7.1 "), "{r}");
    // Anything else still meets reject_unauth_destination.
    let r = rcpt(addr, "someone@far.test").await;
    assert!(r.starts_with("554 5.7.1 "), "{r}");

    let deferred = || -> Vec<serde_json::Value> {
        events_named(&dir, "reject")
            .into_iter()
            .filter(|e| e["cause"] == "restriction" && e["code"] == 451)
            .collect()
    };
    wait_until(5, || deferred().len() >= 3).await;
    let refusals = deferred();
    let by: Vec<_> = refusals
        .iter()
        .map(|e| e["by"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        by,
        [
            "check_recipient_access",
            "restriction_class",
            "check_recipient_access"
        ],
        "{refusals:?}"
    );
    assert!(refusals
        .iter()
        .all(|e| e["code"] == 451 && e["dsn"] == "4.3.5"));
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_cannot_answer_is_a_temporary_failure() {
    let dir = temp_dir("restrict-down");
    let down = reserve();
    let mut cfg = untrusted_config(&dir, None);
    cfg.restrictions.recipient = format!(
        "check_recipient_access socketmap:inet:{}:access, permit",
        down.addr
    );
    let (server, addr) = start(cfg).await;
    let r = rcpt(addr, "user@ours.test").await;
    assert!(r.starts_with("451 4.3.0 "), "{r}");
    // The relay list runs first: a table that is down opens nothing.
    let r = rcpt(addr, "someone@far.test").await;
    assert!(r.starts_with("554 5.7.1 "), "{r}");
    drop(server);
    drop(down);
}

/// `HOLD` in an access table, as Postfix: the message is taken (`250`)
/// and queued on hold, not delivered; another message of the same
/// session, without the held recipient, is delivered. Postfix says so
/// in its log (`NOQUEUE: hold: RCPT …`, the message never active);
/// Sluice in a typed `hold` event with cause `access` (and no delivery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_holds_the_message_as_postfix_does() {
    use crate::common::postfix::Postfix;
    const TABLE: &str = "held@ours.test HOLD for review\n";
    let postfix = Postfix::start_with(
        &[("access", TABLE)],
        &[
            ("relay_domains", "ours.test"),
            (
                "smtpd_recipient_restrictions",
                "check_recipient_access texthash:$config_directory/access, permit",
            ),
        ],
        "",
    );
    let mut s = postfix.session().await;
    let held = s.send("a@ext.test", &["held@ours.test".into()]).await;
    let free = s.send("a@ext.test", &["free@ours.test".into()]).await;
    let (held_id, free_id) = (held.queue_id.unwrap(), free.queue_id.unwrap());
    let done = postfix.wait_done(std::slice::from_ref(&free_id), 30).await;
    assert_eq!(done.len(), 1, "{}", postfix.maillog());
    let log = postfix.maillog();
    assert!(
        log.contains("NOQUEUE: hold: RCPT from")
            && log.contains("<held@ours.test>: Recipient address for review"),
        "{log}"
    );
    // Held: never taken into the active queue.
    assert!(!log.contains(&format!("{held_id}: from=")), "{log}");
    assert!(postfix.deliveries().iter().all(|d| d.queue_id != held_id));

    let dir = temp_dir("restrict-hold");
    std::fs::write(dir.join("access"), TABLE).unwrap();
    let sink = recording_sink().await;
    let mut cfg = untrusted_config(&dir, Some(sink.addr));
    cfg.restrictions.recipient = format!(
        "check_recipient_access texthash:{}, permit",
        dir.join("access").display()
    );
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let held = c
        .message("a@ext.test", &["held@ours.test"], &body("held"))
        .await;
    let free = c
        .message("a@ext.test", &["free@ours.test"], &body("free"))
        .await;
    assert!(
        held.starts_with("250 ") && free.starts_with("250 "),
        "{held} {free}"
    );
    let (held_id, free_id) = (qid_of(&held), qid_of(&free));
    let sent = wait_event(30, &dir, "delivery", |e| e["queue_id"] == free_id.as_str()).await;
    assert!(sent, "the other message is delivered");
    let holds = events_named(&dir, "hold");
    assert!(
        holds
            .iter()
            .any(|e| e["queue_id"] == held_id.as_str() && e["cause"] == "access"),
        "{holds:?}"
    );
    let delivered = events_named(&dir, "delivery");
    assert!(
        delivered.iter().all(|e| e["queue_id"] != held_id.as_str()),
        "{delivered:?}"
    );
    drop(server);
}
