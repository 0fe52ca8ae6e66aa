//! Address extensions (`recipient_delimiter = +`, issue 39) held to a
//! real Postfix 3.7: the same mailbox, alias and relay recipient tables
//! (Postfix: `virtual_mailbox_maps`, `virtual_alias_maps`,
//! `relay_recipient_maps`; Sluice: `[local]` and
//! `smtpd.relay_recipient_table`), the same recipients one message each,
//! and the same decisions: the RCPT reply (code and enhanced code) and
//! the addresses the message was delivered to.
//!
//! Sluice's own part (the Maildir++ folder an extension names) is held
//! to what it promises at the end.

use std::collections::BTreeSet;

use crate::common;
use common::postfix::{Postfix, Reply};
use common::*;

const MAILBOXES: &str = "a@ex.test ex.test/a/\nb@ex.test ex.test/b/\n";
const ALIASES: &str = "\
team@ex.test a@ex.test, b@ex.test, out@far.test
fwd@ex.test out2@far.test
sales@ex.test a@ex.test
sales+eu@ex.test b@ex.test
";
const RELAY_RECIPIENTS: &str = "r@relay.test ok\n";

/// (recipient, RCPT reply class and enhanced code).
const CASES: [&str; 13] = [
    "a@ex.test",
    "a+news@ex.test",
    "A+News@ex.test",
    "b+x+y@ex.test",
    "a+@ex.test",
    "nobody+x@ex.test",
    "team+x@ex.test",
    "team@ex.test",
    "fwd+z@ex.test",
    "sales+eu@ex.test",
    "sales+us@ex.test",
    "r+tag@relay.test",
    "q+tag@relay.test",
];

/// One case's decision: the reply, and where the message went (lower
/// case: Postfix keeps the client's case in `to=`, Sluice folds it).
type Decision = ((u16, Option<String>), BTreeSet<String>);

async fn postfix_decisions() -> Vec<Decision> {
    let postfix = Postfix::start_with(
        &[
            ("mailboxes", MAILBOXES),
            ("aliases", ALIASES),
            ("relay_recipients", RELAY_RECIPIENTS),
        ],
        &[
            ("recipient_delimiter", "+"),
            ("virtual_mailbox_domains", "ex.test"),
            (
                "virtual_mailbox_maps",
                "texthash:$config_directory/mailboxes",
            ),
            ("virtual_alias_maps", "texthash:$config_directory/aliases"),
            ("relay_domains", "relay.test"),
            (
                "relay_recipient_maps",
                "texthash:$config_directory/relay_recipients",
            ),
        ],
        "",
    );
    let mut session = postfix.session().await;
    let mut sent = Vec::new();
    for rcpt in CASES {
        sent.push(session.send("s@client.test", &[rcpt.to_string()]).await);
    }
    let queued: Vec<String> = sent.iter().filter_map(|s| s.queue_id.clone()).collect();
    let deliveries = postfix.wait_done(&queued, 30).await;
    sent.into_iter()
        .map(|s| {
            let reply = &s.rcpts[0];
            let to = deliveries
                .iter()
                .filter(|d| Some(&d.queue_id) == s.queue_id.as_ref() && d.status == "sent")
                .map(|d| d.to.to_ascii_lowercase())
                .collect();
            ((reply.code, reply.enhanced.clone()), to)
        })
        .collect()
}

fn sluice_config(dir: &std::path::Path, sink: std::net::SocketAddr) -> sluice::config::Config {
    let mut cfg = config(dir, Some(sink));
    static_tables(
        &mut cfg,
        dir,
        &[
            ("mailboxes", MAILBOXES),
            ("aliases", ALIASES),
            ("relay_recipients", RELAY_RECIPIENTS),
        ],
    );
    cfg.recipient_delimiter = "+".into();
    cfg.local.domains = vec!["ex.test".parse().unwrap()];
    cfg.local.mailbox_table = Some("mailboxes".into());
    cfg.local.alias_table = Some("aliases".into());
    cfg.local.maildir_base = Some(dir.join("mail"));
    cfg.smtpd.relay_domains = vec!["relay.test".parse().unwrap()];
    cfg.smtpd.relay_recipient_table = Some("relay_recipients".into());
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_are_decided_and_delivered_as_postfix_does() {
    let theirs = postfix_decisions().await;
    let dir = temp_dir("plus-addressing");
    std::fs::create_dir_all(&*dir).unwrap();
    let sink = recording_sink().await;
    // A folder the user made: a+news's mail goes there.
    let news = dir.join("mail/ex.test/a/.news");
    std::fs::create_dir_all(&news).unwrap();
    let (server, addr) = start(sluice_config(&dir, sink.addr)).await;
    let mut c = Client::ready(addr).await;
    let mut replies = Vec::new();
    for rcpt in CASES {
        assert!(c.cmd("MAIL FROM:<s@client.test>").await.starts_with("250"));
        let r = Reply::parse(&c.cmd(&format!("RCPT TO:<{rcpt}>")).await);
        let qid = match r.code {
            250 => {
                assert!(c.cmd("DATA").await.starts_with("354"));
                c.send(body(rcpt).as_bytes()).await;
                c.send(b".\r\n").await;
                Some(qid_of(&c.reply().await))
            }
            _ => {
                assert!(c.cmd("RSET").await.starts_with("250"));
                None
            }
        };
        replies.push(((r.code, r.enhanced), qid));
    }
    let expected: usize = theirs.iter().map(|(_, to)| to.len()).sum();
    let sent = || {
        events_named(&dir, "delivery")
            .iter()
            .filter(|e| e["status"] == "sent")
            .count()
    };
    assert!(wait_until(30, || sent() >= expected).await, "{}", sent());
    let ours: Vec<Decision> = replies
        .into_iter()
        .map(|(reply, qid)| {
            let to = qid
                .map(|q| {
                    deliveries(&dir, &q)
                        .iter()
                        .filter(|e| e["status"] == "sent")
                        .map(|e| e["to"].as_str().unwrap().to_ascii_lowercase())
                        .collect()
                })
                .unwrap_or_default();
            (reply, to)
        })
        .collect();
    for ((case, ours), theirs) in CASES.iter().zip(&ours).zip(&theirs) {
        assert_eq!(ours, theirs, "{case}");
    }
    // Not vacuous: extensions were split, passed on and refused.
    let all: BTreeSet<&String> = theirs.iter().flat_map(|(_, to)| to).collect();
    assert!(all.contains(&"a+x@ex.test".to_string()), "{all:?}");
    assert!(theirs.iter().any(|((code, _), _)| *code == 550));
    // Sluice's own: a+news went into the folder the user made, the rest
    // of a's mail into the inbox.
    let in_folder = std::fs::read_dir(news.join("new")).unwrap().count();
    assert_eq!(in_folder, 2, "a+news and A+News");
    server.shutdown().await;
}
