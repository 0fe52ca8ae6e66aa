//! The canonical maps on the envelope (`[rewrite]`: Postfix's
//! `canonical_maps`, `sender_canonical_maps`, `recipient_canonical_maps`;
//! issue 39) held to a real Postfix 3.7: the same tables and messages,
//! and the same envelope delivered: the sender (Postfix's `from=`,
//! Sluice's `received` event) and each recipient with the address it was
//! given as (`to=`/`orig_to=`, Sluice's `delivery` events).

use std::collections::BTreeSet;

use crate::common;
use common::postfix::{self, Postfix};
use common::*;

const SENDER_CANONICAL: &str = "alice@old.test alice.smith@new.test\n@legacy.test @new.test\n";
const RECIPIENT_CANONICAL: &str = "bob@corp.test robert@corp.test\n";
const CANONICAL: &str = "\
robert@corp.test rob@corp.test
carol@x.test carol@y.test
carol@y.test carol@z.test
dave@corp.test @else.test
";

const MESSAGES: [(&str, &[&str]); 7] = [
    ("alice@old.test", &["b@far.test"]),
    ("zed+tag@legacy.test", &["b@far.test"]),
    ("alice+x@old.test", &["bob@corp.test"]),
    ("a@ours.test", &["carol@x.test", "dave+y@corp.test"]),
    ("", &["bob+z@corp.test", "other@far.test"]),
    ("robert@corp.test", &["robert@corp.test"]),
    ("a@ours.test", &["bob@corp.test", "rob@corp.test"]),
];

/// One message's envelope as delivered: the sender, and (to, orig_to).
type Envelope = (String, BTreeSet<(String, String)>);

async fn postfix_envelopes() -> Vec<Envelope> {
    let postfix = Postfix::start_with(
        &[
            ("scanon", SENDER_CANONICAL),
            ("rcanon", RECIPIENT_CANONICAL),
            ("canon", CANONICAL),
        ],
        &[
            ("recipient_delimiter", "+"),
            ("sender_canonical_maps", "texthash:$config_directory/scanon"),
            (
                "recipient_canonical_maps",
                "texthash:$config_directory/rcanon",
            ),
            ("canonical_maps", "texthash:$config_directory/canon"),
        ],
        "",
    );
    let mut session = postfix.session().await;
    let mut queued = Vec::new();
    for (from, to) in MESSAGES {
        let to: Vec<String> = to.iter().map(|s| s.to_string()).collect();
        queued.push(session.send(from, &to).await.queue_id.expect("queued"));
    }
    let deliveries = postfix.wait_done(&queued, 30).await;
    let log = postfix.maillog();
    queued
        .iter()
        .map(|q| {
            let marker = format!("{q}: from=<");
            let from = log
                .lines()
                .find_map(|l| l.split_once(&marker).map(|(_, rest)| rest))
                .and_then(|rest| rest.split_once('>'))
                .map_or(String::new(), |(from, _)| from.to_ascii_lowercase());
            (from, postfix::sent_pairs(&deliveries, q))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_are_rewritten_as_postfix_rewrites_them() {
    let theirs = postfix_envelopes().await;
    let dir = temp_dir("canonical");
    std::fs::create_dir_all(&*dir).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.recipient_delimiter = "+".into();
    let table = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).unwrap();
        vec![format!("texthash:{}", dir.join(name).display())]
    };
    cfg.rewrite.sender_canonical_maps = table("scanon", SENDER_CANONICAL);
    cfg.rewrite.recipient_canonical_maps = table("rcanon", RECIPIENT_CANONICAL);
    cfg.rewrite.canonical_maps = table("canon", CANONICAL);
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let mut qids = Vec::new();
    for (from, to) in MESSAGES {
        let r = c.message(from, to, &body(from)).await;
        assert!(r.starts_with("250"), "{from}: {r}");
        qids.push(qid_of(&r));
    }
    let expected: usize = theirs.iter().map(|(_, to)| to.len()).sum();
    assert!(
        wait_until(30, || sent_count(&dir) >= expected).await,
        "{}",
        sent_count(&dir)
    );
    let received = events_named(&dir, "received");
    let ours: Vec<Envelope> = qids
        .iter()
        .map(|q| {
            let from = received
                .iter()
                .find(|e| e["queue_id"] == q.as_str())
                .map_or(String::new(), |e| {
                    e["from"].as_str().unwrap_or_default().to_ascii_lowercase()
                });
            (from, sent_pairs(&dir, q))
        })
        .collect();
    for (((from, to), ours), theirs) in MESSAGES.iter().zip(&ours).zip(&theirs) {
        assert_eq!(ours, theirs, "from <{from}> to {to:?}");
    }
    // Not vacuous: senders and recipients were rewritten, through two
    // tables, recursively and with the extension put back.
    let all: Vec<String> = theirs
        .iter()
        .flat_map(|(f, to)| std::iter::once(f.clone()).chain(to.iter().map(|t| t.0.clone())))
        .collect();
    for want in [
        "alice.smith+x@new.test",
        "zed+tag@new.test",
        "rob@corp.test",
        "carol@z.test",
        "dave+y@else.test",
        "rob+z@corp.test",
    ] {
        assert!(all.iter().any(|a| a == want), "{want}: {theirs:?}");
    }
    server.shutdown().await;
}

/// A canonical map that loops is asked at most ten times per address: the
/// message is taken and delivered, and the loop is logged (Postfix's
/// cleanup_map11 bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_map_is_bounded_and_logged() {
    let dir = temp_dir("canonical-loop");
    std::fs::create_dir_all(&*dir).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    std::fs::write(dir.join("canon"), "a@l.test b@l.test\nb@l.test a@l.test\n").unwrap();
    cfg.rewrite.canonical_maps = vec![format!("texthash:{}", dir.join("canon").display())];
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c.message("s@ours.test", &["a@l.test"], &body("loop")).await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    assert!(wait_event(15, &dir, "delivery", |e| e["queue_id"] == qid.as_str()).await);
    let warned = events_named(&dir, "warning");
    assert!(
        warned.iter().any(|w| w["kind"] == "rewrite_loop"),
        "{warned:?}"
    );
    server.shutdown().await;
}
