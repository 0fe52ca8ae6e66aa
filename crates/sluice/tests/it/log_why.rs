//! The mail log answers why (issue 35): an alias member's delivery
//! names the address given (`orig_to`), counters and delays are numbers,
//! a session's end is a typed event, rejects and connection failures read
//! as Postfix's, and a reload's last line says what waits for a restart.
//! (Apart from `logging.rs`: its test owns the process's library-log
//! bridge, which the first daemon of a test binary installs.)

use crate::common;

use common::*;

/// A static table file in `dir` named `name`, as a `[tables]` entry.
fn table(dir: &std::path::Path, name: &str) -> sluice::config::tables::TableConfig {
    let mut t: sluice::config::tables::TableConfig = toml::from_str("kind = \"static\"").unwrap();
    t.path = Some(dir.join(name));
    t
}

/// The review's "why did bob get mail sent to info@?": a delivery to an
/// alias member says the address given (`orig_to`, as Postfix), a direct
/// one does not; a Maildir delivery is `virtual`'s; the delay is a
/// number; listeners are named by their kind; a session's end is a
/// typed event with its counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_to_an_alias_member_names_the_address_given() {
    let dir = temp_dir("log-orig-to");
    std::fs::write(
        dir.join("mailboxes"),
        "alice@local.test alice/Maildir/\nbob@local.test bob/Maildir/\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("aliases"),
        "info@local.test alice@local.test, bob@local.test\n",
    )
    .unwrap();
    let mut cfg = config(&dir, None);
    cfg.local.domains = vec!["local.test".parse().unwrap()];
    cfg.local.mailbox_table = Some("mailboxes".into());
    cfg.local.alias_table = Some("aliases".into());
    cfg.local.maildir_base = Some(dir.join("mail"));
    cfg.tables
        .insert("mailboxes".into(), table(&dir, "mailboxes"));
    cfg.tables.insert("aliases".into(), table(&dir, "aliases"));
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@remote.test", &["Info@local.test"], &body("info"))
        .await;
    let via_alias = qid_of(&r);
    let r = c
        .message("s@remote.test", &["alice@local.test"], &body("direct"))
        .await;
    let direct = qid_of(&r);
    assert!(c.cmd("QUIT").await.starts_with("221"));
    let path: &std::path::Path = &dir;
    let sent = |id: &str, n: usize| {
        let id = id.to_string();
        move || {
            deliveries(path, &id)
                .iter()
                .filter(|e| e["status"] == "sent")
                .count()
                == n
        }
    };
    assert!(
        wait_until(15, sent(&via_alias, 2)).await,
        "{}",
        read_log(&dir)
    );
    assert!(wait_until(15, sent(&direct, 1)).await, "{}", read_log(&dir));
    assert!(wait_event(10, &dir, "session_end", |e| e["cause"] == "quit").await);
    server.shutdown().await;
    let log = read_log(&dir);
    for member in ["alice@local.test", "bob@local.test"] {
        let e = deliveries(&dir, &via_alias)
            .into_iter()
            .find(|e| e["to"] == member)
            .unwrap_or_else(|| panic!("{member}: {log}"));
        assert_eq!(e["orig_to"], "Info@local.test", "{e}");
        assert_eq!(e["component"], "virtual", "{e}");
        assert_eq!(e["relay"], "virtual", "{e}");
        assert_eq!(e["transport"], "maildir", "{e}");
        assert!(e["delay"].is_f64() || e["delay"].is_u64(), "{e}");
        let text = e["text"].as_str().unwrap();
        let words =
            format!("{via_alias}: to=<{member}>, orig_to=<Info@local.test>, relay=virtual, delay=");
        assert!(text.starts_with(&words), "{text}");
    }
    let alone = &deliveries(&dir, &direct)[0];
    assert!(alone["orig_to"].is_null(), "{alone}");
    assert!(
        !alone["text"].as_str().unwrap().contains("orig_to"),
        "{alone}"
    );
    let listening = events_named(&dir, "listening");
    assert_eq!(listening[0]["kind"], "smtp", "{listening:?}");
    assert!(listening[0]["text"].as_str().unwrap().ends_with(" (smtp)"));
    let ends = events_named(&dir, "session_end");
    let end = ends.iter().find(|e| e["cause"] == "quit").unwrap();
    assert_eq!((&end["messages"], &end["errors"]), (&2.into(), &0.into()));
    assert_eq!(end["client_ip"], "127.0.0.1");
    assert!(end["client_port"].is_u64());
    assert!(
        !events(&dir)
            .iter()
            .any(|e| e["event"] == "log" && e["text"].as_str().unwrap().starts_with("disconnect")),
        "{log}"
    );
}

