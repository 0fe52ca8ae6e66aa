//! Delay warnings: mail still deferred after `queue.delay_warning_secs`
//! gets the sender one DSN with Action: delayed, and only one, however
//! many retries follow (also across a restart: the spool keeps that it
//! was sent); the null sender never gets one.

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_is_warned_once_about_delayed_mail() {
    let dir = temp_dir("delay-warning");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.queue.delay_warning_secs = 1;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    // The sink answers 451 to defer-* recipients: retried every 1–2 s.
    let r = c
        .message("sender@ours.test", &["defer-me@ours.test"], &body("late"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let deferrals = || {
        count_logged(&dir, |e| {
            is_delivery(e, "defer-me@ours.test", "deferred", "", "")
        })
    };
    assert!(
        wait_until(20, || deferrals() >= 4).await,
        "several attempts were made"
    );
    server.shutdown().await;
    let warnings: Vec<_> = sink
        .messages()
        .into_iter()
        .filter(|m| m.sender.is_empty())
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "exactly one warning over all the retries"
    );
    let w = &warnings[0];
    assert_eq!(w.recipients, vec!["sender@ours.test".to_string()]);
    let text = String::from_utf8_lossy(&w.body);
    assert!(
        text.contains("Subject: Delayed Mail (still being retried)"),
        "{text}"
    );
    assert!(text.contains("Action: delayed\r\nStatus: 4.3.0"), "{text}");
    assert!(
        text.contains("Final-Recipient: rfc822; defer-me@ours.test"),
        "{text}"
    );
    assert!(any_logged(
        &dir,
        |e| matches!(e, Event::Notice { kind, .. } if kind == "delay")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_does_not_warn_the_sender_again() {
    let dir = temp_dir("delay-warning-restart");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.queue.delay_warning_secs = 1;
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("sender@ours.test", &["defer-me@ours.test"], &body("late"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let warnings = || {
        (sink.messages().into_iter())
            .filter(|m| m.sender.is_empty())
            .count()
    };
    assert!(
        wait_until(20, || warnings() == 1).await,
        "the warning reached the sender: {}",
        read_log(&dir)
    );
    server.shutdown().await;
    let deferrals = || {
        count_logged(&dir, |e| {
            is_delivery(e, "defer-me@ours.test", "deferred", "", "")
        })
    };
    let deferrals_before = deferrals();

    // The same spool, started again: the message is still deferred and
    // older than the warning time, but its sender was told already.
    let (server, _) = start(cfg).await;
    // Each retry after the restart is a round after which a warning would
    // be stored (and logged) if the flag had been lost.
    assert!(
        wait_until(20, || deferrals() >= deferrals_before + 3).await,
        "the message was retried after the restart: {}",
        read_log(&dir)
    );
    server.shutdown().await;
    let notices: Vec<Event> = logged_events(&dir)
        .into_iter()
        .filter(|e| matches!(e, Event::Notice { .. }))
        .collect();
    assert_eq!(
        notices
            .iter()
            .filter(|e| matches!(e, Event::Notice { kind, .. } if kind == "delay"))
            .count(),
        1,
        "one warning over both runs: {notices:?}"
    );
    assert_eq!(warnings(), 1, "the sink got one warning");
}
