//! REDIRECT and BCC from access tables, differential: a real Postfix 3.7
//! and Sluice run the same `check_sender_access` and
//! `check_recipient_access` tables, the same messages are sent to both
//! (from 127.0.0.7, a stranger, to the relay domain `relay.test`; every
//! transport discards), and each message must reach the same recipients:
//! the (`to`, `orig_to`) pairs of the delivery lines, Postfix's log
//! against Sluice's `delivery` events.
//!
//! What Postfix 3.7.11 does, seen here: REDIRECT replaces every
//! recipient by its address, the last REDIRECT of the transaction
//! winning; the one delivery keeps the `orig_to` of the recipient qmgr(8)
//! sorts first (by domain, then address), not the first RCPT's. Every BCC
//! adds its address (`orig_to` none): two BCCs, two copies (access(5)
//! says only the last is used: the 3.7 code keeps them all). A REDIRECT
//! and a BCC together: the REDIRECT takes everything, the BCC's copy
//! included. (Seen once with postcat on a held message: the BCC copy is
//! queued after the content, without NOTIFY; the REDIRECT as a
//! `redirect_to` record qmgr applies. Sluice gives the copy NOTIFY=NEVER,
//! docs/CONFIG.md says why; the delivery lines cannot show it.) With
//! `virtual_alias_maps`: a BCC's address is expanded (each result with
//! the BCC's address as `orig_to`), a REDIRECT's is not.

use crate::common::postfix::Postfix;
use crate::common::*;

const RCPTS: &str = "\
red@relay.test REDIRECT red-target@far.test
red2@relay.test REDIRECT red2-target@far.test
bcc@relay.test BCC bcc-target@far.test
bcc2@relay.test BCC bcc2-target@far.test
";

const SENDERS: &str = "\
sred@ext.test REDIRECT sred-target@far.test
sbcc@ext.test BCC sbcc-target@far.test
";

/// One message: its sender and its RCPT arguments (path and parameters).
struct Case {
    name: &'static str,
    sender: &'static str,
    rcpts: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "none",
        sender: "a@ext.test",
        rcpts: &["<plain@relay.test>", "<other@relay.test>"],
    },
    Case {
        name: "redirect",
        sender: "a@ext.test",
        rcpts: &[
            "<plain@relay.test>",
            "<red@relay.test>",
            "<other@relay.test>",
        ],
    },
    Case {
        name: "bcc",
        sender: "a@ext.test",
        rcpts: &["<plain@relay.test>", "<bcc@relay.test>"],
    },
    Case {
        name: "redirect-and-bcc",
        sender: "a@ext.test",
        rcpts: &["<bcc@relay.test>", "<red@relay.test>"],
    },
    Case {
        name: "two-redirects",
        sender: "a@ext.test",
        rcpts: &["<red@relay.test>", "<red2@relay.test>"],
    },
    Case {
        name: "two-bccs",
        sender: "a@ext.test",
        rcpts: &[
            "<bcc@relay.test>",
            "<bcc2@relay.test>",
            "<plain@relay.test>",
        ],
    },
    Case {
        name: "sender-redirect",
        sender: "sred@ext.test",
        rcpts: &["<plain@relay.test>", "<other@relay.test>"],
    },
    Case {
        name: "sender-bcc",
        sender: "sbcc@ext.test",
        rcpts: &["<plain@relay.test>"],
    },
    Case {
        name: "sender-bcc-and-rcpt-bcc",
        sender: "sbcc@ext.test",
        rcpts: &["<bcc@relay.test>"],
    },
    Case {
        name: "redirect-with-dsn",
        sender: "a@ext.test",
        rcpts: &[
            "<plain@relay.test> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;given@relay.test",
            "<red@relay.test> NOTIFY=NEVER",
        ],
    },
];

