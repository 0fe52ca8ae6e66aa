//! Content filters over the milter protocol (`smtpd.milters`) with a real
//! rspamd (its proxy worker in milter mode): the GTUBE pattern is refused
//! at the end of DATA with rspamd's `554 5.7.1`, suspicious mail gets its
//! spam header, clean mail passes unchanged; mail from sendmail goes
//! through `non_smtpd_milters` alike; a filter that is down or silent gets
//! `milter_default_action`, and nothing is lost.

use crate::common;

use std::time::Duration;

use common::nsd::Nsd;
use common::opendkim::OpenDkim;
use common::rspamd::Rspamd;
use common::*;
use sluice::admin::protocol::{Filter, Request};
use sluice::config::services::ServiceAddr;
use sluice::config::smtpd::MilterDefault;
use sluice::tools::queue_cli::call;

const GTUBE: &str = "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X";
/// rspamd's test pattern for its "add header" action.
const SUSPICIOUS: &str = "YJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X";

fn mail(subject: &str, text: &str) -> String {
    format!(
        "From: <a@sender.test>\r\nTo: <b@dest.test>\r\nSubject: {subject}\r\n\
         Message-ID: <{subject}@sender.test>\r\nContent-Type: text/plain\r\n\r\n{text}\r\n"
    )
}

fn unix(path: &std::path::Path) -> ServiceAddr {
    ServiceAddr::Unix(path.to_path_buf())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rspamd_refuses_gtube_and_marks_suspicious_mail() {
    let dir = temp_dir("milter-rspamd");
    let rspamd = Rspamd::start(&dir);
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.milters = vec![unix(&rspamd.socket)];
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let to = ["b@dest.test"];

    let r = c.message("a@sender.test", &to, &mail("spam", GTUBE)).await;
    assert!(r.starts_with("554 5.7.1"), "{r}");
    assert!(r.to_ascii_lowercase().contains("gtube"), "{r}");
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Reject(Reject::Data { cause, code: 554, .. }) if cause == "milter"
        ))
        .await,
        "{}",
        read_log(&dir)
    );

    let r = c
        .message("a@sender.test", &to, &mail("odd", SUSPICIOUS))
        .await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    let r = c
        .message("a@sender.test", &to, &mail("clean", "Hello."))
        .await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    assert!(wait_until(20, || sink.count() == 2).await);
    let spam_header = |subject: &str| {
        let m = sink.messages();
        let m = m
            .iter()
            .find(|m| String::from_utf8_lossy(&m.body).contains(&format!("Subject: {subject}")))
            .expect(subject)
            .clone();
        sluice_bench::sink::header_value(&m.body, b"x-spam:")
    };
    assert_eq!(spam_header("odd").as_deref(), Some("Yes"));
    assert_eq!(spam_header("clean"), None);
    server.shutdown().await;
}

/// A real OpenDKIM signs through the milter (its header inserted by us);
/// a second Sluice checking senders (`sender_auth`, the project's own DKIM
/// verifier) fetches the key from a real nsd and finds the signature good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opendkim_signs_through_the_milter_and_the_signature_verifies() {
    let dir = temp_dir("milter-opendkim");
    let odk = OpenDkim::start(&dir, "sign.test", "od");
    let key = odk.txt.replacen("od._domainkey", "od._domainkey.sign", 1);
    let zone = format!(
        "$ORIGIN test.\n$TTL 300\n@ SOA ns.test. admin.test. 1 3600 600 86400 300\n\
         @ NS ns\nns A 127.0.0.1\n{key}\n"
    );
    let nsd = Nsd::start(&dir, &[("test", &zone)]);
    let sink = recording_sink().await;
    // The checking server: the signing one is a stranger to it.
    let (b_dir, a_dir) = (dir.join("b"), dir.join("a"));
    let mut b = untrusted_config(&b_dir, Some(sink.addr));
    b.hostname = "mx-b.test".parse().unwrap();
    b.dns.nameservers = vec![nsd.addr];
    b.dns.timeout_ms = 1000;
    b.smtpd.sender_auth = true;
    let (b_server, b_addr) = start(b).await;
    let mut a = config(&a_dir, Some(b_addr));
    a.smtpd.milters = vec![unix(&odk.socket)];
    let (a_server, a_addr) = start(a).await;
    let mut c = Client::ready(a_addr).await;
    let text = "From: <a@sign.test>\r\nTo: <x@ours.test>\r\nSubject: signed\r\n\
                Date: Wed, 25 Nov 2026 10:00:00 +0000\r\nMessage-ID: <s@sign.test>\r\n\r\n\
                Hello,\r\n  with  spaces  and a long line to canonicalize.\r\n";
    let r = c.message("a@sign.test", &["x@ours.test"], text).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(
        wait_until(20, || sink.count() == 1).await,
        "{}",
        read_log(&a_dir)
    );
    let got = String::from_utf8_lossy(&sink.messages()[0].body).to_string();
    let signature = sluice_bench::sink::header_value(got.as_bytes(), b"dkim-signature:")
        .expect("signed by OpenDKIM");
    assert!(
        signature.contains("d=sign.test") && signature.contains("s=od"),
        "{signature}"
    );
    // The second server's result, with its folded lines.
    let results: String = got
        .split("\r\n")
        .skip_while(|l| !l.starts_with("Authentication-Results: mx-b.test;"))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || l.starts_with('\t') || l.starts_with(' '))
        .map(|(_, l)| l)
        .collect();
    assert!(
        results.contains("dkim=pass header.d=sign.test header.s=od"),
        "{results}\n{got}"
    );
    a_server.shutdown().await;
    b_server.shutdown().await;
}

