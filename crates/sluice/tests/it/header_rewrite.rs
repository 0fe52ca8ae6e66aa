//! Address rewriting on the header and on the way out (`[rewrite]`:
//! Postfix's canonical maps with `canonical_classes`,
//! `sender_canonical_classes`, `recipient_canonical_classes`;
//! `local_header_rewrite_clients`, `remote_header_rewrite_domain`;
//! `masquerade_domains`, `masquerade_exceptions`, `masquerade_classes`;
//! `smtp_generic_maps`; issue 39) held to a real Postfix 3.7: the same
//! tables and messages, Postfix relaying to one recording sink and
//! Sluice to another; what each sink got — the envelope, and the
//! addresses of the From:, Sender:, Reply-To:, To: and Cc: fields — is
//! the same. (Postfix writes a field it rewrote anew from its tokens;
//! Sluice changes only the addresses: the addresses are compared, and
//! Sluice's bytes checked on their own.)

use std::collections::BTreeSet;

use crate::common;
use common::postfix::Postfix;
use common::*;
use sluice::config::rewrite::RewriteConfig;
use sluice::intake::rewrite::address_list;
use sluice_bench::sink::Sink;

const SENDER_CANONICAL: &str = "alice@old.test alice.smith@new.test\n@legacy.test @new.test\n";
const RECIPIENT_CANONICAL: &str = "bob@corp.test robert@corp.test\n";
const CANONICAL: &str = "robert@corp.test rob@corp.test\ncarol@x.test carol@y.test\n";
const GENERIC: &str = "alice@old.test alice@public.test\n@corp.test @corp.example\n";

/// One message: envelope sender, recipients, and its address fields.
struct Case {
    from: &'static str,
    to: &'static [&'static str],
    head: &'static str,
}

const CANONICAL_CASE: Case = Case {
    from: "alice@old.test",
    to: &["b@far.test"],
    head: "From: \"Alice A.\" <alice@old.test> (work)\r\n\
           To: Bob <bob@corp.test>, carol@x.test\r\n\
           Cc: Team: dave+y@corp.test,\r\n <zed+tag@legacy.test>;\r\n\
           Reply-To: \"a b\"@legacy.test, alice@old.test\r\n\
           Sender: bob@corp.test\r\n",
};

const MASQUERADE_CASE: Case = Case {
    from: "u@host.sub.example.com",
    to: &["v@h.dept.example.com", "w@far.test"],
    head: "From: U <u@host.sub.example.com>\r\n\
           To: v@h.dept.example.com, root@h.example.com, x@example.com\r\n\
           Cc: w@far.test (W)\r\n\
           Reply-To: u@mail.example.com\r\n",
};

const EXTENSION_CASE: Case = Case {
    from: "zed+tag@legacy.test",
    to: &["bob+z@corp.test"],
    head: "From: zed+tag@legacy.test\r\nTo: bob+z@corp.test\r\n",
};

const BARE_CASE: Case = Case {
    from: "alice@old.test",
    to: &["b@far.test"],
    head: "From: alice\r\nTo: bob, carol@x.test\r\n",
};

const GENERIC_CASE: Case = Case {
    from: "alice+x@old.test",
    to: &["bob+z@corp.test", "c@far.test"],
    head: "From: Alice <alice@old.test>\r\n\
           To: bob+z@corp.test, c@far.test\r\n\
           Cc: \"Team\" <team@corp.test>\r\n",
};

fn text(i: usize, case: &Case) -> String {
    format!(
        "{}Subject: case {i}\r\nMessage-ID: <case{i}@client.test>\r\n\r\nHello.\r\n",
        case.head
    )
}

/// What a sink got of one message.
#[derive(Debug, PartialEq, Eq)]
struct Delivered {
    sender: String,
    recipients: BTreeSet<String>,
    /// (field, its addresses), in order, for the fields compared.
    fields: Vec<(String, Vec<String>)>,
}

const FIELDS: [&str; 5] = ["from", "sender", "reply-to", "to", "cc"];