/// Sends every case's message in one session from 127.0.0.7; their
/// queue IDs, in order.
async fn send_all(addr: std::net::SocketAddr) -> Vec<String> {
    let (mut c, greeting) = Client::connect_from("127.0.0.7", addr).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    let r = c.cmd("EHLO client.test").await;
    assert!(r.starts_with("250"), "{r}");
    let mut ids = Vec::new();
    for case in CASES {
        let r = c.cmd(&format!("MAIL FROM:<{}>", case.sender)).await;
        assert!(r.starts_with("250"), "{}: MAIL {r}", case.name);
        for rcpt in case.rcpts {
            let r = c.cmd(&format!("RCPT TO:{rcpt}")).await;
            assert!(r.starts_with("250"), "{}: RCPT {rcpt}: {r}", case.name);
        }
        let r = c.cmd("DATA").await;
        assert!(r.starts_with("354"), "{}: DATA {r}", case.name);
        c.send(body(case.name).as_bytes()).await;
        let r = c.cmd(".").await;
        assert!(r.starts_with("250"), "{}: end of data {r}", case.name);
        ids.push(qid_of(&r));
    }
    ids
}

/// (to, orig_to) of each delivery, sorted.
type Delivered = Vec<(String, Option<String>)>;

/// The virtual alias map of the second test: what the REDIRECT and BCC
/// targets, and a plain recipient, become.
const VIRTUAL: &str = "\
red-target@far.test vred@far.test
bcc-target@far.test vbcc@far.test, vbcc2@far.test
plain@relay.test vplain@far.test
";

async fn postfix_delivered(virtual_map: bool) -> Vec<Delivered> {
    let mut main = vec![("relay_domains", "relay.test")];
    if virtual_map {
        main.push(("virtual_alias_maps", "texthash:$config_directory/virtual"));
    }
    let postfix = Postfix::start_with(
        &[("rcpts", RCPTS), ("senders", SENDERS), ("virtual", VIRTUAL)],
        &[
            main.as_slice(),
            &[
                (
                    "smtpd_sender_restrictions",
                    "check_sender_access texthash:$config_directory/senders",
                ),
                (
                    "smtpd_recipient_restrictions",
                    "check_recipient_access texthash:$config_directory/rcpts, permit",
                ),
            ],
        ]
        .concat(),
        "",
    );
    let ids = send_all(postfix.addr).await;
    let done = postfix.wait_done(&ids, 30).await;
    let log = postfix.maillog();
    if std::env::var_os("RESTRICT_DIFF_SHOW").is_some() {
        eprintln!("{log}");
    }
    ids.iter()
        .map(|id| {
            let mut d: Delivered = done
                .iter()
                .filter(|d| &d.queue_id == id)
                .map(|d| (d.to.clone(), d.orig_to.clone()))
                .collect();
            d.sort();
            d
        })
        .collect()
}

fn sluice_config(dir: &std::path::Path, virtual_map: bool) -> sluice::config::Config {
    std::fs::write(dir.join("rcpts"), RCPTS).unwrap();
    std::fs::write(dir.join("senders"), SENDERS).unwrap();
    std::fs::write(dir.join("virtual"), VIRTUAL).unwrap();
    let mut cfg = config(dir, None);
    if virtual_map {
        let spec = format!("texthash:{}", dir.join("virtual").display());
        cfg.rewrite.virtual_alias_maps = vec![spec];
    }
    cfg.smtpd.mynetworks = vec![net("127.0.0.1/32")];
    cfg.smtpd.relay_domains = vec!["relay.test".parse().unwrap()];
    cfg.transport.insert("*".into(), NextHop::Discard);
    let r = &mut cfg.restrictions;
    r.sender = format!(
        "check_sender_access texthash:{}",
        dir.join("senders").display()
    );
    r.recipient = format!(
        "check_recipient_access texthash:{}, permit",
        dir.join("rcpts").display()
    );
    cfg
}

async fn sluice_delivered(
    dir: &std::path::Path,
    virtual_map: bool,
) -> (Vec<String>, Vec<Delivered>) {
    let (server, addr) = start(sluice_config(dir, virtual_map)).await;
    let ids = send_all(addr).await;
    for id in &ids {
        let removed = wait_event(30, dir, "removed", |e| e["queue_id"] == id.as_str()).await;
        assert!(removed, "{id} not done");
    }
    drop(server);
    let events = events_named(dir, "delivery");
    let delivered = ids
        .iter()
        .map(|id| {
            let mut d: Delivered = events
                .iter()
                .filter(|e| e["queue_id"] == id.as_str())
                .map(|e| {
                    let to = e["to"].as_str().unwrap_or_default().to_string();
                    (to, e["orig_to"].as_str().map(str::to_string))
                })
                .collect();
            d.sort();
            d
        })
        .collect();
    (ids, delivered)
}