/// Queue IDs in `state` ("hold", "active", "deferred"), from the daemon.
async fn in_state(data_dir: &std::path::Path, state: &str) -> Vec<String> {
    let filter = Filter {
        state: Some(state.into()),
        ..Default::default()
    };
    let r = call(data_dir, &Request::List { filter }).await.unwrap();
    r.messages.into_iter().map(|e| e.id).collect()
}

/// rspamd told to quarantine what it would reject (`quarantine_on_reject`):
/// the client is answered 250, the message is put on hold (Postfix's
/// milter-hold) and stays held across a restart; once released it is
/// tried (the sink defers `defer-*` recipients) and, after another
/// restart, it is not held again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_mail_is_held_across_a_restart_until_released() {
    let dir = temp_dir("milter-quarantine");
    let rspamd = Rspamd::start_with(&dir, "quarantine_on_reject = true;");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.milters = vec![unix(&rspamd.socket)];
    cfg.queue.minimal_backoff_secs = 3600;
    cfg.queue.maximal_backoff_secs = 3600;
    let data_dir = cfg.data_dir.clone();
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    let spam = mail("spam", GTUBE);
    let r = c
        .message("a@sender.test", &["defer-b@dest.test"], &spam)
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    let held = qid_of(&r);
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::Hold { queue_id, cause, .. } if *queue_id == held.as_str() && cause == "milter"
        ))
        .await,
        "{}",
        read_log(&dir)
    );
    // Mail after it goes out; the held message is not tried.
    let r = c
        .message("a@sender.test", &["b@dest.test"], &mail("clean", "Hello."))
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    assert!(wait_until(20, || sink.count() == 1).await);
    assert_eq!(in_state(&data_dir, "hold").await, vec![held.clone()]);
    assert!(!any_logged(&dir, |e| matches!(
        e,
        Event::Delivery { queue_id, .. } if *queue_id == held.as_str()
    )));
    server.shutdown().await;

    let in_state_soon = |state: &'static str| {
        let (data_dir, held) = (data_dir.clone(), held.clone());
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while in_state(&data_dir, state).await != vec![held.clone()] {
                if std::time::Instant::now() > deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            true
        }
    };
    let (server, _) = start(cfg.clone()).await;
    assert!(in_state_soon("hold").await, "not held after the restart");
    let r = call(&data_dir, &Request::Release { id: held.clone() })
        .await
        .unwrap();
    assert_eq!(r.count, 1);
    assert!(
        wait_logged(20, &dir, |e| matches!(
            e,
            Event::Delivery { queue_id, status, .. }
                if *queue_id == held.as_str() && status == "deferred"
        ))
        .await,
        "tried once released"
    );
    server.shutdown().await;

    let (server, _) = start(cfg).await;
    assert!(
        in_state_soon("deferred").await,
        "released for good: not held again after a restart"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_from_sendmail_goes_through_non_smtpd_milters() {
    let dir = temp_dir("milter-local");
    let rspamd = Rspamd::start(&dir);
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.non_smtpd_milters = vec![unix(&rspamd.socket)];
    let (server, _addr) = start(cfg).await;
    let conf = client_config(&dir, &dir.join("var"));
    let bin = dir.join("sendmail");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &bin).unwrap();
    let sendmail = |text: &'static str| {
        let (bin, conf) = (bin.clone(), conf.clone());
        tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new(bin);
            cmd.arg("-C")
                .arg(conf)
                .args(["-i", "-f", "a@sender.test", "b@dest.test"]);
            output_of(cmd, mail("local", text).as_bytes())
        })
    };
    let (code, _, err) = sendmail(GTUBE).await.unwrap();
    assert_eq!(code, 65, "refused, a data error: {err}");
    assert!(err.contains("5.7.1"), "{err}");
    let (code, _, err) = sendmail("Hello.").await.unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(wait_until(20, || sink.count() == 1).await);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_silent_filter_gets_the_default_action() {
    let dir = temp_dir("milter-down");
    let sink = recording_sink().await;
    // Nothing listens here ...
    let dead = dir.join("dead.sock");
    // ... and this one accepts and never says a word.
    let silent_path = dir.join("silent.sock");
    let _silent = std::os::unix::net::UnixListener::bind(&silent_path).unwrap();
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.milters = vec![unix(&dead)];
    cfg.smtpd.milter_command_timeout_secs = 1;
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    let to = ["b@dest.test"];
    let r = c.message("a@sender.test", &to, &mail("m1", "Hello.")).await;
    assert!(r.starts_with("451 4.7.1"), "tempfail by default: {r}");
    assert!(
        wait_logged(10, &dir, |e| matches!(
            e,
            Event::MilterFailed { milter, .. } if *milter == format!("unix:{}", dead.display())
        ))
        .await
    );
    server.shutdown().await;

    cfg.smtpd.milters = vec![unix(&silent_path)];
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        c.message("a@sender.test", &to, &mail("m2", "Hello.")),
    )
    .await
    .expect("the filter's timeout ends the wait");
    assert!(r.starts_with("451 4.7.1"), "{r}");
    server.shutdown().await;

    cfg.smtpd.milters = vec![unix(&dead)];
    cfg.smtpd.milter_default_action = MilterDefault::Accept;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c.message("a@sender.test", &to, &mail("m3", "Hello.")).await;
    assert!(r.starts_with("250"), "accept: as if no filter: {r}");
    assert!(wait_until(20, || sink.count() == 1).await);
    server.shutdown().await;
}

