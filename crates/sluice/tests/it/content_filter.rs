//! The after-queue content filter (Postfix's `content_filter`,
//! FILTER_README's "advanced content filter"; issue 40 item 7).
//!
//! - Differential: a real Postfix and Sluice with the same
//!   `content_filter`, access table (`FILTER` on one recipient) and
//!   `header_checks` (`FILTER` on one Subject:), each with two recording
//!   sinks as its filters, and a second listener with `content_filter`
//!   off (master.cf `-o content_filter=`); every message must reach the
//!   same filter with the same recipients in one transaction, or none
//!   (normal routes are `discard`: a message that skipped its filter
//!   never arrives). A header check's FILTER applies on the listener
//!   without a filter too, in both (the loop CONFIG.md warns of).
//! - A real amavisd-new as the filter: mail taken on port 25 is queued,
//!   handed to amavis, comes back on the reinjection listener (its
//!   `content_filter = ""`) with amavis's `Received:` line, and is
//!   delivered once to the final sink.
//! - amavis killed (SIGKILL) while it holds a message whose final dot
//!   Sluice waits on: the message is deferred (a typed `delivery` event),
//!   retried once amavis is back, and delivered exactly once.
//! - The filter is kept with the queued message: after a restart with no
//!   `content_filter` configured, the message still goes to its filter.

use std::net::SocketAddr;

use crate::common::amavis::{free_port, Amavis};
use crate::common::postfix::Postfix;
use crate::common::*;
use sluice::config::content_filter::ContentFilter;
use sluice_bench::sink::header_value;

fn filter_to(addr: SocketAddr) -> ContentFilter {
    ContentFilter::parse(&format!("smtp:[{}]:{}", addr.ip(), addr.port())).unwrap()
}

/// One message of the differential: its Subject: and recipients.
const CASES: &[(&str, &[&str])] = &[
    ("plain", &["a@one.test", "b@two.test", "c@three.test"]),
    ("access-filter", &["a@one.test", "special@two.test"]),
    ("header-filter", &["b@two.test", "c@three.test"]),
];

/// The access table and header checks, sending to `second`.
fn tables(second: SocketAddr) -> (String, String) {
    let hop = format!("smtp:[{}]:{}", second.ip(), second.port());
    (
        format!("special@two.test FILTER {hop}\n"),
        format!("/^Subject: header-filter/ FILTER {hop}\n"),
    )
}

/// Sent to the listener without a filter: the first is routed (here
/// discarded), the second's header check still sends it to a filter.
const UNFILTERED: &[(&str, &[&str])] = &[
    ("unfiltered", &["a@one.test"]),
    ("header-filter-anyway", &["b@two.test"]),
];

/// Sends every case in one session; their queue IDs.
async fn send_cases(addr: SocketAddr, cases: &[(&str, &[&str])]) -> Vec<String> {
    let mut c = Client::ready(addr).await;
    let mut ids = Vec::new();
    for (subject, rcpts) in cases {
        let r = c.message("s@sender.test", rcpts, &body(subject)).await;
        assert!(r.starts_with("250"), "{subject}: {r}");
        ids.push(qid_of(&r));
    }
    ids
}

/// What each filter got: (filter number, Subject:, sorted recipients),
/// one entry per transaction, sorted.
fn seen(filters: &[&sluice_bench::sink::Sink]) -> Vec<(usize, String, Vec<String>)> {
    let mut out = Vec::new();
    for (n, sink) in filters.iter().enumerate() {
        for m in sink.messages() {
            let subject = header_value(&m.body, b"Subject").unwrap_or_default();
            let mut rcpts = m.recipients.clone();
            rcpts.sort();
            let subject = subject.trim_start_matches(':').trim().to_string();
            out.push((n, subject, rcpts));
        }
    }
    out.sort();
    out
}