/// Rate-limit refusals say at which command, and for which sender and
/// recipient, as Postfix's `NOQUEUE: reject: RCPT from …; from=<…> to=<…>
/// proto=ESMTP helo=<…>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_refusal_names_the_stage_and_the_sender() {
    let dir = temp_dir("log-rate");
    let mut cfg = untrusted_config(&dir, None);
    cfg.smtpd.client_message_rate_limit = 1;
    cfg.smtpd.client_recipient_rate_limit = 1;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<x@ours.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<y@ours.test>").await;
    assert!(r.starts_with("450 4.7.1"), "{r}");
    assert!(c.cmd("RSET").await.starts_with("250"));
    let r = c.cmd("MAIL FROM:<c@d.test>").await;
    assert!(r.starts_with("450 4.7.1"), "{r}");
    server.shutdown().await;
    let rejects: Vec<_> = events_named(&dir, "reject")
        .into_iter()
        .filter(|e| e["cause"] == "rate_limit")
        .collect();
    let log = read_log(&dir);
    let rcpt = rejects.iter().find(|e| e["stage"] == "rcpt").expect(&log);
    assert_eq!(rcpt["from"], "a@b.test");
    assert_eq!(rcpt["to"], "y@ours.test");
    assert_eq!(
        (&rcpt["helo"], &rcpt["proto"]),
        (&"client.test".into(), &"ESMTP".into())
    );
    assert_eq!(
        rcpt["text"],
        "NOQUEUE: reject: RCPT from [127.0.0.1]: 450 4.7.1 Error: too many recipients from 127.0.0.1; from=<a@b.test> to=<y@ours.test> proto=ESMTP helo=<client.test>"
    );
    let mail = rejects.iter().find(|e| e["stage"] == "mail").expect(&log);
    assert_eq!(mail["from"], "c@d.test");
    assert!(mail["to"].is_null());
    assert_eq!(
        mail["text"],
        "NOQUEUE: reject: MAIL from [127.0.0.1]: 450 4.7.1 Error: too much mail from 127.0.0.1; from=<c@d.test> proto=ESMTP helo=<client.test>"
    );
}

/// A refused connection is one line, in plain words (`Connection
/// refused`, not Rust's `(os error 111)`), and so is the deferral.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_one_plain_line() {
    let dir = temp_dir("log-refused");
    let hop = reserve();
    let (server, addr) = start(config(&dir, Some(hop.addr))).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@b.test", &["x@far.test"], &body("refused"))
        .await;
    let id = qid_of(&r);
    let deferred =
        |e: &serde_json::Value| e["queue_id"] == id.as_str() && e["status"] == "deferred";
    assert!(
        wait_event(15, &dir, "delivery", deferred).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    let all = events(&dir);
    let first = all
        .iter()
        .position(|e| e["event"] == "delivery" && deferred(e))
        .unwrap();
    let tried: Vec<_> = all[..first]
        .iter()
        .filter(|e| e["event"] == "connect_failed")
        .collect();
    assert_eq!(tried.len(), 1, "one line for one attempt: {tried:?}");
    let port = hop.addr.port();
    assert_eq!(
        tried[0]["text"],
        format!("connect to 127.0.0.1[127.0.0.1]:{port}: Connection refused")
    );
    let reason = all[first]["reason"].as_str().unwrap();
    assert!(!reason.contains("os error"), "{reason}");
    assert!(reason.ends_with("Connection refused"), "{reason}");
}

/// A reload whose changes all wait for a restart says so in its last
/// line (not "nothing changed"); a file with a misspelt key is refused
/// in one readable line naming the file, line, column and key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_says_what_waits_and_why_a_file_is_refused() {
    use sluice::config::Config;
    let dir = temp_dir("log-reload");
    let path = dir.join("sluice.toml");
    let file = |data_dir: &str, extra: &str| {
        format!(
            "hostname = \"mx.test\"\ndata_dir = \"{d}/{data_dir}\"\nlog_file = \"{d}/maillog\"\nlog_format = \"json\"\n\n[smtpd]\nlisten = [\"127.0.0.1:0\"]\n{extra}\n[dns]\nnameservers = [\"127.0.0.1:9\"]\n",
            d = dir.display()
        )
    };
    std::fs::write(&path, file("var", "")).unwrap();
    let mut server = sluice::daemon::Server::start(Config::load(&path).unwrap())
        .await
        .unwrap();
    std::fs::write(&path, file("elsewhere", "")).unwrap();
    server
        .reload(&sluice::config::source::Source::new(
            Some(&path),
            Vec::new(),
        ))
        .await;
    let later = |e: &serde_json::Value| {
        e["result"] == "applied" && e["later"] == serde_json::json!(["data_dir"])
    };
    assert!(
        wait_event(10, &dir, "reload", later).await,
        "{}",
        read_log(&dir)
    );
    let last = events_named(&dir, "reload").pop().unwrap();
    assert_eq!(last["sections"], serde_json::json!([]));
    assert_eq!(
        last["text"],
        "reload: nothing applied now; data_dir takes effect at the next restart"
    );
    std::fs::write(&path, file("var", "client_message_rate_limt = 3\n")).unwrap();
    server
        .reload(&sluice::config::source::Source::new(
            Some(&path),
            Vec::new(),
        ))
        .await;
    let refused = |e: &serde_json::Value| e["result"] == "refused";
    assert!(
        wait_event(10, &dir, "reload", refused).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    let e = events_named(&dir, "reload")
        .into_iter()
        .find(refused)
        .unwrap();
    assert_eq!((&e["cause"], &e["line"]), (&"config".into(), &8.into()));
    let error = e["error"].as_str().unwrap();
    assert!(!error.contains(" | "), "{error}");
    assert!(error.len() < 300, "{error}");
    assert_eq!(
        error,
        format!(
            "{}: line 8, column 1: unknown field `client_message_rate_limt` (did you mean `client_message_rate_limit`?)",
            path.display()
        )
    );
}
