//! Two nodes sharing a cluster-wide connection cap and rate through a real
//! redis-server: the receiving server never sees more connections from
//! the cluster than the cap, nor messages faster than the rate; with Redis
//! killed, both nodes keep delivering with their share of the cap, and go
//! back to shared limits when it returns.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::redis::Redis;
use common::*;
use sluice::config::cluster::ClusterConfig;
use sluice_bench::sink::{Sink, SinkOptions};

/// A next hop that answers every command after 50 ms, so that deliveries
/// overlap and connections pile up.
async fn slow_sink() -> Sink {
    Sink::start(SinkOptions {
        record: true,
        reply_delay: Some(Duration::from_millis(50)),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn node_config(
    dir: &std::path::Path,
    name: &str,
    sink: std::net::SocketAddr,
    redis: &Redis,
    cap: usize,
) -> sluice::config::Config {
    let mut cfg = config(&dir.join(name), Some(sink));
    // Alone, each node would open up to 10 connections at once.
    cfg.delivery.default_concurrency = 10;
    cfg.delivery.initial_concurrency = 10;
    let mut cluster: ClusterConfig =
        toml::from_str(&format!("redis_url = {:?}", redis.url())).unwrap();
    cluster.node = Some(name.into());
    cluster.heartbeat_ms = 200;
    cluster.node_dead_secs = 2;
    cluster.lease_secs = 2;
    cluster.default_concurrency = cap;
    cluster.peers = vec!["127.0.0.1:25".into()];
    cfg.cluster = Some(cluster);
    cfg
}

/// Sends `n` messages to `addr`, each on a connection of its own, all at
/// once.
async fn send_many(addr: std::net::SocketAddr, n: usize, tag: &str) {
    let mut sends = tokio::task::JoinSet::new();
    for i in 0..n {
        let subject = format!("{tag}-{i}");
        sends.spawn(async move {
            let mut c = Client::ready(addr).await;
            let r = c
                .message("a@example.org", &["b@example.net"], &body(&subject))
                .await;
            assert!(r.starts_with("250"), "{subject}: {r}");
        });
    }
    while let Some(sent) = sends.join_next().await {
        sent.expect("a send failed");
    }
}

/// Waits until both nodes have logged an event (`name`, for the failure
/// message) that `about` says is about the node named.
async fn both_log(dir: &std::path::Path, name: &str, about: impl Fn(&Event, &str) -> bool) {
    for node in ["n1", "n2"] {
        let said = || any_logged(&dir.join(node), |e| about(e, node));
        assert!(
            wait_until(10, said).await,
            "{node}: no {name:?}\n{}",
            logs(dir)
        );
    }
}

/// Waits for `n` messages at the sink; they came over at most `cap`
/// connections at once.
async fn all_arrived_within_cap(sink: &Sink, n: u64, cap: u64, dir: &std::path::Path) {
    let arrived = wait_until(120, || sink.count() >= n).await;
    assert!(arrived, "{} of {n} arrived\n{}", sink.count(), logs(dir));
    let peak = sink.stats.peak_open.load(Ordering::Relaxed);
    assert!(
        peak <= cap,
        "{peak} connections at once, cap {cap}\n{}",
        logs(dir)
    );
}

/// Both nodes' logs, for failure messages.
fn logs(dir: &std::path::Path) -> String {
    format!(
        "{}\n{}",
        read_log(&dir.join("n1")),
        read_log(&dir.join("n2"))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_never_opens_more_connections_than_its_cap() {
    let dir = temp_dir("cluster-cap");
    let redis = Redis::start(&dir);
    let sink = slow_sink().await;
    let (_n1, a1) = start(node_config(&dir, "n1", sink.addr, &redis, 3)).await;
    let (_n2, a2) = start(node_config(&dir, "n2", sink.addr, &redis, 3)).await;

    tokio::join!(send_many(a1, 30, "one"), send_many(a2, 30, "two"));
    all_arrived_within_cap(&sink, 60, 3, &dir).await;
    // Both nodes were in Redis's books.
    let nodes = redis.cli(&["ZRANGE", "sluice:nodes", "0", "-1"]);
    assert!(nodes.contains("n1") && nodes.contains("n2"), "{nodes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_gone_each_node_delivers_with_its_share() {
    let dir = temp_dir("cluster-split");
    let mut redis = Redis::start(&dir);
    let sink = slow_sink().await;
    let (_n1, a1) = start(node_config(&dir, "n1", sink.addr, &redis, 4)).await;
    let (_n2, a2) = start(node_config(&dir, "n2", sink.addr, &redis, 4)).await;
    // Both have seen each other alive.
    let both_seen = || redis.cli(&["ZCARD", "sluice:nodes"]).trim() == "2";
    assert!(wait_until(10, both_seen).await, "{}", logs(&dir));

    redis.kill();
    let lost = |e: &Event, node: &str| matches!(e, Event::RedisLost { node: n, .. } if n == node);
    both_log(&dir, "redis_lost", lost).await;
    tokio::join!(send_many(a1, 20, "one"), send_many(a2, 20, "two"));
    all_arrived_within_cap(&sink, 40, 4, &dir).await;

    redis.restart();
    let back = |e: &Event, node: &str| matches!(e, Event::RedisBack { node: n, .. } if n == node);
    both_log(&dir, "redis_back", back).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_sends_no_faster_than_its_rate() {
    let dir = temp_dir("cluster-rate");
    let redis = Redis::start(&dir);
    let sink = recording_sink().await;
    let node = |name: &str| {
        let mut cfg = node_config(&dir, name, sink.addr, &redis, 0);
        // 20 a second from the whole cluster; each node alone would send
        // as fast as the sink answers.
        cfg.cluster.as_mut().unwrap().default_rate_limit = 1200;
        cfg
    };
    let (_n1, a1) = start(node("n1")).await;
    let (_n2, a2) = start(node("n2")).await;

    tokio::join!(send_many(a1, 40, "one"), send_many(a2, 40, "two"));
    assert!(
        wait_until(60, || sink.count() >= 80).await,
        "{} of 80 arrived\n{}",
        sink.count(),
        logs(&dir)
    );
    let first = sink.stats.first_ms.load(Ordering::Relaxed);
    let last = sink.stats.last_ms.load(Ordering::Relaxed);
    // 80 messages at 20 a second: the last at least 79 intervals after
    // the first (2 % allowed for the nodes' clocks against Redis's).
    let span_ms = last - first;
    assert!(
        span_ms >= 79 * 50 * 98 / 100,
        "80 messages in {span_ms} ms\n{}",
        logs(&dir)
    );
    let key = redis.cli(&["KEYS", "sluice:rate:*"]);
    assert!(key.contains("sluice:rate:"), "{key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_one_node_found_dead_is_spared_by_the_other() {
    let dir = temp_dir("cluster-dead");
    let redis = Redis::start(&dir);
    // A next hop that refuses connections.
    let down = reserve();
    let node = |name: &str| {
        let mut cfg = node_config(&dir, name, down.addr, &redis, 0);
        cfg.delivery.dead_host_secs = 60;
        cfg
    };
    let (_n1, a1) = start(node("n1")).await;
    let (_n2, a2) = start(node("n2")).await;

    send_many(a1, 1, "one").await;
    let n1_tried = || any_logged(&dir.join("n1"), |e| matches!(e, Event::ConnectFailed(_)));
    assert!(wait_until(10, n1_tried).await, "{}", logs(&dir));
    let n2_learned = || {
        any_logged(&dir.join("n2"), |e| {
            matches!(e, Event::DeadMarkShared { .. })
        })
    };
    assert!(wait_until(10, n2_learned).await, "{}", logs(&dir));

    send_many(a2, 1, "two").await;
    let deferred = |e: &Event| matches!(e, Event::Delivery { status, .. } if status == "deferred");
    let n2_deferred = || any_logged(&dir.join("n2"), deferred);
    assert!(wait_until(10, n2_deferred).await, "{}", logs(&dir));
    // n2's only word on it is the dead-host cache's, no attempt of its own.
    let fails: Vec<Event> = logged_events(&dir.join("n2"))
        .into_iter()
        .filter(|e| matches!(e, Event::ConnectFailed(_)))
        .collect();
    let cached = |e: &Event| match e {
        Event::ConnectFailed(ConnectFailed::Host { error, .. })
        | Event::ConnectFailed(ConnectFailed::Job { error, .. }) => {
            error.contains("dead-host cache")
        }
        _ => false,
    };
    assert!(
        !fails.is_empty() && fails.iter().all(cached),
        "n2 tried the dead host itself: {fails:?}"
    );
    let marks = redis.cli(&["ZRANGE", "sluice:dead", "0", "-1"]);
    assert!(marks.contains(&down.addr.to_string()), "{marks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_leaves_the_cluster_at_once() {
    let dir = temp_dir("cluster-leave");
    let redis = Redis::start(&dir);
    let sink = slow_sink().await;
    let (n1, a1) = start(node_config(&dir, "n1", sink.addr, &redis, 3)).await;
    let (_n2, _a2) = start(node_config(&dir, "n2", sink.addr, &redis, 3)).await;
    let both = || redis.cli(&["ZCARD", "sluice:nodes"]).trim() == "2";
    assert!(wait_until(10, both).await, "{}", logs(&dir));
    send_many(a1, 5, "one").await;
    let held = || redis.cli(&["KEYS", "sluice:lease:*"]).contains("held");
    assert!(wait_until(10, held).await, "{}", logs(&dir));

    n1.shutdown().await;
    // Gone from Redis's books now, not when its lease lapses.
    let nodes = redis.cli(&["ZRANGE", "sluice:nodes", "0", "-1"]);
    assert!(!nodes.contains("n1"), "{nodes}");
    for key in redis.cli(&["KEYS", "sluice:lease:*:held"]).lines() {
        let holders = redis.cli(&["HKEYS", key]);
        assert!(!holders.contains("n1"), "{key}: {holders}");
    }
}

/// M1 of the 2026-11-27 review: a second process under a live node's
/// name (a cloned configuration) is refused at start, after waiting
/// `node_dead_secs` for the name to lapse, and names the setting; once the
/// first stops cleanly the name is free at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_under_a_live_nodes_name_is_refused() {
    let dir = temp_dir("cluster-name");
    let redis = Redis::start(&dir);
    let sink = slow_sink().await;
    let (n1, _) = start(node_config(&dir, "n1", sink.addr, &redis, 3)).await;
    let clone = node_config(&dir.join("clone"), "n1", sink.addr, &redis, 3);
    let refused = sluice::daemon::Server::start(clone.clone()).await;
    let err = refused.err().expect("a second n1 started").to_string();
    assert!(
        err.contains("\"n1\" is in use by another live process"),
        "{err}"
    );
    n1.shutdown().await;
    let started = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        sluice::daemon::Server::start(clone),
    )
    .await
    .expect("the name was not given back at stop");
    started.unwrap().shutdown().await;
}
