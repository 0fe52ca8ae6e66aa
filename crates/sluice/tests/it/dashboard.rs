//! Observability against a running daemon: Prometheus text at /metrics,
//! the queue at /api/queue, and the live dashboard at / as a real
//! headless Chromium (Debian's) renders it while mail flows: live numbers
//! in the page, and a screenshot that is not blank. Only requests naming
//! this server in their Host header are answered (DNS rebinding), and only
//! `metrics.max_connections` connections are served at once. Every metric
//! has a `# TYPE`, latencies are histograms; the rates per minute are the
//! daemon's (`/api/rates`); deferred mail shows its destination and cause.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CHROMIUM: &str = "/usr/bin/chromium";

/// One HTTP request; the whole response.
async fn http(addr: SocketAddr, request: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

async fn get(addr: SocketAddr, path: &str) -> String {
    get_as(addr, path, &addr.to_string()).await
}

/// A GET naming `host` in its Host header.
async fn get_as(addr: SocketAddr, path: &str, host: &str) -> String {
    http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
    )
    .await
}

/// Sends `n` messages, one connection each, in the background.
fn load(addr: SocketAddr, n: usize) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for i in 0..n {
            let mut c = Client::ready(addr).await;
            let r = c
                .message("s@b.test", &["x@ours.test"], &body(&format!("load{i}")))
                .await;
            assert!(r.starts_with("250"), "{r}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

async fn chromium(args: Vec<String>) -> (String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
            ])
            .args(args)
            .output()
            .expect("run chromium");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_queue_and_a_live_dashboard_in_chromium() {
    ensure_package(CHROMIUM, "chromium");
    let dir = temp_dir("dashboard");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    let (server, addr) = start(cfg).await;
    let web = server.metrics_addr.expect("metrics listener");

    let traffic = load(addr, 5);
    traffic.await.unwrap();
    assert!(wait_until(15, || sink.count() == 5).await);
    let metrics = get(web, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    for want in [
        "sluice_messages_received_total",
        "sluice_deliveries_total{transport=\"smtp\",status=\"sent\"}",
        "sluice_queue_messages{state=\"active\"}",
        "sluice_sessions_total{tls=\"no\"}",
        "sluice_spool_syncs",
        "sluice_spool_commit_seconds",
        "sluice_spool_batch_messages",
    ] {
        assert!(metrics.contains(want), "{want} in {metrics}");
    }
    let queue = get(web, "/api/queue").await;
    assert!(
        queue.contains("\"active\":") && queue.contains("\"destinations\":"),
        "{queue}"
    );
    assert!(get(web, "/nope").await.starts_with("HTTP/1.1 404"));
    assert!(
        http(web, &format!("POST / HTTP/1.1\r\nHost: {web}\r\n\r\n"))
            .await
            .starts_with("HTTP/1.1 405")
    );

    // The dashboard, under load, in a real browser.
    let traffic = load(addr, 200);
    let url = format!("http://{web}/");
    let (dom, err) = chromium(vec![
        "--virtual-time-budget=15000".into(),
        "--dump-dom".into(),
        url.clone(),
    ])
    .await;
    assert!(
        dom.contains("data-live=\"yes\""),
        "live numbers in the page: {dom}\n{err}"
    );
    let total = dom
        .split("id=\"received-total\">")
        .nth(1)
        .and_then(|s| s.split('<').next())
        .unwrap_or("")
        .replace(',', "");
    assert!(
        total.parse::<u64>().is_ok_and(|n| n >= 5),
        "received total {total:?}"
    );
    let shot = dir.join("dashboard.png");
    let (_, err) = chromium(vec![
        "--virtual-time-budget=15000".into(),
        "--window-size=1000,800".into(),
        format!("--screenshot={}", shot.display()),
        url,
    ])
    .await;
    let file = std::fs::File::open(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}): {err}"));
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap();
    let mut pixels = vec![0; decoder.output_buffer_size().unwrap()];
    let info = decoder.next_frame(&mut pixels).unwrap();
    let step = info.color_type.samples();
    let colors: std::collections::HashSet<&[u8]> =
        pixels[..info.buffer_size()].chunks(step).collect();
    assert!(
        colors.len() > 20,
        "the screenshot is not blank: {} colours",
        colors.len()
    );
    if let Ok(keep) = std::env::var("SLUICE_KEEP_SCREENSHOT") {
        let _ = std::fs::copy(&shot, keep);
    }
    traffic.abort();
    server.shutdown().await;
}

/// DNS rebinding: a page from attacker.example, whose name the attacker
/// then points at 127.0.0.1, reaches the dashboard as the same origin, and
/// could read the queue. The browser sends `Host: attacker.example:PORT`:
/// refused (421) on every path, whatever the method. The listener's own
/// address, `localhost` and the configured hostname, with the listener's
/// port, are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_another_host_name_is_refused_421() {
    let dir = temp_dir("dashboard-host");
    let mut cfg = config(&dir, None);
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    let (server, _) = start(cfg).await;
    let web = server.metrics_addr.expect("metrics listener");
    let (port, other) = (web.port(), web.port() ^ 1);
    for path in ["/", "/api/queue", "/api/rates", "/metrics"] {
        for host in [
            format!("attacker.example:{port}"),
            "attacker.example".to_string(),
            format!("127.0.0.1.attacker.example:{port}"),
            format!("127.0.0.1:{other}"),
            format!("localhost:{other}"),
            format!("mx.test.attacker.example:{port}"),
            String::new(),
        ] {
            let r = get_as(web, path, &host).await;
            assert!(r.starts_with("HTTP/1.1 421 "), "{path} as {host:?}: {r}");
            assert!(!r.contains("\"active\"") && !r.contains("sluice_"), "{r}");
        }
    }
    let r = http(
        web,
        &format!("POST / HTTP/1.1\r\nHost: attacker.example:{port}\r\n\r\n"),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 421 "), "{r}");
    let no_host = http(web, "GET /api/queue HTTP/1.1\r\n\r\n").await;
    assert!(no_host.starts_with("HTTP/1.1 400 "), "{no_host}");
    let twice = format!("GET /api/queue HTTP/1.1\r\nHost: {web}\r\nhost: attacker.example\r\n\r\n");
    assert!(http(web, &twice).await.starts_with("HTTP/1.1 400 "));
    for host in [
        web.to_string(),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("mx.test:{port}"),
        format!("MX.test.:{port}"),
    ] {
        let r = get_as(web, "/api/queue", &host).await;
        assert!(r.starts_with("HTTP/1.1 200 "), "{host}: {r}");
        assert!(r.contains("\"active\""), "{r}");
    }
    let refused = |e: &Event| {
        e.component() == "metrics"
            && matches!(e, Event::HttpRefused { peer, .. } if peer.starts_with("127.0.0.1:"))
    };
    assert!(wait_logged(10, &dir, refused).await, "{}", read_log(&dir));
    server.shutdown().await;
}

/// The listener is reachable by anyone who can reach its address: a
/// request head past 8 KiB is refused whole (never cut and served), and
/// one connection is one request (a second one pipelined behind the first
/// is not answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_or_pipelined_request_gains_nothing() {
    let dir = temp_dir("dashboard-oversized");
    let mut cfg = config(&dir, None);
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    let (server, _) = start(cfg).await;
    let web = server.metrics_addr.expect("metrics listener");
    let padding = format!("X-Pad: {}\r\n", "a".repeat(200)).repeat(60);
    let big = format!("GET /api/queue HTTP/1.1\r\nHost: {web}\r\n{padding}\r\n");
    let r = http(web, &big).await;
    assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
    assert!(!r.contains("\"active\""), "{r}");
    let two = format!(
        "GET /api/queue HTTP/1.1\r\nHost: {web}\r\n\r\nGET /metrics HTTP/1.1\r\nHost: {web}\r\n\r\n"
    );
    let r = http(web, &two).await;
    assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    assert_eq!(r.matches("HTTP/1.1 ").count(), 1, "{r}");
    assert!(!r.contains("sluice_"), "{r}");
    server.shutdown().await;
}