async fn wait_for(filters: &[&sluice_bench::sink::Sink], n: usize) {
    let total = || filters.iter().map(|s| s.count() as usize).sum::<usize>();
    assert!(wait_until(30, || total() >= n).await, "{} of {n}", total());
    // Nothing more comes (a copy both filtered and routed would).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(total(), n);
}

async fn postfix_seen() -> Vec<(usize, String, Vec<String>)> {
    let (main, second) = (recording_sink().await, recording_sink().await);
    let (access, checks) = tables(second.addr);
    let filter = format!("smtp:[127.0.0.1]:{}", main.addr.port());
    let postfix = Postfix::start_listening(
        &[("access", &access), ("hc", &checks)],
        &[
            ("relay_domains", "one.test, two.test, three.test"),
            ("content_filter", &filter),
            ("header_checks", "regexp:$config_directory/hc"),
            (
                "smtpd_recipient_restrictions",
                "check_recipient_access texthash:$config_directory/access, permit",
            ),
        ],
        "",
        &["smtpd -o content_filter="],
    );
    let unfiltered = send_cases(postfix.listeners[0], &UNFILTERED[..1]).await;
    postfix.wait_done(&unfiltered, 30).await;
    send_cases(postfix.addr, CASES).await;
    send_cases(postfix.listeners[0], &UNFILTERED[1..]).await;
    wait_for(&[&main, &second], CASES.len() + 1).await;
    seen(&[&main, &second])
}