/// M8 of the 2026-11-27 review: an Authentication-Results field in our
/// name sent by a client is a forgery; it is removed at the door, before
/// any filter sees it, and the results a filter adds in our name are
/// kept (before: the filter saw the forged `dkim=pass` and the relayed
/// copy lost the filter's field, on a `sender_auth` listener).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_results_never_reach_the_filters_and_the_filters_results_stay() {
    use common::milter_probe::MilterProbe;
    let dir = temp_dir("milter-forged-ar");
    let zone = "$ORIGIN test.\n$TTL 300\n@ SOA ns.test. admin.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\n";
    let nsd = Nsd::start(&dir, &[("test", zone)]);
    let ours = "mx.test; dkim=pass header.d=corp.test (added by the filter)";
    let probe = MilterProbe::start(
        &dir.join("probe.sock"),
        vec![("Authentication-Results".into(), ours.into())],
    );
    let sink = recording_sink().await;
    let mut cfg = untrusted_config(&dir, Some(sink.addr));
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.dns.timeout_ms = 1000;
    cfg.smtpd.sender_auth = true;
    cfg.smtpd.milters = vec![unix(&probe.socket)];
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let forged = "Authentication-Results: mx.test; dkim=pass header.d=paypal.com; dmarc=pass header.from=paypal.com\r\n\
                  Authentication-Results: other.test; spf=pass smtp.mailfrom=a@paypal.com\r\n";
    let text = format!("{forged}{}", mail("forged", "Pay now."));
    let r = c
        .message("service@paypal.com", &["x@ours.test"], &text)
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(
        wait_until(20, || sink.count() == 1).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    let seen = probe.headers();
    let results: Vec<&String> = seen
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Authentication-Results"))
        .map(|(_, v)| v)
        .collect();
    assert!(
        results.iter().all(|v| !v.contains("paypal.com; dmarc")),
        "the filter saw the forgery: {results:?}"
    );
    assert!(
        results
            .iter()
            .any(|v| v.trim_start().starts_with("other.test;")),
        "another server's results are not ours to remove: {results:?}"
    );
    let got = String::from_utf8_lossy(&sink.messages()[0].body).into_owned();
    assert!(!got.contains("header.d=paypal.com"), "{got}");
    assert!(
        got.contains("(added by the filter)"),
        "the filter's field was removed: {got}"
    );
}