/// Past `metrics.max_connections` connections at once, a new one gets
/// `503` and is closed at once (a client cannot hold a task and a
/// descriptor per connection without limit); the ones already open are
/// served, and a freed slot is taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_limit_the_dashboard_answers_503_at_once() {
    let dir = temp_dir("dashboard-cap");
    let mut cfg = config(&dir, None);
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.metrics.max_connections = 4;
    let (server, _) = start(cfg).await;
    let web = server.metrics_addr.expect("metrics listener");
    // Four connections that have not sent their request yet (accepted
    // in order, before the fifth).
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(web).await.unwrap();
        s.write_all(b"GET /api/queue HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    let mut fifth = tokio::net::TcpStream::connect(web).await.unwrap();
    let mut out = String::new();
    let read = tokio::time::timeout(Duration::from_secs(5), fifth.read_to_string(&mut out)).await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "answered and closed at once: {read:?} {out:?}"
    );
    assert!(out.starts_with("HTTP/1.1 503 "), "{out:?}");
    // The connections already open are served.
    let mut first = held.remove(0);
    first
        .write_all(format!("Host: {web}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    first.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    // Its slot is free again (once the server has seen it close).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(web, "/api/queue").await;
        if r.starts_with("HTTP/1.1 200 ") {
            break;
        }
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
        assert!(
            std::time::Instant::now() < deadline,
            "the slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let warned = |e: &Event| {
        matches!(
            e,
            Event::Warning { kind, open: Some(4), .. } if kind == "metrics_connections"
        )
    };
    assert!(wait_logged(10, &dir, warned).await, "{}", read_log(&dir));
    drop(held);
    server.shutdown().await;
}

/// A destination's gauges are there while it has mail to deliver or a
/// connection open, and go once it is idle (before: the last value stayed
/// for ever, architecture review item 8). Scraped after each change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_gauge_goes_when_the_destination_is_idle() {
    let dir = temp_dir("dashboard-gauges");
    // A slow next hop (every reply waits 300 ms): the delivery is in
    // flight long enough to be seen.
    let sink = sluice_bench::sink::Sink::start(sluice_bench::sink::SinkOptions {
        record: true,
        reply_delay: Some(Duration::from_millis(300)),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    let (server, addr) = start(cfg).await;
    let web = server.metrics_addr.expect("metrics listener");
    let series = format!(
        "sluice_destination_in_flight{{destination=\"smtp:[127.0.0.1]:{}\"}} 1",
        sink.addr.port()
    );
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@b.test", &["x@dest.test"], &body("gauge"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let mut scraped = String::new();
    let mut seen = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !seen && std::time::Instant::now() < deadline {
        scraped = get(web, "/metrics").await;
        seen = scraped.contains(&series);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen, "in flight: {series} in {scraped}");
    assert!(wait_until(15, || sink.count() == 1).await);
    // Delivered; the idle connection closes after connection_idle_secs (1).
    let mut gone = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !gone && std::time::Instant::now() < deadline {
        scraped = get(web, "/metrics").await;
        gone = !scraped.contains("sluice_destination_in_flight{");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the idle destination still reported: {scraped}");
    assert!(
        scraped.contains("sluice_queue_messages{state=\"active\"} 0"),
        "{scraped}"
    );
    server.shutdown().await;
}

/// The body of an HTTP response, as JSON.
fn json_body(response: &str) -> serde_json::Value {
    assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Every sample of /metrics belongs to a family with a `# TYPE` line
/// (the review found the spool's counters without one), and the latency
/// and batch-size metrics are histograms (`_bucket{le=…}` lines that
/// Prometheus can add up across nodes), not summaries (quantiles that it
/// cannot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_has_a_type_and_latencies_are_histograms() {
    let dir = temp_dir("dashboard-types");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    let (server, addr) = start(cfg).await;
    let web = server.metrics_addr.expect("metrics listener");
    load(addr, 3).await.unwrap();
    assert!(wait_until(15, || sink.count() == 3).await);
    let text = get(web, "/metrics").await;
    let mut types = std::collections::HashMap::new();
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut words = line.split_whitespace().skip(2);
        let (name, kind) = (words.next().unwrap(), words.next().unwrap());
        assert!(
            types.insert(name.to_string(), kind.to_string()).is_none(),
            "one # TYPE per family: {name}"
        );
    }
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let samples: Vec<&str> = body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(samples.len() > 10, "{body}");
    for line in &samples {
        let name = line.split(['{', ' ']).next().unwrap();
        // A histogram's (or summary's) samples carry a suffix.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|f| {
                types
                    .get(*f)
                    .is_some_and(|k| k == "histogram" || k == "summary")
            })
            .unwrap_or(name);
        assert!(types.contains_key(family), "no # TYPE for {line}:\n{body}");
    }
    for name in ["sluice_spool_commit_seconds", "sluice_spool_batch_messages"] {
        assert_eq!(types[name], "histogram", "{name}:\n{body}");
        let buckets = samples
            .iter()
            .filter(|l| l.starts_with(&format!("{name}_bucket{{le=\"")))
            .count();
        assert!(buckets >= 8, "{name} has {buckets} buckets:\n{body}");
        assert!(
            samples
                .iter()
                .any(|l| l.starts_with(&format!("{name}_bucket{{le=\"+Inf\"}} "))),
            "{body}"
        );
        assert!(!body.contains(&format!("{name}{{quantile=")), "{body}");
    }
    for name in [
        "sluice_spool_messages_stored",
        "sluice_spool_syncs",
        "sluice_spool_bytes_written",
    ] {
        assert_eq!(types[name], "counter", "{name}:\n{body}");
    }
    assert!(
        text.contains("# HELP sluice_messages_received_total "),
        "{body}"
    );
    server.shutdown().await;
}

