//! Forwarding that still passes SPF and DMARC (issue 39): SRS and ARC
//! between two Sluices and a real nsd.
//!
//! origin.test publishes SPF `-all` for 127.0.0.7 only and DMARC
//! `p=reject`, and DKIM-signs its mail. Sluice A (mx-a.test) gets a
//! message from 127.0.0.7 for its alias fwd@a.test, which points at
//! x@ours.test on Sluice B (mx-b.test, `sender_auth`, `dmarc_reject`);
//! A's SRS domain srs.test allows loopback in SPF and publishes A's ARC
//! key. Without SRS, B would see SPF fail for origin.test from A's
//! address; with it, SPF passes for srs.test, and A's ARC seal verifies
//! (at B, and in a real rspamd's ARC module on the same DNS).
//! A bounce to the SRS address reaches the original sender through A;
//! forged, expired and malformed SRS addresses are refused; our own and
//! unforwarded mail keeps its sender. And the codec agrees with a real
//! postsrsd, both ways.

use crate::common;

use common::nsd::Nsd;
use common::postsrsd::Postsrsd;
use common::*;
use sluice::intake::dkim::Signers;
use sluice::message::srs::{self, Srs};
use sluice::tools::keygen::{keygen, Algorithm};
use sluice_bench::sink::Sink;

fn txt_of(record: &str) -> String {
    record.split('"').nth(1).unwrap().to_string()
}

/// The zone `test.`: origin.test (SPF, DKIM s1, DMARC reject), srs.test
/// (SPF for loopback, ARC key s2), a.test (no policy).
fn zone(origin_key: &str, arc_key: &str) -> String {
    format!(
        "$ORIGIN test.\n$TTL 300\n@ SOA ns.test. admin.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\n\
         origin TXT \"v=spf1 ip4:127.0.0.7 -all\"\ns1._domainkey.origin TXT \"{origin_key}\"\n\
         _dmarc.origin TXT \"v=DMARC1; p=reject\"\n\
         srs TXT \"v=spf1 ip4:127.0.0.0/8 -all\"\ns2._domainkey.srs TXT \"{arc_key}\"\n"
    )
}

fn static_table(dir: &std::path::Path, name: &str) -> sluice::config::tables::TableConfig {
    let mut t: sluice::config::tables::TableConfig = toml::from_str("kind = \"static\"").unwrap();
    t.path = Some(dir.join(name));
    t
}

struct World {
    _dir: TestDir,
    a_dir: std::path::PathBuf,
    b_dir: std::path::PathBuf,
    a: (sluice::daemon::Server, std::net::SocketAddr),
    b: (sluice::daemon::Server, std::net::SocketAddr),
    /// Behind B (ours.test), and the original sender's host (origin.test).
    sink_b: Sink,
    sink_origin: Sink,
    signers: Signers,
    nsd: Nsd,
}