/// Fails with every case where Sluice delivered otherwise than Postfix.
fn same_deliveries(theirs: &[Delivered], ours: &[Delivered]) {
    let differences: Vec<String> = CASES
        .iter()
        .zip(theirs.iter().zip(ours))
        .filter(|(_, (t, o))| t != o)
        .map(|(c, (t, o))| format!("{}:\n  Postfix {t:?}\n  Sluice  {o:?}", c.name))
        .collect();
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// With `virtual_alias_maps`: the targets of REDIRECT and BCC, and the
/// recipients, become what Postfix makes of them (the same cases).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_and_bcc_targets_meet_virtual_aliases_as_in_postfix() {
    let theirs = postfix_delivered(true).await;
    let dir = temp_dir("restrict-redirect-virtual");
    let (_, ours) = sluice_delivered(&dir, true).await;
    if std::env::var_os("RESTRICT_DIFF_SHOW").is_some() {
        for (c, t) in CASES.iter().zip(&theirs) {
            eprintln!("{}: {t:?}", c.name);
        }
    }
    same_deliveries(&theirs, &ours);
    // Not vacuous: the virtual alias map changed what was delivered.
    let all: Vec<&String> = theirs.iter().flatten().map(|(to, _)| to).collect();
    assert!(all.iter().any(|to| to.starts_with('v')), "{all:?}");
}

fn pairs(list: &[(&str, Option<&str>)]) -> Delivered {
    let mut d: Delivered = list
        .iter()
        .map(|(to, orig)| (to.to_string(), orig.map(str::to_string)))
        .collect();
    d.sort();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_and_bcc_reach_whom_postfix_reaches() {
    let theirs = postfix_delivered(false).await;
    let dir = temp_dir("restrict-redirect");
    let (ids, ours) = sluice_delivered(&dir, false).await;
    same_deliveries(&theirs, &ours);

    // What Postfix did, said outright (the comparison above holds Sluice
    // to it).
    let by_name = |name: &str| {
        let i = CASES.iter().position(|c| c.name == name).unwrap();
        theirs[i].clone()
    };
    assert_eq!(
        by_name("redirect"),
        pairs(&[("red-target@far.test", Some("other@relay.test"))]),
        "one copy, with the orig_to of the recipient qmgr sorts first"
    );
    assert_eq!(
        by_name("two-redirects"),
        pairs(&[("red2-target@far.test", Some("red2@relay.test"))]),
        "the last REDIRECT"
    );
    assert_eq!(
        by_name("bcc"),
        pairs(&[
            ("plain@relay.test", None),
            ("bcc@relay.test", None),
            ("bcc-target@far.test", None)
        ])
    );
    assert_eq!(
        by_name("two-bccs"),
        pairs(&[
            ("plain@relay.test", None),
            ("bcc@relay.test", None),
            ("bcc2@relay.test", None),
            ("bcc-target@far.test", None),
            ("bcc2-target@far.test", None)
        ]),
        "every BCC, not the first or the last"
    );
    assert_eq!(
        by_name("redirect-and-bcc"),
        pairs(&[("red-target@far.test", Some("bcc-target@far.test"))]),
        "the REDIRECT takes the BCC's copy too"
    );

    // Sluice says what it did, with the queue ID.
    let id = |name: &str| ids[CASES.iter().position(|c| c.name == name).unwrap()].clone();
    let redirects = events_named(&dir, "redirect");
    let red = id("redirect");
    assert!(
        redirects
            .iter()
            .any(|e| e["queue_id"] == red.as_str() && e["to"] == "red-target@far.test"),
        "{redirects:?}"
    );
    let bccs = events_named(&dir, "bcc");
    let bcc = id("bcc");
    assert!(
        bccs.iter()
            .any(|e| e["queue_id"] == bcc.as_str() && e["to"] == "bcc-target@far.test"),
        "{bccs:?}"
    );
}

/// A policy service (`check_policy_service`) on 127.0.0.1: `REDIRECT` for
/// `pol@relay.test`, a BCC that is no mailbox for `polbad@relay.test`,
/// a REDIRECT with a CR and a command after it for `polcr@relay.test`,
/// `DUNNO` otherwise.
async fn policy_server() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                let mut recipient = String::new();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(r) = line.strip_prefix("recipient=") {
                        recipient = r.to_string();
                    }
                    if !line.is_empty() {
                        continue;
                    }
                    let action = match recipient.as_str() {
                        "pol@relay.test" => "REDIRECT pol-target@far.test",
                        "polbad@relay.test" => "BCC x y@far.test",
                        "polcr@relay.test" => "REDIRECT c@far.test\rRCPT TO:<d@far.test>",
                        _ => "DUNNO",
                    };
                    let answer = format!("action={action}\n\n");
                    if write.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, task)
}