/// The compared fields of `message`'s header, unfolded.
fn fields(message: &[u8]) -> Vec<(String, Vec<String>)> {
    let text = String::from_utf8_lossy(message);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let unfolded = head.replace("\r\n ", " ").replace("\r\n\t", " ");
    unfolded
        .split("\r\n")
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            let name = name.trim().to_ascii_lowercase();
            FIELDS.contains(&name.as_str()).then(|| {
                let found = address_list::addresses(value.as_bytes());
                (name, found.into_iter().map(|f| f.address).collect())
            })
        })
        .collect()
}

/// The `n` messages `sink` got, by their case number (Subject).
fn delivered(sink: &Sink, n: usize) -> Vec<Delivered> {
    let got = sink.messages();
    (0..n)
        .map(|i| {
            let subject = format!("Subject: case {i}\r\n");
            let mine: Vec<_> = got
                .iter()
                .filter(|m| String::from_utf8_lossy(&m.body).contains(&subject))
                .collect();
            assert!(!mine.is_empty(), "case {i} not delivered");
            Delivered {
                sender: mine[0].sender.to_ascii_lowercase(),
                recipients: mine
                    .iter()
                    .flat_map(|m| m.recipients.iter().map(|r| r.to_ascii_lowercase()))
                    .collect(),
                fields: fields(&mine[0].body),
            }
        })
        .collect()
}

/// The cases through a Postfix with `files` and `main_cf`, from `client`.
async fn through_postfix(
    files: &[(&str, &str)],
    main_cf: &[(&str, &str)],
    client: &str,
    cases: &[&Case],
) -> Vec<Delivered> {
    let sink = recording_sink().await;
    let relayhost = format!("[127.0.0.1]:{}", sink.addr.port());
    let mut cf = vec![
        ("relayhost", relayhost.as_str()),
        ("default_transport", "smtp"),
        ("relay_transport", "smtp"),
        ("mynetworks", "127.0.0.0/8"),
        ("recipient_delimiter", "+"),
    ];
    cf.extend_from_slice(main_cf);
    let postfix = Postfix::start_with(files, &cf, "");
    let mut session = postfix.session_from(client).await;
    for (i, case) in cases.iter().enumerate() {
        let r = session
            .client
            .message(case.from, case.to, &text(i, case))
            .await;
        assert!(r.starts_with("250"), "case {i}: {r}");
    }
    let n = cases.len() as u64;
    assert!(
        wait_until(30, || sink.count() >= n).await,
        "{}",
        postfix.maillog()
    );
    delivered(&sink, cases.len())
}

/// The cases through Sluice with `[rewrite]` as `tune` sets it (table
/// files written in its directory), from `client`.
async fn through_sluice(
    name: &str,
    files: &[(&str, &str)],
    tune: impl FnOnce(&mut RewriteConfig, &dyn Fn(&str) -> Vec<String>),
    client: &str,
    cases: &[&Case],
) -> (Vec<Delivered>, TestDir, Vec<String>) {
    let dir = temp_dir(name);
    std::fs::create_dir_all(&*dir).unwrap();
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.recipient_delimiter = "+".into();
    let table = |file: &str| vec![format!("texthash:{}", dir.join(file).display())];
    tune(&mut cfg.rewrite, &table);
    let (server, addr) = start(cfg).await;
    let (mut c, greeting) = Client::connect_from(client, addr).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    assert!(c.cmd("EHLO client.test").await.starts_with("250"));
    for (i, case) in cases.iter().enumerate() {
        let r = c.message(case.from, case.to, &text(i, case)).await;
        assert!(r.starts_with("250"), "case {i}: {r}");
    }
    let n = cases.len() as u64;
    assert!(
        wait_until(30, || sink.count() >= n).await,
        "{}",
        read_log(&dir)
    );
    let got = delivered(&sink, cases.len());
    let raw = (0..cases.len())
        .map(|i| {
            let subject = format!("Subject: case {i}\r\n");
            sink.messages()
                .iter()
                .map(|m| String::from_utf8_lossy(&m.body).into_owned())
                .find(|m| m.contains(&subject))
                .unwrap_or_default()
        })
        .collect();
    server.shutdown().await;
    (got, dir, raw)
}

