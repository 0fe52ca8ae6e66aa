//! `virtual_alias_maps` for any domain (`[rewrite]`, issue 39) held to a
//! real Postfix 3.7: the same alias table (Postfix's default
//! `virtual_alias_domains = $virtual_alias_maps`: a domain listed as a
//! key is a virtual alias domain), the same mailbox domain, the same
//! messages one each; and the same decisions: the RCPT reply, the reply
//! at the end of data (a loop or an expansion over the limit defers the
//! message), and where the message went (`to=` with `orig_to=`).

use std::collections::BTreeSet;

use crate::common;
use common::postfix::{self, Postfix, Reply};
use common::*;

const MAILBOXES: &str = "a@ex.test ex.test/a/\nb@ex.test ex.test/b/\nc@ex.test ex.test/c/\n";
const VIRTUAL: &str = "\
alias.test        anything
catch.test        anything
info@alias.test   a@ex.test
team@alias.test   a@ex.test, b@ex.test, out@far.test
chain@alias.test  team@alias.test
fwd@alias.test    out@far.test
plus@alias.test   b@ex.test
dom.test          anything
@dom.test         @ex.test
self@ex.test      self@ex.test
a@ex.test         a@ex.test, archive@far.test
x@far.test        c@ex.test
loop1@alias.test  loop2@alias.test
loop2@alias.test  loop1@alias.test
big@alias.test    a@ex.test, b@ex.test, c@ex.test, d@far.test, e@far.test, f@far.test
@catch.test       c@ex.test
";

const CASES: [&str; 15] = [
    "info@alias.test",
    "team@alias.test",
    "chain@alias.test",
    "fwd@alias.test",
    "plus+tag@alias.test",
    "b@dom.test",
    "a@ex.test",
    "b@ex.test",
    "x@far.test",
    "y@far.test",
    "anyone@catch.test",
    "nobody@alias.test",
    "loop1@alias.test",
    "big@alias.test",
    "INFO@Alias.Test",
];

/// One case's decision: the RCPT reply, the end-of-data reply (when a
/// recipient was taken), and the deliveries (to, orig_to), lower case.
type Decision = (
    (u16, Option<String>),
    Option<(u16, Option<String>)>,
    BTreeSet<(String, String)>,
);

const LIMIT: &str = "5";

/// Sends each case in one session: (RCPT reply, end-of-data reply, queue
/// ID when queued).
async fn send_all(
    client: &mut Client,
) -> Vec<((u16, Option<String>), Option<Reply>, Option<String>)> {
    let mut out = Vec::new();
    for rcpt in CASES {
        assert!(client
            .cmd("MAIL FROM:<s@client.test>")
            .await
            .starts_with("250"));
        let r = Reply::parse(&client.cmd(&format!("RCPT TO:<{rcpt}>")).await);
        if r.code != 250 {
            assert!(client.cmd("RSET").await.starts_with("250"));
            out.push(((r.code, r.enhanced), None, None));
            continue;
        }
        assert!(client.cmd("DATA").await.starts_with("354"));
        client.send(body(rcpt).as_bytes()).await;
        let raw = client.cmd(".").await;
        let end = Reply::parse(&raw);
        let qid = (end.code == 250).then(|| qid_of(&raw));
        out.push(((r.code, r.enhanced), Some(end), qid));
    }
    out
}

fn decision(
    sent: ((u16, Option<String>), Option<Reply>, Option<String>),
    to: BTreeSet<(String, String)>,
) -> Decision {
    let (rcpt, end, _) = sent;
    (rcpt, end.map(|e| (e.code, e.enhanced)), to)
}

async fn postfix_decisions() -> Vec<Decision> {
    let postfix = Postfix::start_with(
        &[("mailboxes", MAILBOXES), ("virtual", VIRTUAL)],
        &[
            ("recipient_delimiter", "+"),
            ("virtual_mailbox_domains", "ex.test"),
            (
                "virtual_mailbox_maps",
                "texthash:$config_directory/mailboxes",
            ),
            ("virtual_alias_maps", "texthash:$config_directory/virtual"),
            ("virtual_alias_expansion_limit", LIMIT),
        ],
        "",
    );
    let mut session = postfix.session().await;
    let sent = send_all(&mut session.client).await;
    let queued: Vec<String> = sent.iter().filter_map(|s| s.2.clone()).collect();
    let deliveries = postfix.wait_done(&queued, 30).await;
    sent.into_iter()
        .map(|s| {
            let to =
                s.2.as_ref()
                    .map(|q| postfix::sent_pairs(&deliveries, q))
                    .unwrap_or_default();
            decision(s, to)
        })
        .collect()
}

