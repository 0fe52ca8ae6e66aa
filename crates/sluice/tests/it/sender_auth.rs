//! Sender authentication on a listener: SPF, DKIM and DMARC checked
//! against a real nsd, an Authentication-Results: header added (forged
//! ones naming us removed), and DMARC p=reject enforced when asked.

use crate::common;

use common::nsd::Nsd;
use common::*;
use sluice::intake::dkim::Signers;
use sluice::tools::keygen::{keygen, Algorithm};

fn message(from: &str, extra: &str) -> String {
    format!(
        "{extra}From: <{from}>\r\nTo: <x@ours.test>\r\nSubject: auth\r\nDate: Sun, 22 Nov 2026 10:00:00 +0000\r\nMessage-ID: <1.{from}>\r\n\r\nhello\r\n"
    )
}

async fn send(from_ip: &str, addr: std::net::SocketAddr, sender: &str, msg: &str) -> String {
    let (mut c, greeting) = Client::connect_from(from_ip, addr).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    assert!(c.cmd("EHLO client.auth.test").await.starts_with("250"));
    let r = c.cmd(&format!("MAIL FROM:<{sender}>")).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(c.cmd("RCPT TO:<x@ours.test>").await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send(msg.as_bytes()).await;
    c.send(b".\r\n").await;
    c.reply().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spf_dkim_and_dmarc_are_checked_and_reject_is_enforced() {
    let dir = temp_dir("sender-auth");
    let key = dir.join("ed.pem");
    let record = keygen(Algorithm::Ed25519, "auth.test", "s1", &key).unwrap();
    let txt = record.split('"').nth(1).unwrap().to_string();
    // The zone is `test.` itself, so the DMARC tree walk's _dmarc.test
    // gets a real NXDOMAIN, as on the Internet.
    let zone = format!(
        "$ORIGIN test.\n$TTL 300\n@ SOA ns.test. admin.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\n\
         auth TXT \"v=spf1 ip4:127.0.0.7 -all\"\ns1._domainkey.auth TXT \"{txt}\"\n_dmarc.auth TXT \"v=DMARC1; p=reject\"\n"
    );
    let nsd = Nsd::start(&dir, &[("test", &zone)]);
    let sink = recording_sink().await;
    let mut cfg = untrusted_config(&dir, Some(sink.addr));
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.dns.timeout_ms = 1000;
    cfg.smtpd.sender_auth = true;
    cfg.smtpd.dmarc_reject = true;
    let host = cfg.hostname.clone();
    let (server, addr) = start(cfg).await;
    // A message signed by auth.test's key, with a forged result naming us.
    let signers = Signers::load(&[dkim_key("auth.test", "s1", key)], 432_000).unwrap();
    let forged = format!("Authentication-Results: {host}; dkim=pass; spf=pass\r\n");
    let plain = message("a@auth.test", &forged);
    let (signature, _) = signers.sign(plain.as_bytes()).unwrap().unwrap();
    let signed = format!("{signature}{plain}");
    // nsd may still be loading: the first attempt may see temperror.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = sink.count();
        let r = send("127.0.0.7", addr, "a@auth.test", &signed).await;
        assert!(r.starts_with("250"), "{r}");
        assert!(
            wait_until(10, || sink.count() > n).await,
            "not relayed: {}",
            read_log(&dir)
        );
        let got = sink.messages().pop().unwrap();
        let text = String::from_utf8_lossy(&got.body).to_string();
        if text.contains("dmarc=pass") {
            assert!(text.contains("dkim=pass"), "{text}");
            assert!(text.contains("spf=pass"), "{text}");
            assert_eq!(
                text.matches(&format!("Authentication-Results: {host};"))
                    .count(),
                1,
                "only our own result: {text}"
            );
            assert!(text.starts_with("Authentication-Results: "), "{text}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never passed: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    // Unsigned, from an address SPF does not allow: DMARC fails, p=reject.
    let r = send(
        "127.0.0.8",
        addr,
        "a@auth.test",
        &message("a@auth.test", ""),
    )
    .await;
    assert!(r.starts_with("550 5.7.1"), "{r}");
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Reject(Reject::Data { stage, cause, code: 550, .. })
            if stage == "data" && cause == "dmarc"
    )));
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::SenderAuth { from_domain, dmarc, policy, .. }
            if from_domain == "auth.test" && dmarc == "fail" && policy == "Reject"
    )));
}

/// A message with 20 good DKIM signatures (20 keys in nsd) has only the
/// first `dkim_verify_max_signatures` (5) evaluated: 5 results, and the
/// Authentication-Results: says 15 were not (before the cap, all 20 were
/// looked up: a hostile sender chose our DNS work).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_few_dkim_signatures_are_evaluated() {
    let dir = temp_dir("sender-auth-many");
    let mut zone = String::from(
        "$ORIGIN test.\n$TTL 300\n@ SOA ns.test. admin.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\n\
         auth TXT \"v=spf1 ip4:127.0.0.7 -all\"\n_dmarc.auth TXT \"v=DMARC1; p=none\"\n",
    );
    let plain = message("a@auth.test", "");
    let mut signatures = String::new();
    for n in 1..=20 {
        let key = dir.join(format!("s{n}.pem"));
        let record = keygen(Algorithm::Ed25519, "auth.test", &format!("s{n}"), &key).unwrap();
        let txt = record.split('"').nth(1).unwrap();
        zone.push_str(&format!("s{n}._domainkey.auth TXT \"{txt}\"\n"));
        let signers =
            Signers::load(&[dkim_key("auth.test", format!("s{n}"), key)], 432_000).unwrap();
        signatures.push_str(&signers.sign(plain.as_bytes()).unwrap().unwrap().0);
    }
    let nsd = Nsd::start(&dir, &[("test", &zone)]);
    let sink = recording_sink().await;
    let mut cfg = untrusted_config(&dir, Some(sink.addr));
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.dns.timeout_ms = 1000;
    cfg.smtpd.sender_auth = true;
    assert_eq!(cfg.smtpd.dkim_verify_max_signatures, 5, "the default");
    let (server, addr) = start(cfg).await;
    let signed = format!("{signatures}{plain}");
    // nsd may still be loading: the first attempt may see temperror.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let n = sink.count();
        let r = send("127.0.0.7", addr, "a@auth.test", &signed).await;
        assert!(r.starts_with("250"), "{r}");
        assert!(wait_until(10, || sink.count() > n).await, "not relayed");
        let got = sink.messages().pop().unwrap();
        let text = String::from_utf8_lossy(&got.body).to_string();
        if text.contains("dkim=pass") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "never passed: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    let results = &text[..text.find("\r\nDKIM-Signature:").unwrap()];
    assert_eq!(results.matches("dkim=").count(), 5, "{results}");
    assert!(
        results.contains("(15 more DKIM signatures not evaluated)"),
        "{results}"
    );
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::SenderAuth { dkim_not_evaluated: 15, dkim, .. } if dkim.len() == 5
    )));
}