/// The rates per minute are kept by the daemon (a ring of 10-second
/// counts), so a page loaded just after mail came shows it at once: the
/// last minute's count at /api/rates is not zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_keeps_the_last_minutes_rates() {
    let dir = temp_dir("dashboard-rates");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    let (server, addr) = start(cfg).await;
    let web = server.metrics_addr.expect("metrics listener");
    load(addr, 3).await.unwrap();
    assert!(wait_until(15, || sink.count() == 3).await);
    let rates = json_body(&get(web, "/api/rates").await);
    assert_eq!(rates["bucket_secs"], 10, "{rates}");
    let buckets = rates["buckets"].as_array().expect("buckets");
    assert!(!buckets.is_empty() && buckets.len() <= 60, "{rates}");
    // (Other tests in this binary send mail too: at least ours.)
    let last = &rates["last_minute"];
    assert!(last["received"].as_u64().is_some_and(|n| n >= 3), "{rates}");
    assert!(
        last["delivered"].as_u64().is_some_and(|n| n >= 3),
        "{rates}"
    );
    let summed: u64 = buckets
        .iter()
        .map(|b| b["received"].as_u64().unwrap())
        .sum();
    assert!(summed >= 3, "{rates}");
    let starts: Vec<u64> = buckets
        .iter()
        .map(|b| b["start"].as_u64().unwrap())
        .collect();
    assert!(
        starts.windows(2).all(|w| w[0] < w[1]),
        "oldest first: {rates}"
    );
    assert!(starts.iter().all(|s| s % 10 == 0), "{rates}");
    // A page loaded now, with no mail flowing, shows them on its first
    // paint (it used to show "–", then 0).
    ensure_package(CHROMIUM, "chromium");
    let (dom, err) = chromium(vec![
        "--virtual-time-budget=1000".into(),
        "--dump-dom".into(),
        format!("http://{web}/"),
    ])
    .await;
    let tile = dom
        .split("id=\"received-rate\">")
        .nth(1)
        .and_then(|s| s.split('<').next())
        .unwrap_or("")
        .replace(',', "");
    assert!(
        tile.parse::<u64>().is_ok_and(|n| n >= 3),
        "received / min on first paint: {tile:?}\n{dom}\n{err}"
    );
    server.shutdown().await;
}

