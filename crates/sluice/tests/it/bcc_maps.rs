//! The archive copies of `[rewrite]` (Postfix's `always_bcc`,
//! `sender_bcc_maps`, `recipient_bcc_maps`; issue 39) held to a real
//! Postfix 3.7: the same tables, the same messages, and the same
//! addresses each message is delivered to (Postfix's `to=` lines, Sluice's
//! `delivery` events). A table that cannot answer defers the message in
//! both.

use std::collections::BTreeSet;

use crate::common;
use common::postfix::Postfix;
use common::*;

const SENDER_BCC: &str =
    "boss@ours.test audit@archive.test\n@sales.test sales-audit@archive.test\n";
const RECIPIENT_BCC: &str =
    "ceo@corp.test ceo-copy@archive.test\nx@corp.test x-copy@archive.test\n";

/// (sender, recipients) of each message.
const MESSAGES: [(&str, &[&str]); 6] = [
    ("a@ours.test", &["b@far.test"]),
    ("boss@ours.test", &["b@far.test"]),
    ("boss+tag@ours.test", &["ceo@corp.test"]),
    ("z@sales.test", &["x+y@corp.test", "q@far.test"]),
    ("", &["ceo@corp.test"]),
    ("a@ours.test", &["arch@archive.test"]),
];

async fn postfix_deliveries(dir_tables: &[(&str, &str)]) -> Vec<BTreeSet<String>> {
    let postfix = Postfix::start_with(
        dir_tables,
        &[
            ("recipient_delimiter", "+"),
            ("always_bcc", "arch@archive.test"),
            ("sender_bcc_maps", "texthash:$config_directory/sbcc"),
            ("recipient_bcc_maps", "texthash:$config_directory/rbcc"),
        ],
        "",
    );
    let mut session = postfix.session().await;
    let mut queued = Vec::new();
    for (from, to) in MESSAGES {
        let to: Vec<String> = to.iter().map(|s| s.to_string()).collect();
        let sent = session.send(from, &to).await;
        queued.push(sent.queue_id.expect("queued"));
    }
    let deliveries = postfix.wait_done(&queued, 30).await;
    queued
        .iter()
        .map(|q| {
            deliveries
                .iter()
                .filter(|d| &d.queue_id == q && d.status == "sent")
                .map(|d| d.to.to_ascii_lowercase())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_copies_go_where_postfix_sends_them() {
    let theirs = postfix_deliveries(&[("sbcc", SENDER_BCC), ("rbcc", RECIPIENT_BCC)]).await;
    let dir = temp_dir("bcc-maps");
    std::fs::create_dir_all(&*dir).unwrap();
    std::fs::write(dir.join("sbcc"), SENDER_BCC).unwrap();
    std::fs::write(dir.join("rbcc"), RECIPIENT_BCC).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.recipient_delimiter = "+".into();
    cfg.rewrite.always_bcc = "arch@archive.test".into();
    cfg.rewrite.sender_bcc_maps = vec![format!("texthash:{}", dir.join("sbcc").display())];
    cfg.rewrite.recipient_bcc_maps = vec![format!("texthash:{}", dir.join("rbcc").display())];
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let mut qids = Vec::new();
    for (from, to) in MESSAGES {
        let r = c.message(from, to, &body(from)).await;
        assert!(r.starts_with("250"), "{from}: {r}");
        qids.push(qid_of(&r));
    }
    let expected: usize = theirs.iter().map(BTreeSet::len).sum();
    let sent = || {
        events_named(&dir, "delivery")
            .iter()
            .filter(|e| e["status"] == "sent")
            .count()
    };
    assert!(wait_until(30, || sent() >= expected).await, "{}", sent());
    let ours: Vec<BTreeSet<String>> = qids
        .iter()
        .map(|q| {
            deliveries(&dir, q)
                .iter()
                .filter(|e| e["status"] == "sent")
                .map(|e| e["to"].as_str().unwrap().to_ascii_lowercase())
                .collect()
        })
        .collect();
    for (((from, to), ours), theirs) in MESSAGES.iter().zip(&ours).zip(&theirs) {
        assert_eq!(ours, theirs, "from <{from}> to {to:?}");
    }
    // Not vacuous: each kind of copy was made.
    for copy in ["arch@", "audit@", "sales-audit@", "ceo-copy@", "x-copy@"] {
        assert!(
            theirs.iter().flatten().any(|a| a.starts_with(copy)),
            "{copy}: {theirs:?}"
        );
    }
    server.shutdown().await;
}

/// A BCC table that cannot answer defers the message (`451 4.3.0`), as
/// Postfix's cleanup does, rather than sending it without its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bcc_table_that_cannot_answer_defers_the_message() {
    let dir = temp_dir("bcc-maps-down");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    // A socketmap server that is not there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    cfg.rewrite.sender_bcc_maps = vec![format!("socketmap:inet:127.0.0.1:{port}:bcc")];
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@ours.test", &["b@far.test"], &body("down"))
        .await;
    assert!(r.starts_with("451 4.3.0"), "{r}");
    let r = c.message("", &["b@far.test"], &body("bounce")).await;
    assert!(
        r.starts_with("250"),
        "the null sender is not looked up: {r}"
    );
    server.shutdown().await;
}

/// A copy to a local alias goes to the alias's mailboxes, as Postfix's
/// copies go through virtual_alias_maps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_to_a_local_alias_reaches_its_mailboxes() {
    let dir = temp_dir("bcc-maps-alias");
    std::fs::create_dir_all(&*dir).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    for (name, text) in [
        (
            "mailboxes",
            "a@ours.test ours.test/a/\nb@ours.test ours.test/b/\n",
        ),
        ("aliases", "arch@ours.test a@ours.test, b@ours.test\n"),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
        let table = format!("kind = \"static\"\npath = {:?}", dir.join(name));
        cfg.tables
            .insert(name.into(), toml::from_str(&table).unwrap());
    }
    cfg.local.domains = vec!["ours.test".parse().unwrap()];
    cfg.local.mailbox_table = Some("mailboxes".into());
    cfg.local.alias_table = Some("aliases".into());
    cfg.local.maildir_base = Some(dir.join("mail"));
    cfg.rewrite.always_bcc = "arch@ours.test".into();
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("x@far.test", &["q@far.test"], &body("archived"))
        .await;
    let qid = qid_of(&r);
    let sent = || {
        let mut to: Vec<String> = deliveries(&dir, &qid)
            .iter()
            .filter(|e| e["status"] == "sent")
            .map(|e| e["to"].as_str().unwrap().to_string())
            .collect();
        to.sort();
        to
    };
    assert!(wait_until(15, || sent().len() >= 3).await, "{:?}", sent());
    assert_eq!(sent(), ["a@ours.test", "b@ours.test", "q@far.test"]);
    server.shutdown().await;
}