async fn world(name: &str) -> World {
    let dir = temp_dir(name);
    let origin_key = dir.join("origin.pem");
    let arc_key = dir.join("arc.pem");
    let origin_txt = txt_of(&keygen(Algorithm::Ed25519, "origin.test", "s1", &origin_key).unwrap());
    let arc_txt = txt_of(&keygen(Algorithm::Ed25519, "srs.test", "s2", &arc_key).unwrap());
    let nsd = Nsd::start(&dir, &[("test", &zone(&origin_txt, &arc_txt))]);
    let (sink_b, sink_origin) = (recording_sink().await, recording_sink().await);
    // B: checks strangers' mail, refuses DMARC p=reject failures, reads ARC.
    let b_dir = dir.join("b");
    let mut b = untrusted_config(&b_dir, Some(sink_b.addr));
    b.hostname = "mx-b.test".parse().unwrap();
    b.dns.nameservers = vec![nsd.addr];
    b.dns.timeout_ms = 1000;
    b.smtpd.sender_auth = true;
    b.smtpd.dmarc_reject = true;
    b.arc.enabled = true;
    let b = start(b).await;
    // A: a.test is local, fwd@a.test forwards to x@ours.test (at B).
    let a_dir = dir.join("a");
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::write(a_dir.join("mailboxes"), "local@a.test local/Maildir/\n").unwrap();
    std::fs::write(a_dir.join("aliases"), "fwd@a.test x@ours.test\n").unwrap();
    std::fs::write(
        a_dir.join("virtual"),
        "va.test OK\nfwd@va.test x@ours.test\n",
    )
    .unwrap();
    let mut a = config(&a_dir, None);
    a.hostname = "mx-a.test".parse().unwrap();
    a.smtpd.mynetworks = vec![net("127.0.0.3/32")];
    a.dns.nameservers = vec![nsd.addr];
    a.dns.timeout_ms = 1000;
    a.smtpd.sender_auth = true;
    a.local.domains = vec!["a.test".parse().unwrap()];
    a.local.mailbox_table = Some("mailboxes".into());
    a.local.alias_table = Some("aliases".into());
    a.local.maildir_base = Some(a_dir.join("mail"));
    a.tables
        .insert("mailboxes".into(), static_table(&a_dir, "mailboxes"));
    a.tables
        .insert("aliases".into(), static_table(&a_dir, "aliases"));
    a.transport
        .insert("ours.test".into(), NextHop::to_addr(b.1));
    a.transport
        .insert("origin.test".into(), NextHop::to_addr(sink_origin.addr));
    let virtual_map = format!("texthash:{}", a_dir.join("virtual").display());
    a.rewrite.virtual_alias_maps = vec![virtual_map];
    a.srs.enabled = true;
    a.srs.domain = Some("srs.test".parse().unwrap());
    a.arc.enabled = true;
    a.dkim.keys = vec![dkim_key("srs.test", "s2", arc_key)];
    let a = start(a).await;
    let signers = Signers::load(&[dkim_key("origin.test", "s1", origin_key)], 432_000).unwrap();
    World {
        _dir: dir,
        a_dir,
        b_dir,
        a,
        b,
        sink_b,
        sink_origin,
        signers,
        nsd,
    }
}

fn message(from: &str, to: &str, subject: &str) -> String {
    format!(
        "From: <{from}>\r\nTo: <{to}>\r\nSubject: {subject}\r\nDate: Sun, 22 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{subject}.{from}>\r\n\r\nhello\r\n"
    )
}

/// Sends `msg` from `ip` to `addr`; the final reply.
async fn send(ip: &str, addr: std::net::SocketAddr, from: &str, to: &str, msg: &str) -> String {
    let (mut c, greeting) = Client::connect_from(ip, addr).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    assert!(c.cmd("EHLO client.origin.test").await.starts_with("250"));
    let r = c.cmd(&format!("MAIL FROM:<{from}>")).await;
    assert!(r.starts_with("250"), "{r}");
    let r = c.cmd(&format!("RCPT TO:<{to}>")).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send(msg.as_bytes()).await;
    c.send(b".\r\n").await;
    c.reply().await
}

/// The field of `text` that starts with `prefix`, unfolded.
fn field(text: &str, prefix: &str) -> Option<String> {
    let start = text.find(prefix)?;
    let mut out = String::new();
    for (i, line) in text[start..].split("\r\n").enumerate() {
        if i > 0 && !line.starts_with([' ', '\t']) {
            break;
        }
        out.push_str(line.trim());
        out.push(' ');
    }
    Some(out)
}

