//! The queue tells a message's story from its own state, not the log
//! (issue 35 item 6): `show` gives attempts, reasons and the next retry,
//! and the whole message; attempts count every real attempt and, with
//! the backoff, survive a restart (a deferred message is not retried
//! before its time); hold, release, delete, bounce and requeue take many
//! IDs, ALL, or `-` (IDs on stdin), and holding held mail changes
//! nothing. (Mail to defer-* is always deferred by the test sink.)

use crate::common;

use std::path::Path;

use base64::Engine;
use common::*;
use sluice::admin::protocol::{Entry, Filter, Op, Request};
use sluice::tools::queue_cli::call;

async fn entry(data_dir: &Path, id: &str) -> Option<Entry> {
    let r = call(
        data_dir,
        &Request::List {
            filter: Filter::default(),
        },
    )
    .await
    .unwrap();
    r.messages.into_iter().find(|e| e.id == id)
}

/// Message `id` once it is in the state `ready` wants (polled, for up to
/// 15 s: a round's end is logged just before the message is parked).
async fn until(data_dir: &Path, id: &str, ready: impl Fn(&Entry) -> bool) -> Entry {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        match entry(data_dir, id).await {
            Some(e) if ready(&e) => return e,
            e => assert!(std::time::Instant::now() < deadline, "{id}: {e:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waiting for a retry after `n` attempts.
fn waiting(n: u32) -> impl Fn(&Entry) -> bool {
    move |e| e.state == "deferred" && e.attempts == n && e.next_retry_ms.is_some()
}

fn deferrals(dir: &Path, id: &str) -> usize {
    delivery_events(dir, id)
        .iter()
        .filter(|e| is_delivery(e, "", "deferred", "", ""))
        .count()
}

fn apply(op: Op, ids: &[&String]) -> Request {
    Request::Apply {
        op,
        ids: ids.iter().map(|s| s.to_string()).collect(),
        all: false,
    }
}

fn all(op: Op) -> Request {
    Request::Apply {
        op,
        ids: Vec::new(),
        all: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_reasons_and_backoff_come_from_the_queue_and_survive_a_restart() {
    let dir = temp_dir("queue-story");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.queue.minimal_backoff_secs = 3600;
    cfg.queue.maximal_backoff_secs = 3600;
    let data_dir = cfg.data_dir.clone();
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    let m = qid_of(
        &c.message("s@ours.test", &["defer-a@ours.test"], &body("story"))
            .await,
    );
    assert!(wait_until(15, || deferrals(&dir, &m) == 1).await);
    let e = until(&data_dir, &m, waiting(1)).await;
    let now = sluice::timefmt::now_millis();
    let next = e.next_retry_ms.expect("the next retry time");
    assert!(
        next >= now + 3_500_000,
        "about an hour away: {next} vs {now}"
    );
    assert!(e.last_attempt_ms.is_some_and(|t| t <= now));
    assert!(e.recipients[0]
        .reason
        .as_deref()
        .is_some_and(|r| r.contains("451")));

    // show --body: the whole message, header and body (postcat -q).
    let shown = call(&data_dir, &Request::ShowMessage { id: m.clone() })
        .await
        .unwrap();
    let whole = base64::engine::general_purpose::STANDARD
        .decode(shown.message_b64.unwrap())
        .unwrap();
    let whole = String::from_utf8(whole).unwrap();
    assert!(whole.contains("Subject: story\r\n") && whole.ends_with("\r\n\r\nHello.\r\n"));
    assert_eq!(shown.messages[0].next_retry_ms, Some(next));

    // Every attempt counts: a flush is one more.
    let flush = Request::Flush {
        id: Some(m.clone()),
        domain: None,
    };
    assert_eq!(call(&data_dir, &flush).await.unwrap().count, 1);
    assert!(wait_until(15, || deferrals(&dir, &m) == 2).await);
    let before = until(&data_dir, &m, waiting(2)).await;
    server.shutdown().await;

    // After a restart: the count, the reason and the retry time are the
    // spool's, and the message waits for its time. A message sent after
    // the restart is tried and deferred; the old one was not tried with it.
    let (server, addr) = start(cfg).await;
    let e = until(&data_dir, &m, |_| true).await;
    assert_eq!((e.state.as_str(), e.attempts), ("deferred", 2));
    assert_eq!(e.next_retry_ms, before.next_retry_ms);
    assert_eq!(e.recipients[0].reason, before.recipients[0].reason);
    let mut c = Client::ready(addr).await;
    let later = qid_of(
        &c.message("s@ours.test", &["defer-b@ours.test"], &body("later"))
            .await,
    );
    assert!(wait_until(15, || deferrals(&dir, &later) == 1).await);
    assert_eq!(deferrals(&dir, &m), 2, "not retried before its time");
    assert_eq!(entry(&data_dir, &m).await.map(|e| e.attempts), Some(2));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postsuper_operations_take_many_ids_all_or_stdin() {
    let dir = temp_dir("queue-postsuper");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.queue.minimal_backoff_secs = 3600;
    cfg.queue.maximal_backoff_secs = 3600;
    let data_dir = cfg.data_dir.clone();
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let mut queued = Vec::new();
    for rcpt in [
        "defer-a@ours.test",
        "defer-b@ours.test",
        "defer-c@ours.test",
    ] {
        queued.push(qid_of(
            &c.message("s@ours.test", &[rcpt], &body(rcpt)).await,
        ));
    }
    let (m1, m2, m3) = (&queued[0], &queued[1], &queued[2]);
    for m in &queued {
        until(&data_dir, m, waiting(1)).await;
    }

    // Several IDs; held mail held again is unchanged; ALL.
    let r = call(&data_dir, &apply(Op::Hold, &[m1, m2])).await.unwrap();
    assert_eq!((r.count, r.unchanged), (2, 0));
    let r = call(&data_dir, &Request::Hold { id: m1.clone() })
        .await
        .unwrap();
    assert_eq!((r.count, r.unchanged), (0, 1), "already held");
    let r = call(&data_dir, &all(Op::Hold)).await.unwrap();
    assert_eq!((r.count, r.unchanged), (1, 2));
    let r = call(&data_dir, &all(Op::Release)).await.unwrap();
    assert_eq!((r.count, r.unchanged), (3, 0));
    // Released mail is tried again at once: a second attempt each.
    for m in &queued {
        until(&data_dir, m, waiting(2)).await;
    }
    let missing = call(&data_dir, &apply(Op::Hold, &[m1, &"ABCDEF".to_string()]))
        .await
        .unwrap_err()
        .to_string();
    assert!(missing.contains("1 of 2 queue IDs not found"), "{missing}");
    let r = call(&data_dir, &all(Op::Release)).await.unwrap();
    assert_eq!(r.count, 1, "m1 was held all the same");
    until(&data_dir, m1, waiting(3)).await;

    // requeue: from scratch, so the attempt after it is the first again.
    let r = call(&data_dir, &apply(Op::Requeue, &[m1])).await.unwrap();
    assert_eq!(r.count, 1);
    assert!(wait_until(15, || deferrals(&dir, m1) == 4).await);
    until(&data_dir, m1, waiting(1)).await;

    // `sluice queue delete -`: IDs on stdin, as mailq | awk | tr gives them.
    let conf = dir.join("cli.toml");
    std::fs::write(
        &conf,
        format!("data_dir = {:?}\n", data_dir.display().to_string()),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["queue", "--config"])
        .arg(&conf)
        .args(["delete", "-"]);
    let input = format!("{m2}\n\n{m3}*\n");
    let (code, out, err) = output_of(cmd, input.as_bytes());
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(out.trim(), "2 message(s)");
    let left = call(
        &data_dir,
        &Request::List {
            filter: Filter::default(),
        },
    )
    .await
    .unwrap();
    let ids: Vec<&str> = left.messages.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, [m1.as_str()]);
    server.shutdown().await;
}