async fn sluice_seen(dir: &std::path::Path) -> Vec<(usize, String, Vec<String>)> {
    let (main, second) = (recording_sink().await, recording_sink().await);
    let (access, checks) = tables(second.addr);
    std::fs::write(dir.join("access"), access).unwrap();
    std::fs::write(dir.join("hc"), checks).unwrap();
    let mut cfg = config(dir, None);
    cfg.transport.insert("*".into(), NextHop::Discard);
    cfg.content_checks.content_filter = filter_to(main.addr);
    cfg.content_checks.header_checks = vec![format!("regexp:{}", dir.join("hc").display())];
    cfg.restrictions.recipient = format!(
        "check_recipient_access texthash:{}, permit",
        dir.join("access").display()
    );
    let off: sluice::config::listener::ListenerConfig =
        toml::from_str("listen = \"127.0.0.1:0\"\ncontent_filter = \"\"").unwrap();
    cfg.smtpd.listeners.push(off);
    let (server, addr) = start(cfg).await;
    let unfiltered = send_cases(server.addrs[1], &UNFILTERED[..1]).await;
    let id = unfiltered[0].as_str();
    assert!(wait_event(30, dir, "removed", |e| e["queue_id"] == id).await);
    send_cases(addr, CASES).await;
    send_cases(server.addrs[1], &UNFILTERED[1..]).await;
    wait_for(&[&main, &second], CASES.len() + 1).await;
    server.shutdown().await;
    seen(&[&main, &second])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_filter_and_filter_actions_as_postfix() {
    let dir = temp_dir("filter-diff");
    let postfix = postfix_seen().await;
    let sluice = sluice_seen(&dir).await;
    let want = |n: usize, s: &str, r: &[&str]| {
        (
            n,
            s.to_string(),
            r.iter().map(|x| x.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        postfix,
        vec![
            want(0, "plain", &["a@one.test", "b@two.test", "c@three.test"]),
            want(1, "access-filter", &["a@one.test", "special@two.test"]),
            want(1, "header-filter", &["b@two.test", "c@three.test"]),
            want(1, "header-filter-anyway", &["b@two.test"]),
        ],
        "Postfix"
    );
    assert_eq!(sluice, postfix);
}

/// Sluice with a port-25 listener filtered through `filter` and a
/// reinjection listener (`content_filter = ""`), relaying to `sink`.
async fn filtered_sluice(
    dir: &std::path::Path,
    filter: SocketAddr,
    sink: SocketAddr,
) -> (sluice::daemon::Server, SocketAddr, SocketAddr) {
    let mut cfg = config(dir, Some(sink));
    cfg.content_checks.content_filter = filter_to(filter);
    let reinject: sluice::config::listener::ListenerConfig =
        toml::from_str("listen = \"127.0.0.1:0\"\ncontent_filter = \"\"").unwrap();
    cfg.smtpd.listeners.push(reinject);
    let (server, addr) = start(cfg).await;
    let reinjection = server.addrs[1];
    (server, addr, reinjection)
}

/// The final copy: one message at the sink, through amavis.
fn through_amavis(sink: &sluice_bench::sink::Sink, amavis: &Amavis) -> String {
    let got = sink.messages();
    assert_eq!(got.len(), 1, "{}", amavis.log());
    let text = String::from_utf8_lossy(&got[0].body).into_owned();
    let mark = format!("(amavis, port {})", amavis.addr.port());
    assert!(text.contains(&mark), "no {mark} in\n{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_goes_through_amavis_and_is_delivered_once() {
    let dir = temp_dir("filter-amavis");
    let sink = recording_sink().await;
    let port = free_port();
    let filter: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (server, addr, reinjection) = filtered_sluice(&dir, filter, sink.addr).await;
    let amavis = Amavis::start(&dir, "amavis", port, reinjection);
    // From 127.0.0.5 (in mynetworks), so that XFORWARD shows: amavis's
    // own client is Sluice, 127.0.0.1.
    let (mut c, greeting) = Client::connect_from("127.0.0.5", addr).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    assert!(c.cmd("EHLO client.test").await.starts_with("250"));
    let r = c
        .message(
            "s@sender.test",
            &["x@far.test", "y@far.test"],
            &body("scan me"),
        )
        .await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_until(60, || sink.count() == 1).await,
        "{}",
        amavis.log()
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let text = through_amavis(&sink, &amavis);
    assert!(text.contains("Subject: scan me"), "{text}");
    let got = &sink.messages()[0];
    assert_eq!(got.recipients, vec!["x@far.test", "y@far.test"]);
    // The first copy went to amavis (both recipients), and is done.
    for to in ["x@far.test", "y@far.test"] {
        let sent = |e: &Event| {
            is_delivery(e, to, "sent", "", "")
                && matches!(e, Event::Delivery { relay, .. } if relay.contains(&port.to_string()))
        };
        let events = delivery_events(&dir, &qid);
        assert!(events.iter().any(sent), "{events:?}");
    }
    assert!(removed(&dir, &qid));
    // XFORWARD told amavis who the client was (its log names the client
    // it decided for: 127.0.0.5, not Sluice's 127.0.0.1).
    let log = amavis.log();
    let passed = log.lines().find(|l| l.contains("Passed CLEAN"));
    assert!(passed.is_some_and(|l| l.contains("[127.0.0.5]")), "{log}");
    server.shutdown().await;
}

/// A next hop that takes connections and never answers: amavis, sending
/// its copy on here, holds the message (and Sluice's final dot) until
/// it is killed.
async fn silent_hop() -> (SocketAddr, tokio::sync::watch::Receiver<usize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::watch::channel(0);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
            tx.send_replace(held.len());
        }
    });
    (addr, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amavis_killed_mid_message_defers_then_delivers_once() {
    let dir = temp_dir("filter-amavis-kill");
    let sink = recording_sink().await;
    let port = free_port();
    let filter: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (server, addr, reinjection) = filtered_sluice(&dir, filter, sink.addr).await;
    let (silent, mut forwarded) = silent_hop().await;
    let mut first = Amavis::start(&dir, "amavis", port, silent);
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@sender.test", &["x@far.test"], &body("killed"))
        .await;
    assert!(r.starts_with("250 2.0.0 Ok: queued as"), "{r}");
    let qid = qid_of(&r);
    // amavis has the whole message and is passing it on: Sluice waits
    // for its reply to the final dot.
    let wait = std::time::Duration::from_secs(60);
    let got = tokio::time::timeout(wait, forwarded.wait_for(|n| *n > 0)).await;
    assert!(got.is_ok(), "amavis did not pass it on: {}", first.log());
    assert!(delivery_events(&dir, &qid).is_empty());
    first.kill();
    let deferred = |e: &Event<'static>| is_delivery(e, "x@far.test", "deferred", "", "");
    assert!(
        wait_logged(30, &dir, |e| deferred(e)
            && matches!(e, Event::Delivery { queue_id, .. } if *queue_id == qid.as_str()))
        .await,
        "{:?}",
        delivery_events(&dir, &qid)
    );
    assert_eq!(sink.count(), 0);
    let second = Amavis::start(&dir, "amavis2", port, reinjection);
    assert!(
        wait_until(60, || removed(&dir, &qid)).await,
        "{}",
        second.log()
    );
    assert!(
        wait_until(30, || sink.count() == 1).await,
        "{}",
        second.log()
    );
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    through_amavis(&sink, &second);
    assert!(delivered_as(&dir, &qid, "x@far.test", "sent", ""));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_message_keeps_its_filter_across_a_restart() {
    let dir = temp_dir("filter-restart");
    let routed = recording_sink().await;
    let down = reserve();
    let mut cfg = config(&dir, Some(routed.addr));
    cfg.content_checks.content_filter = filter_to(down.addr);
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@sender.test", &["x@far.test"], &body("kept"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_until(20, || delivered_as(
            &dir,
            &qid,
            "x@far.test",
            "deferred",
            ""
        ))
        .await
    );
    server.shutdown().await;
    // No filter configured now: the message keeps the one it had.
    cfg.content_checks.content_filter = ContentFilter::NONE;
    let filter = down.sink().await;
    let (server, _) = start(cfg).await;
    assert!(wait_until(30, || filter.count() == 1).await);
    assert!(wait_until(20, || removed(&dir, &qid)).await);
    assert_eq!(routed.count(), 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_that_never_answers_is_bounded_by_the_timeouts() {
    let dir = temp_dir("filter-silent");
    let routed = recording_sink().await;
    let tarpit = sluice_bench::sink::Sink::start(sluice_bench::sink::SinkOptions {
        record: true,
        reply_delay: Some(std::time::Duration::from_secs(3600)),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut cfg = config(&dir, Some(routed.addr));
    cfg.content_checks.content_filter = filter_to(tarpit.addr);
    cfg.delivery.command_timeout_secs = 1;
    cfg.delivery.data_done_timeout_secs = 1;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@sender.test", &["x@far.test"], &body("silent"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    let deferred = || delivered_as(&dir, &qid, "x@far.test", "deferred", "");
    assert!(
        wait_until(10, deferred).await,
        "{:?}",
        delivery_events(&dir, &qid)
    );
    // It waits for its filter: never routed around it.
    assert_eq!(routed.count(), 0);
    assert!(!removed(&dir, &qid));
    server.shutdown().await;
}

/// A filter that hands mail back to a listener that filters again: here
/// Sluice is its own "filter" (its port-25 listener, which passes the
/// message on unchanged but for its `Received:` line). The hop limit ends
/// the loop with `5.4.6`, and the sender's bounce (our notice, never
/// filtered) is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_that_loops_mail_back_ends_at_the_hop_limit() {
    let dir = temp_dir("filter-loop");
    let routed = recording_sink().await;
    let port = free_port();
    let own: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut cfg = config(&dir, Some(routed.addr));
    cfg.smtpd.listen = vec![own];
    cfg.smtpd.hop_count_limit = 5;
    cfg.content_checks.content_filter = filter_to(own);
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@sender.test", &["x@far.test"], &body("loop"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let bounced = || delivered_as(&dir, "", "x@far.test", "bounced", "");
    assert!(
        wait_until(30, bounced).await,
        "{:?}",
        delivery_events(&dir, "")
    );
    let hops = |e: &Event| is_delivery(e, "x@far.test", "bounced", "5.4.6", "");
    assert!(any_logged(&dir, hops), "{:?}", delivery_events(&dir, ""));
    // The bounce to the sender, and nothing else, reaches the relay host.
    assert!(wait_until(20, || routed.count() == 1).await);
    let got = routed.messages();
    assert_eq!(got[0].recipients, vec!["s@sender.test"]);
    assert_eq!(got[0].sender, "");
    server.shutdown().await;
}

/// Which mail is filtered: sendmail(1)'s goes to the main filter (as
/// Postfix's pickup), port 25's too, the reinjection listener's
/// (`content_filter = ""`) is routed as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sendmail_and_port_25_are_filtered_the_reinjection_listener_is_not() {
    let dir = temp_dir("filter-doors");
    let (routed, filter) = (recording_sink().await, recording_sink().await);
    let mut cfg = config(&dir, Some(routed.addr));
    cfg.content_checks.content_filter = filter_to(filter.addr);
    let reinject: sluice::config::listener::ListenerConfig =
        toml::from_str("listen = \"127.0.0.1:0\"\ncontent_filter = \"\"").unwrap();
    cfg.smtpd.listeners.push(reinject);
    let conf = client_config(&dir, &cfg.data_dir);
    let sendmail = dir.join("sendmail");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &sendmail).unwrap();
    let (server, addr) = start(cfg).await;
    let reinjection = server.addrs[1];
    let mut cmd = std::process::Command::new(&sendmail);
    cmd.arg("-C")
        .arg(&conf)
        .args(["-f", "s@sender.test", "local@far.test"]);
    let (code, _, err) =
        tokio::task::spawn_blocking(move || output_of(cmd, b"Subject: by sendmail\n\nhi\n"))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    for (to, via) in [("smtp@far.test", addr), ("back@far.test", reinjection)] {
        let mut c = Client::ready(via).await;
        let r = c.message("s@sender.test", &[to], &body(to)).await;
        assert!(r.starts_with("250"), "{r}");
    }
    assert!(wait_until(20, || filter.count() == 2 && routed.count() == 1).await);
    let to = |s: &sluice_bench::sink::Sink| {
        let mut v: Vec<String> = s
            .messages()
            .into_iter()
            .flat_map(|m| m.recipients)
            .collect();
        v.sort();
        v
    };
    assert_eq!(to(&filter), vec!["local@far.test", "smtp@far.test"]);
    assert_eq!(to(&routed), vec!["back@far.test"]);
    server.shutdown().await;
}

/// A FILTER action naming a transport that `[transports]` does not define
/// (a typo in a table) holds the mail, `4.3.0 mail transport
/// unavailable`, as Postfix does for a master.cf service it lacks: it is
/// never sent to the filter with the default SMTP settings, nor around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_naming_an_undefined_transport_waits() {
    let dir = temp_dir("filter-undefined");
    let (routed, filter) = (recording_sink().await, recording_sink().await);
    let hop = format!("nosuch:[{}]:{}", filter.addr.ip(), filter.addr.port());
    std::fs::write(
        dir.join("access"),
        format!("special@two.test FILTER {hop}\n"),
    )
    .unwrap();
    let mut cfg = config(&dir, Some(routed.addr));
    cfg.restrictions.recipient = format!(
        "check_recipient_access texthash:{}, permit",
        dir.join("access").display()
    );
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@sender.test", &["special@two.test"], &body("undefined"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_logged(30, &dir, |e| is_delivery(
            e,
            "special@two.test",
            "deferred",
            "4.3.0",
            ""
        ) && matches!(e, Event::Delivery { queue_id, .. } if *queue_id == qid.as_str()))
        .await,
        "{:?}",
        delivery_events(&dir, &qid)
    );
    assert_eq!((filter.count(), routed.count()), (0, 0));
    server.shutdown().await;
}
