//! Content filters over the milter protocol (`smtpd.milters`) with a real
//! rspamd (its proxy worker in milter mode): the GTUBE pattern is refused
//! at the end of DATA with rspamd's `554 5.7.1`, suspicious mail gets its
//! spam header, clean mail passes unchanged; mail from sendmail goes
//! through `non_smtpd_milters` alike; a filter that is down or silent gets
//! `milter_default_action`, and nothing is lost.

mod common;

use std::time::Duration;

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
        wait_event(10, &dir, "reject", |e| e["cause"] == "milter"
            && e["code"] == 554)
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
        wait_event(10, &dir, "hold", |e| e["queue_id"] == held.as_str()
            && e["cause"] == "milter")
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
    assert!(events_named(&dir, "delivery")
        .iter()
        .all(|e| e["queue_id"] != held.as_str()));
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
        wait_event(20, &dir, "delivery", |e| e["queue_id"] == held.as_str()
            && e["status"] == "deferred")
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
        wait_event(10, &dir, "milter_failed", |e| e["milter"]
            == format!("unix:{}", dead.display()))
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