const TABLES: [(&str, &str); 3] = [
    ("scanon", SENDER_CANONICAL),
    ("rcanon", RECIPIENT_CANONICAL),
    ("canon", CANONICAL),
];

const POSTFIX_MAPS: [(&str, &str); 3] = [
    ("sender_canonical_maps", "texthash:$config_directory/scanon"),
    (
        "recipient_canonical_maps",
        "texthash:$config_directory/rcanon",
    ),
    ("canonical_maps", "texthash:$config_directory/canon"),
];

fn canonical_maps(rw: &mut RewriteConfig, table: &dyn Fn(&str) -> Vec<String>) {
    rw.sender_canonical_maps = table("scanon");
    rw.recipient_canonical_maps = table("rcanon");
    rw.canonical_maps = table("canon");
}

fn own(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn compare(ours: &[Delivered], theirs: &[Delivered]) {
    assert_eq!(ours.len(), theirs.len());
    for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
        assert_eq!(o, t, "case {i}");
    }
}

fn addresses_of<'a>(d: &'a Delivered, field: &str) -> Vec<&'a str> {
    d.fields
        .iter()
        .filter(|(f, _)| f == field)
        .flat_map(|(_, a)| a.iter().map(String::as_str))
        .collect()
}

/// Canonical maps (default classes) and masquerading on a local client's
/// header and envelope: the same as Postfix's, and Sluice changed only
/// the addresses' bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_are_rewritten_as_postfix_rewrites_them() {
    let cases = [&CANONICAL_CASE, &MASQUERADE_CASE, &EXTENSION_CASE];
    let mut cf = POSTFIX_MAPS.to_vec();
    cf.push(("masquerade_domains", "!dept.example.com, example.com"));
    cf.push(("masquerade_exceptions", "root"));
    let theirs = through_postfix(&TABLES, &cf, "127.0.0.1", &cases).await;
    let (ours, _dir, raw) = through_sluice(
        "header-rewrite",
        &TABLES,
        |rw, table| {
            canonical_maps(rw, table);
            rw.masquerade_domains = own(&["!dept.example.com", "example.com"]);
            rw.masquerade_exceptions = own(&["root"]);
        },
        "127.0.0.1",
        &cases,
    )
    .await;
    compare(&ours, &theirs);
    // Not vacuous: headers were rewritten by each table and masqueraded.
    let first = &theirs[0];
    assert_eq!(addresses_of(first, "from"), ["alice.smith@new.test"]);
    assert_eq!(addresses_of(first, "to"), ["rob@corp.test", "carol@y.test"]);
    assert_eq!(
        addresses_of(first, "reply-to"),
        ["a b@new.test", "alice.smith@new.test"]
    );
    assert_eq!(addresses_of(first, "sender"), ["bob@corp.test"]);
    assert_eq!(addresses_of(&theirs[1], "from"), ["u@example.com"]);
    assert_eq!(theirs[1].sender, "u@example.com");
    assert_eq!(addresses_of(&theirs[2], "to"), ["rob+z@corp.test"]);
    // Sluice's bytes: only the addr-specs changed.
    for line in [
        "\r\nFrom: \"Alice A.\" <alice.smith@new.test> (work)\r\n",
        "\r\nTo: Bob <rob@corp.test>, carol@y.test\r\n",
        "\r\nCc: Team: dave+y@corp.test,\r\n <zed+tag@legacy.test>;\r\n",
        "\r\nReply-To: \"a b\"@new.test, alice.smith@new.test\r\n",
        "\r\nSender: bob@corp.test\r\n",
    ] {
        assert!(raw[0].contains(line), "{line:?} in {}", raw[0]);
    }
}