/// Sends origin.test's signed message to `to` (forwarded to x@ours.test)
/// until B's results say DMARC passed (nsd may still be loading at
/// first); B's copy.
async fn forward_signed(w: &World, to: &str) -> sluice_bench::sink::ReceivedMessage {
    let plain = message("a@origin.test", to, "forwarded");
    let (signature, _) = w.signers.sign(plain.as_bytes()).unwrap().unwrap();
    let signed = format!("{signature}{plain}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let n = w.sink_b.count();
        let r = send("127.0.0.7", w.a.1, "a@origin.test", to, &signed).await;
        assert!(r.starts_with("250"), "{r}");
        let arrived = wait_until(15, || w.sink_b.count() > n).await;
        assert!(
            arrived,
            "A: {}\nB: {}",
            read_log(&w.a_dir),
            read_log(&w.b_dir)
        );
        let got = w.sink_b.messages().pop().unwrap();
        let text = String::from_utf8_lossy(&got.body).to_string();
        let ours = field(&text, "Authentication-Results: mx-b.test;").unwrap_or_default();
        if ours.contains("dmarc=pass") && !ours.contains("temperror") {
            return got;
        }
        assert!(std::time::Instant::now() < deadline, "never passed: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_mail_passes_spf_with_srs_and_arc_verifies() {
    let w = world("fwd-srs-arc").await;
    let got = forward_signed(&w, "fwd@a.test").await;
    // The envelope B saw: A's SRS address for the original sender.
    assert!(got.sender.starts_with("SRS0="), "{}", got.sender);
    assert!(
        got.sender.ends_with("=origin.test=a@srs.test"),
        "{}",
        got.sender
    );
    assert_eq!(got.recipients, vec!["x@ours.test".to_string()]);
    let text = String::from_utf8_lossy(&got.body).to_string();
    let ours = field(&text, "Authentication-Results: mx-b.test;").unwrap();
    assert!(ours.contains("spf=pass"), "{ours}");
    assert!(ours.contains("smtp.mailfrom=\"SRS0="), "{ours}");
    assert!(ours.contains("arc=pass"), "{ours}");
    assert!(ours.contains("dkim=pass"), "{ours}");
    // A's seal: one set, over a chain that was empty, with its key.
    let seal = field(&text, "ARC-Seal:").unwrap();
    assert!(seal.contains("i=1") && seal.contains("cv=none"), "{seal}");
    assert!(
        seal.contains("d=srs.test") && seal.contains("s=s2"),
        "{seal}"
    );
    let aar = field(&text, "ARC-Authentication-Results:").unwrap();
    assert!(
        aar.contains("mx-a.test") && aar.contains("spf=pass"),
        "{aar}"
    );
    // The typed events: A rewrote and sealed, B saw SPF pass and ARC pass.
    assert!(
        wait_logged(10, &w.a_dir, |e| matches!(
            e,
            Event::SrsForward { from, srs, .. } if from == "a@origin.test" && *srs == *got.sender
        ))
        .await
    );
    assert!(wait_logged(10, &w.a_dir, |e| matches!(
        e,
        Event::ArcSealed { domain, cv, sealed: true, .. } if domain == "srs.test" && cv == "none"
    ))
    .await);
    assert!(
        wait_logged(10, &w.b_dir, |e| matches!(
            e,
            Event::SenderAuth { spf, dmarc, .. } if spf == "Pass" && dmarc == "pass-or-none"
        ))
        .await
    );
    // A real rspamd's ARC module, on the same DNS, says the same.
    let rspamd = common::rspamd::Scanner::start(&w.a_dir, w.nsd.addr);
    let symbols = rspamd.symbols(&got.body);
    assert!(symbols.iter().any(|s| s == "ARC_ALLOW"), "{symbols:?}");
    // ... and not of the same message with its body changed.
    let text = String::from_utf8_lossy(&got.body).replace("\r\nhello\r\n", "\r\nhellO\r\n");
    let symbols = rspamd.symbols(text.as_bytes());
    assert!(!symbols.iter().any(|s| s == "ARC_ALLOW"), "{symbols:?}");
    drop(rspamd);
    // A bounce to the SRS address reaches the original sender via A.
    let n = w.sink_origin.count();
    let bounce = message("MAILER-DAEMON@mx-b.test", &got.sender, "bounce");
    let r = send("127.0.0.9", w.a.1, "", &got.sender, &bounce).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(
        wait_until(15, || w.sink_origin.count() > n).await,
        "{}",
        read_log(&w.a_dir)
    );
    let back = w.sink_origin.messages().pop().unwrap();
    assert_eq!(back.recipients, vec!["a@origin.test".to_string()]);
    assert_eq!(back.sender, "");
    assert!(wait_logged(10, &w.a_dir, |e| matches!(
        e,
        Event::SrsReverse { to, orig_to, .. } if *to == *got.sender && orig_to == "a@origin.test"
    ))
    .await);
    // Forwarded by a virtual alias map instead of a local alias: the same.
    let again = forward_signed(&w, "fwd@va.test").await;
    assert!(again.sender.starts_with("SRS0="), "{}", again.sender);
    let text = String::from_utf8_lossy(&again.body).to_string();
    let ours = field(&text, "Authentication-Results: mx-b.test;").unwrap();
    assert!(
        ours.contains("spf=pass") && ours.contains("arc=pass"),
        "{ours}"
    );
    w.a.0.shutdown().await;
    w.b.0.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_expired_and_malformed_srs_addresses_are_refused() {
    let w = world("fwd-srs-refused").await;
    let secret = std::fs::read(w.a_dir.join("var/srs.secret")).unwrap();
    let codec = Srs::new(&srs::secrets_of(&secret), "srs.test", 21);
    let today = srs::today();
    let good = codec.forward("a@origin.test", today).unwrap();
    let expired = codec.forward("a@origin.test", today - 30).unwrap();
    let (_, rest) = good.split_at(9);
    let cases = [
        (format!("SRS0=AAAA{rest}"), "bad_hash"),
        (good.replace("=a@", "=eve@"), "bad_hash"),
        (expired, "expired"),
        ("SRS0=abc@srs.test".to_string(), "malformed"),
        ("SRS1=abcd=host@srs.test".to_string(), "malformed"),
    ];
    let (mut c, _) = Client::connect_from("127.0.0.9", w.a.1).await;
    assert!(c.cmd("EHLO client.test").await.starts_with("250"));
    assert!(c.cmd("MAIL FROM:<>").await.starts_with("250"));
    for (address, reason) in &cases {
        let r = c.cmd(&format!("RCPT TO:<{address}>")).await;
        assert!(r.starts_with("550 5.1.1"), "{address}: {r}");
        assert!(
            wait_logged(5, &w.a_dir, |e| matches!(
                e,
                Event::SrsRefused { to, reason: why, .. } if to == address && why == reason
            ))
            .await,
            "{address}: {}",
            read_log(&w.a_dir)
        );
    }
    // The good one is accepted; a non-SRS address at the SRS domain is
    // what the domain otherwise is (not ours: relay refused).
    let r = c.cmd(&format!("RCPT TO:<{good}>")).await;
    assert!(r.starts_with("250"), "{r}");
    let r = c.cmd("RCPT TO:<bob@srs.test>").await;
    assert!(r.starts_with("554 5.7.1"), "{r}");
    w.a.0.shutdown().await;
    w.b.0.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_own_and_unforwarded_mail_keeps_its_sender() {
    let w = world("fwd-srs-kept").await;
    // From mynetworks: a stranger's address sent straight to ours.test
    // (not forwarded), and our own user's mail through the alias.
    let cases = [
        ("s@elsewhere.test", "x@ours.test"),
        ("local@a.test", "fwd@a.test"),
    ];
    for (from, to) in cases {
        let n = w.sink_b.count();
        let r = send("127.0.0.3", w.a.1, from, to, &message(from, to, "kept")).await;
        assert!(r.starts_with("250"), "{r}");
        assert!(
            wait_until(15, || w.sink_b.count() > n).await,
            "A: {}\nB: {}",
            read_log(&w.a_dir),
            read_log(&w.b_dir)
        );
        let got = w.sink_b.messages().pop().unwrap();
        assert_eq!(got.sender, from);
    }
    // Both delivered and logged (srs_forward would come before): none.
    let sent = |e: &Event| matches!(e, Event::Delivery { status, .. } if status == "sent");
    assert!(wait_until(10, || count_logged(&w.a_dir, sent) >= 2).await);
    assert!(!any_logged(&w.a_dir, |e| matches!(
        e,
        Event::SrsForward { .. }
    )));
    w.a.0.shutdown().await;
    w.b.0.shutdown().await;
}

/// The same secret and domain: postsrsd reverses what Sluice writes and
/// Sluice reverses what postsrsd writes (SRS0 and SRS1).
#[test]
fn the_codec_agrees_with_postsrsd() {
    let srsd = Postsrsd::start("example.org");
    let codec = Srs::new(&[Postsrsd::SECRET.as_bytes().to_vec()], "example.org", 21);
    let today = srs::today();
    for sender in [
        "alice@origin.test",
        "Mixed.Case@Origin.TEST",
        "x+tag@sub.origin.test",
    ] {
        let ours = codec.forward(sender, today).unwrap();
        assert_eq!(srsd.get(false, sender), format!("200 {ours}"), "{sender}");
        assert_eq!(srsd.get(true, &ours), format!("200 {sender}"), "{ours}");
        let theirs = srsd.get(false, sender);
        let theirs = theirs.strip_prefix("200 ").unwrap();
        assert_eq!(codec.reverse(theirs, today).unwrap(), sender);
    }
    // Re-forwarding another forwarder's SRS0 address: SRS1, both ways.
    let first = Srs::new(&[b"elsewhere".to_vec()], "first.test", 21);
    let srs0 = first.forward("bob@origin.test", today).unwrap();
    let ours = codec.forward(&srs0, today).unwrap();
    assert!(ours.starts_with("SRS1="), "{ours}");
    assert_eq!(srsd.get(false, &srs0), format!("200 {ours}"));
    assert_eq!(srsd.get(true, &ours), format!("200 {srs0}"));
    assert_eq!(codec.reverse(&ours, today).unwrap(), srs0);
}

/// A configuration file for the rotation test: a.test's alias forwards to
/// out.test (routed to `hop`), SRS with its own secret file.
fn rotation_config(dir: &std::path::Path, hop: std::net::SocketAddr) -> std::path::PathBuf {
    std::fs::write(dir.join("aliases"), "fwd@a.test x@out.test\n").unwrap();
    std::fs::write(dir.join("mailboxes"), "me@a.test me/Maildir/\n").unwrap();
    let d = dir.display();
    let text = format!(
        r#"hostname = "mx.test"
data_dir = "{d}/var"
log_file = "{d}/maillog"
log_format = "json"

[smtpd]
listen = ["127.0.0.1:0"]
mynetworks = ["127.0.0.0/8"]

[queue]
minimal_backoff_secs = 1
maximal_backoff_secs = 2

[delivery]
connection_idle_secs = 1

[local]
domains = ["a.test"]
mailbox_table = "mailboxes"
alias_table = "aliases"
maildir_base = "{d}/mail"

[tables.mailboxes]
kind = "static"
path = "{d}/mailboxes"

[tables.aliases]
kind = "static"
path = "{d}/aliases"

[transport]
"out.test" = "smtp:[{ip}]:{port}"

[dns]
nameservers = ["127.0.0.1:9"]
timeout_ms = 300
attempts = 1

[srs]
enabled = true
domain = "srs.test"
secret_file = "{d}/srs.secret"
"#,
        ip = hop.ip(),
        port = hop.port(),
    );
    let path = dir.join("sluice.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Rotation as documented: a new secret put first, the old one kept
/// below, a reload: new addresses are signed with the new secret, and an
/// address signed with the old one is still taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_signs_and_the_old_one_still_verifies() {
    let dir = temp_dir("fwd-srs-rotation");
    let sink = recording_sink().await;
    let path = rotation_config(&dir, sink.addr);
    let secret = dir.join("srs.secret");
    std::fs::write(&secret, "old secret\n").unwrap();
    let config = sluice::config::Config::load(&path).unwrap();
    let mut server = sluice::daemon::Server::start(config).await.unwrap();
    let addr = server.addrs[0];
    let forward = |subject: &'static str| async move {
        let mut c = Client::ready(addr).await;
        let r = c
            .message(
                "s@remote.test",
                &["fwd@a.test"],
                &message("s@remote.test", "fwd@a.test", subject),
            )
            .await;
        assert!(r.starts_with("250"), "{r}");
    };
    forward("before").await;
    assert!(
        wait_until(15, || sink.count() == 1).await,
        "{}",
        read_log(&dir)
    );
    let first = sink.messages().pop().unwrap().sender;
    let today = srs::today();
    let old = Srs::new(&[b"old secret".to_vec()], "srs.test", 21);
    let new = Srs::new(&[b"new secret".to_vec()], "srs.test", 21);
    assert_eq!(old.reverse(&first, today).unwrap(), "s@remote.test");
    // Rotate: the new secret first, the old one below; its mtime moves.
    std::fs::write(&secret, "new secret\nold secret\n").unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&secret)
        .unwrap()
        .set_modified(later)
        .unwrap();
    server
        .reload(&sluice::config::source::Source::new(
            Some(&path),
            Vec::new(),
        ))
        .await;
    forward("after").await;
    assert!(
        wait_until(15, || sink.count() == 2).await,
        "{}",
        read_log(&dir)
    );
    let second = sink.messages().pop().unwrap().sender;
    assert_eq!(new.reverse(&second, today).unwrap(), "s@remote.test");
    assert!(old.reverse(&second, today).is_err(), "{second}");
    // The address made before the rotation is still ours.
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<>").await.starts_with("250"));
    let r = c.cmd(&format!("RCPT TO:<{first}>")).await;
    assert!(r.starts_with("250"), "{r}");
    let forged = new
        .forward("s@remote.test", today)
        .unwrap()
        .replace("SRS0=", "SRS0=x");
    let r = c.cmd(&format!("RCPT TO:<{forged}>")).await;
    assert!(r.starts_with("550 5.1.1"), "{r}");
    server.shutdown().await;
}