/// Mail for a next hop that refuses connections: the first message is
/// deferred with "connect to … refused", the next ones with "… is not
/// responding" (the destination is marked dead). The destination, with
/// only deferred mail, is in /api/queue's destinations, and "why mail
/// waits" is one row for it (status 4.4.1), not one per wording.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_mail_shows_its_destination_and_one_cause() {
    let dir = temp_dir("dashboard-deferred");
    // Kept bound and not listening: refused for the whole test, and no
    // other test's listener can take the port meanwhile.
    let dead = reserve();
    let dead_addr = dead.addr;
    let mut cfg = config(&dir, Some(dead_addr));
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.queue.minimal_backoff_secs = 600;
    cfg.queue.maximal_backoff_secs = 600;
    cfg.delivery.dead_host_secs = 600;
    let (server, addr) = start(cfg).await;
    let web = server.metrics_addr.expect("metrics listener");
    let dest = format!("smtp:[127.0.0.1]:{}", dead_addr.port());
    for i in 0..3 {
        let mut c = Client::ready(addr).await;
        let r = c
            .message("s@b.test", &["x@far.test"], &body(&format!("deferred{i}")))
            .await;
        assert!(r.starts_with("250"), "{r}");
        // Each waits (deferred) before the next is sent: the first finds
        // the hop refusing, the others find it marked dead.
        let parked = |q: &serde_json::Value| q["deferred"].as_u64() == Some(i + 1);
        let mut queue = serde_json::Value::Null;
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !parked(&queue) && std::time::Instant::now() < deadline {
            queue = json_body(&get(web, "/api/queue").await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(parked(&queue), "{queue}");
    }
    let queue = json_body(&get(web, "/api/queue").await);
    let dests = queue["destinations"].as_array().expect("destinations");
    let row = dests
        .iter()
        .find(|d| d["name"] == dest.as_str())
        .unwrap_or_else(|| panic!("{dest} in {queue}"));
    assert_eq!(row["deferred"], 3, "{queue}");
    assert_eq!(row["queued"], 0, "{queue}");
    let reasons = queue["reasons"].as_array().expect("reasons");
    assert_eq!(reasons.len(), 1, "one cause: {queue}");
    assert_eq!(reasons[0]["destination"], dest.as_str(), "{queue}");
    assert_eq!(reasons[0]["dsn"], "4.4.1", "{queue}");
    assert_eq!(reasons[0]["messages"], 3, "{queue}");
    assert!(
        reasons[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("4.4.1 ")),
        "{queue}"
    );
    server.shutdown().await;
}