/// `canonical_classes` and the others limited to the envelope: the
/// envelope is rewritten, the header left as it was (as Postfix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_only_classes_leave_the_header_alone() {
    let cases = [&CANONICAL_CASE, &MASQUERADE_CASE];
    let mut cf = POSTFIX_MAPS.to_vec();
    cf.extend([
        ("canonical_classes", "envelope_sender, envelope_recipient"),
        ("sender_canonical_classes", "envelope_sender"),
        ("recipient_canonical_classes", "envelope_recipient"),
        ("masquerade_domains", "example.com"),
        ("masquerade_classes", "envelope_sender"),
    ]);
    let theirs = through_postfix(&TABLES, &cf, "127.0.0.1", &cases).await;
    let (ours, _dir, _) = through_sluice(
        "header-rewrite-classes",
        &TABLES,
        |rw, table| {
            canonical_maps(rw, table);
            rw.canonical_classes = own(&["envelope_sender", "envelope_recipient"]);
            rw.sender_canonical_classes = own(&["envelope_sender"]);
            rw.recipient_canonical_classes = own(&["envelope_recipient"]);
            rw.masquerade_domains = own(&["example.com"]);
            rw.masquerade_classes = own(&["envelope_sender"]);
        },
        "127.0.0.1",
        &cases,
    )
    .await;
    compare(&ours, &theirs);
    assert_eq!(theirs[0].sender, "alice.smith@new.test");
    assert_eq!(addresses_of(&theirs[0], "from"), ["alice@old.test"]);
    assert_eq!(theirs[1].sender, "u@example.com");
    assert_eq!(addresses_of(&theirs[1], "from"), ["u@host.sub.example.com"]);
}

/// A client that is not one of this machine's addresses (127.0.0.2:
/// Postfix listens on 127.0.0.1 only) gets its header rewritten only
/// when `remote_header_rewrite_domain` is set; then an address without
/// a domain gets that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_clients_header_is_rewritten_only_with_a_remote_domain() {
    let cases = [&CANONICAL_CASE, &BARE_CASE];
    let theirs = through_postfix(&TABLES, &POSTFIX_MAPS, "127.0.0.2", &cases).await;
    let (ours, _dir, _) = through_sluice(
        "header-rewrite-remote",
        &TABLES,
        canonical_maps,
        "127.0.0.2",
        &cases,
    )
    .await;
    compare(&ours, &theirs);
    assert_eq!(theirs[0].sender, "alice.smith@new.test");
    assert_eq!(addresses_of(&theirs[0], "from"), ["alice@old.test"]);

    let mut cf = POSTFIX_MAPS.to_vec();
    cf.push(("remote_header_rewrite_domain", "remote.test"));
    let theirs = through_postfix(&TABLES, &cf, "127.0.0.2", &cases).await;
    let (ours, _dir, _) = through_sluice(
        "header-rewrite-remote-domain",
        &TABLES,
        |rw, table| {
            canonical_maps(rw, table);
            rw.remote_header_rewrite_domain = "remote.test".into();
        },
        "127.0.0.2",
        &cases,
    )
    .await;
    compare(&ours, &theirs);
    assert_eq!(addresses_of(&theirs[0], "from"), ["alice.smith@new.test"]);
    assert_eq!(addresses_of(&theirs[1], "from"), ["alice@remote.test"]);
    assert_eq!(
        addresses_of(&theirs[1], "to"),
        ["bob@remote.test", "carol@y.test"]
    );
}