fn sluice_config(dir: &std::path::Path, sink: std::net::SocketAddr) -> sluice::config::Config {
    let mut cfg = config(dir, Some(sink));
    static_tables(
        &mut cfg,
        dir,
        &[("mailboxes", MAILBOXES), ("virtual", VIRTUAL)],
    );
    cfg.recipient_delimiter = "+".into();
    cfg.local.domains = vec!["ex.test".parse().unwrap()];
    cfg.local.mailbox_table = Some("mailboxes".into());
    cfg.local.maildir_base = Some(dir.join("mail"));
    cfg.rewrite.virtual_alias_maps = vec!["virtual".into()];
    cfg.rewrite.virtual_alias_expansion_limit = LIMIT.parse().unwrap();
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_aliases_are_decided_and_delivered_as_postfix_does() {
    let theirs = postfix_decisions().await;
    let dir = temp_dir("virtual-alias");
    std::fs::create_dir_all(&*dir).unwrap();
    let sink = recording_sink().await;
    let (server, addr) = start(sluice_config(&dir, sink.addr)).await;
    let mut c = Client::ready(addr).await;
    let sent = send_all(&mut c).await;
    let expected: usize = theirs.iter().map(|(_, _, to)| to.len()).sum();
    assert!(
        wait_until(30, || sent_count(&dir) >= expected).await,
        "{}",
        sent_count(&dir)
    );
    let ours: Vec<Decision> = sent
        .into_iter()
        .map(|s| {
            let to =
                s.2.as_ref()
                    .map(|q| sent_pairs(&dir, q))
                    .unwrap_or_default();
            decision(s, to)
        })
        .collect();
    for ((case, ours), theirs) in CASES.iter().zip(&ours).zip(&theirs) {
        assert_eq!(ours, theirs, "{case}");
    }
    // Not vacuous: one-to-many, recursion, a catch-all, a refusal and a
    // deferral all happened.
    let all: BTreeSet<&String> = theirs
        .iter()
        .flat_map(|(_, _, to)| to.iter().map(|t| &t.0))
        .collect();
    for want in [
        "out@far.test",
        "archive@far.test",
        "b+tag@ex.test",
        "c@ex.test",
    ] {
        assert!(all.contains(&want.to_string()), "{want}: {all:?}");
    }
    assert!(theirs.iter().any(|(r, _, _)| r.0 == 550));
    assert!(theirs
        .iter()
        .any(|(_, e, _)| e.as_ref().is_some_and(|e| e.0 == 451)));
    server.shutdown().await;
}

/// Hostile tables cost bounded work and defer, never lose, the message:
/// one address that becomes 10,000 (over the default limit of 1,000),
/// and a loop (stopped at the default depth of 1,000), each answered
/// `451 4.6.0` at the end of data and logged as a typed warning; a
/// sendmail submission to a forwarding-only domain is expanded as SMTP
/// mail is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_outs_and_loops_are_deferred_and_sendmail_is_expanded() {
    let dir = temp_dir("virtual-alias-hostile");
    std::fs::create_dir_all(&*dir).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    let many: Vec<String> = (0..10_000).map(|i| format!("u{i}@far.test")).collect();
    let text = format!(
        "fwd.test x\nbig@fwd.test {}\nl1@fwd.test l2@fwd.test\nl2@fwd.test l1@fwd.test\nlist@fwd.test a@far.test, b@far.test\n",
        many.join(", ")
    );
    std::fs::write(dir.join("virtual"), text).unwrap();
    cfg.rewrite.virtual_alias_maps = vec![format!("texthash:{}", dir.join("virtual").display())];
    let conf = client_config(&dir, &cfg.data_dir).display().to_string();
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    for to in ["big@fwd.test", "l1@fwd.test"] {
        let r = Reply::parse(&c.message("s@client.test", &[to], &body(to)).await);
        assert_eq!(
            (r.code, r.enhanced.as_deref()),
            (451, Some("4.6.0")),
            "{to}: {r:?}"
        );
    }
    let limits = || {
        events_named(&dir, "warning")
            .iter()
            .filter(|w| w["kind"] == "virtual_alias_limit")
            .count()
    };
    assert!(wait_until(10, || limits() >= 2).await, "{}", limits());
    assert_eq!(limits(), 2);
    // Nothing was queued for either.
    assert!(events_named(&dir, "received").is_empty());

    let sendmail = dir.join("sendmail");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &sendmail).unwrap();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(sendmail);
        cmd.args(["-C", &conf, "-f", "s@ours.test", "list@fwd.test"]);
        output_of(cmd, b"Subject: s\n\nbody\n")
    })
    .await
    .unwrap();
    assert_eq!(out.0, 0, "{out:?}");
    assert!(wait_until(15, || sink.count() == 1).await);
    let mut got = sink.messages()[0].recipients.clone();
    got.sort();
    assert_eq!(got, vec!["a@far.test", "b@far.test"]);
    server.shutdown().await;
}