/// An address that is no mailbox, from a table or a policy service:
/// that RCPT gets `451 4.3.5` (try again later) and an
/// `access_answer_bad` event says why; the rest of the transaction is
/// untouched (the message goes to its other recipient only). A CR in
/// the answer (a table's or a policy service's) is such an error too. Postfix
/// takes any text with an `@` as the address, and ignores one without
/// (a warning, then `DUNNO`): Sluice refuses both rather than deliver to
/// a recipient the table did not mean (docs/CONFIG.md). A policy
/// service's `REDIRECT` is applied as a table's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addresses_that_are_no_mailbox_defer_and_policy_answers_apply() {
    const BAD: &str = "\
badred@relay.test REDIRECT a b@far.test
badbcc@relay.test BCC x@
crlf@relay.test BCC c@far.test\rRCPT TO:<d@far.test>
noat@relay.test REDIRECT nobody
";
    let dir = temp_dir("restrict-redirect-bad");
    let (policy, task) = policy_server().await;
    let mut cfg = sluice_config(&dir, false);
    std::fs::write(dir.join("rcpts"), BAD).unwrap();
    cfg.restrictions.recipient = format!(
        "check_recipient_access texthash:{}, check_policy_service inet:{policy}, permit",
        dir.join("rcpts").display()
    );
    let (server, addr) = start(cfg).await;
    let (mut c, _) = Client::connect_from("127.0.0.7", addr).await;
    assert!(c.cmd("EHLO client.test").await.starts_with("250"));
    assert!(c.cmd("MAIL FROM:<a@ext.test>").await.starts_with("250"));
    for bad in ["badred", "badbcc", "crlf", "noat", "polbad", "polcr"] {
        let r = c.cmd(&format!("RCPT TO:<{bad}@relay.test>")).await;
        assert!(r.starts_with("451 4.3.5 "), "{bad}: {r}");
    }
    assert!(c.cmd("RCPT TO:<plain@relay.test>").await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send(body("bad").as_bytes()).await;
    let bad_id = qid_of(&c.cmd(".").await);
    let redirected = c
        .message(
            "a@ext.test",
            &["pol@relay.test", "plain@relay.test"],
            &body("pol"),
        )
        .await;
    assert!(redirected.starts_with("250 "), "{redirected}");
    let pol_id = qid_of(&redirected);
    for id in [&bad_id, &pol_id] {
        let removed = wait_event(30, &dir, "removed", |e| e["queue_id"] == id.as_str()).await;
        assert!(removed, "{id} not done");
    }
    drop(server);
    task.abort();

    let to_of = |id: &str| -> Delivered {
        let mut d: Delivered = events_named(&dir, "delivery")
            .iter()
            .filter(|e| e["queue_id"] == id)
            .map(|e| {
                let to = e["to"].as_str().unwrap_or_default().to_string();
                (to, e["orig_to"].as_str().map(str::to_string))
            })
            .collect();
        d.sort();
        d
    };
    assert_eq!(to_of(&bad_id), pairs(&[("plain@relay.test", None)]));
    assert_eq!(
        to_of(&pol_id),
        pairs(&[("pol-target@far.test", Some("plain@relay.test"))])
    );
    let errors: Vec<String> = events_named(&dir, "access_answer_bad")
        .iter()
        .filter(|e| e["queue_id"] == bad_id.as_str())
        .map(|e| e["error"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(errors.len(), 6, "{errors:?}");
    let mailbox = errors.iter().filter(|e| e.contains("is not a mailbox"));
    assert_eq!(mailbox.count(), 3, "{errors:?}");
    let control = errors.iter().filter(|e| e.contains("control character"));
    assert_eq!(control.count(), 2, "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("needs user@domain")),
        "{errors:?}"
    );
    let diverted = |name: &str| {
        events_named(&dir, name)
            .iter()
            .any(|e| e["queue_id"] == bad_id.as_str())
    };
    assert!(!diverted("redirect") && !diverted("bcc"));
}