/// `smtp_generic_maps` on the way out: the envelope and the header as
/// Postfix's SMTP client sends them; Sluice's log keeps the original
/// recipients (as Postfix's `to=`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_maps_rewrite_what_goes_out_as_postfix() {
    let files = [("generic", GENERIC)];
    let cases = [&GENERIC_CASE, &EXTENSION_CASE];
    let cf = [("smtp_generic_maps", "texthash:$config_directory/generic")];
    let theirs = through_postfix(&files, &cf, "127.0.0.1", &cases).await;
    let (ours, dir, _) = through_sluice(
        "header-rewrite-generic",
        &files,
        |rw, table| rw.smtp_generic_maps = table("generic"),
        "127.0.0.1",
        &cases,
    )
    .await;
    compare(&ours, &theirs);
    assert_eq!(theirs[0].sender, "alice@public.test");
    let want: BTreeSet<String> = ["bob+z@corp.example", "c@far.test"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(theirs[0].recipients, want);
    assert_eq!(addresses_of(&theirs[0], "cc"), ["team@corp.example"]);
    let logged: BTreeSet<String> = events_named(&dir, "delivery")
        .iter()
        .filter(|e| e["status"] == "sent")
        .map(|e| e["to"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(logged.contains("bob+z@corp.test"), "{logged:?}");
    assert!(!logged.contains("bob+z@corp.example"), "{logged:?}");
}

/// A generic table that cannot answer defers the delivery (`4.3.0`),
/// never sends the message unmapped nor bounces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generic_table_that_cannot_answer_defers() {
    let dir = temp_dir("header-rewrite-generic-down");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    // A socketmap server that is not there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    cfg.rewrite.smtp_generic_maps = vec![format!("socketmap:inet:127.0.0.1:{port}:generic")];
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@ours.test", &["b@far.test"], &body("down"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    assert!(wait_event(15, &dir, "delivery", |e| e["queue_id"] == qid.as_str()).await);
    let d = deliveries(&dir, &qid);
    assert_eq!(
        (d[0]["status"].as_str(), d[0]["dsn"].as_str()),
        (Some("deferred"), Some("4.3.0")),
        "{d:?}"
    );
    assert_eq!(sink.count(), 0);
    server.shutdown().await;
}

/// Header checks see the header as it came, before its addresses are
/// rewritten (Postfix's cleanup checks a header, then rewrites it): a
/// check on the old From: address refuses the message on both servers,
/// a check on the rewritten one refuses it on neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_checks_see_the_header_before_it_is_rewritten() {
    const CHECKS: &str = "/^From:.*alice@old\\.test/ REJECT old address\n/^From:.*zed@new\\.test/ REJECT new address\n";
    let message = |from: &str| format!("From: A <{from}>\r\nSubject: order\r\n\r\nbody\r\n");
    let postfix = Postfix::start_with(
        &[("canon", SENDER_CANONICAL), ("checks", CHECKS)],
        &[
            ("canonical_maps", "texthash:$config_directory/canon"),
            ("header_checks", "regexp:$config_directory/checks"),
        ],
        "",
    );
    let mut theirs = Vec::new();
    let mut c = postfix.session().await.client;
    for from in ["alice@old.test", "zed@legacy.test"] {
        theirs.push(
            c.message("s@client.test", &["b@far.test"], &message(from))
                .await,
        );
    }
    let dir = temp_dir("header-checks-order");
    std::fs::create_dir_all(&*dir).unwrap();
    std::fs::write(dir.join("canon"), SENDER_CANONICAL).unwrap();
    std::fs::write(dir.join("checks"), CHECKS).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.rewrite.canonical_maps = vec![format!("texthash:{}", dir.join("canon").display())];
    cfg.content_checks.header_checks = vec![format!("regexp:{}", dir.join("checks").display())];
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let mut ours = Vec::new();
    for from in ["alice@old.test", "zed@legacy.test"] {
        ours.push(
            c.message("s@client.test", &["b@far.test"], &message(from))
                .await,
        );
    }
    let code = |r: &String| r.get(..9).unwrap_or_default().to_string();
    let theirs: Vec<String> = theirs.iter().map(code).collect();
    assert_eq!(ours.iter().map(code).collect::<Vec<_>>(), theirs);
    assert_eq!(theirs, ["550 5.7.1", "250 2.0.0"]);
    // The message that passed was rewritten on the way (not vacuous).
    assert!(wait_until(15, || sink.count() == 1).await);
    let text = String::from_utf8_lossy(&sink.messages()[0].body).to_string();
    assert!(text.contains("zed@new.test"), "{text}");
    server.shutdown().await;
}
