//! Shadow copies (issue 23): three `sluice serve` processes, each in a
//! network namespace of its own, behind a real HAProxy, sharing a real
//! redis-server. A node SIGKILLed mid-load with its spool deleted loses no
//! acknowledged message: its peers claim their copies and deliver them;
//! new sessions flow through the other nodes within 10 s.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::haproxy::Balancer;
use common::netns::Lan;
use common::redis::Redis;
use common::shadow_nodes::*;
use common::*;
use sluice_bench::sink::{Sink, SinkOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_with_its_spool_loses_no_acknowledged_message() {
    let dir = temp_dir("shadow-kill");
    let lan = Lan::create(3);
    let redis = Redis::start(&dir);
    // A next hop slow enough that mail waits in each node's queue.
    let sink = Sink::start_on(
        lan.socket(SocketAddr::new(lan.hub(), 0)),
        SinkOptions {
            record: true,
            reply_delay: Some(Duration::from_millis(20)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let setup = Setup {
        hop: sink.addr,
        proxied: true,
        claim_secs: 1,
        required: false,
        relay: None,
    };
    let configs: Vec<_> = (0..3)
        .map(|i| node_config(&dir, &lan, i, &redis, &setup))
        .collect();
    let mut nodes = Nodes(
        (0..3)
            .map(|i| Some(spawn_node(&lan, i, &configs[i])))
            .collect(),
    );
    let backends: Vec<(String, SocketAddr)> = (0..3)
        .map(|i| (format!("n{}", i + 1), SocketAddr::new(lan.node_ip(i), 25)))
        .collect();
    let named: Vec<(&str, SocketAddr)> = backends.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    let lb = Balancer::start_in(Some(&lan), &dir, &named);
    // Every node has started whole (its holder listening: the `listening`
    // event comes last), so no copy is refused by a peer still starting
    // (with shadow_required = false such a message is accepted without a
    // copy and would be lost with its node), and answers through the
    // balancer before the load starts.
    let started = || {
        (1..=3).all(|n| {
            logged_in(&dir.join(format!("n{n}/maillog")))
                .iter()
                .any(|l| matches!(l.event, Event::Listening { .. }))
        })
    };
    assert!(wait_until(30, started).await, "a node did not start");
    let ready = async {
        while send_one(&lan, lb.front, "warm-up").await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), ready)
        .await
        .expect("cluster up");

    const TOTAL: usize = 600;
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let lan = Arc::new(lan);
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let first_after_kill: Arc<Mutex<Option<Instant>>> = Arc::default();
    let mut senders = tokio::task::JoinSet::new();
    for w in 0..6 {
        let (lan, acked, front) = (lan.clone(), acked.clone(), lb.front);
        let (killed, first) = (killed_at.clone(), first_after_kill.clone());
        senders.spawn(async move {
            for k in (w..TOTAL).step_by(6) {
                let subject = format!("m-{k}");
                for _attempt in 0..20 {
                    if send_one(&lan, front, &subject).await.is_ok() {
                        acked.lock().unwrap().push(subject.clone());
                        if killed.lock().unwrap().is_some() {
                            first.lock().unwrap().get_or_insert_with(Instant::now);
                        }
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }
    // Mid-load: node 1 dies with its disk.
    let third = || acked.lock().unwrap().len() >= TOTAL / 3;
    assert!(wait_until(60, third).await, "load did not start");
    let mut n1 = nodes.0[0].take().unwrap();
    n1.kill().unwrap();
    n1.wait().unwrap();
    *killed_at.lock().unwrap() = Some(Instant::now());
    let acked_before = acked.lock().unwrap().len();
    std::fs::remove_dir_all(dir.join("n1/var/spool")).unwrap();
    while let Some(done) = senders.join_next().await {
        done.unwrap();
    }
    let acked: Vec<String> = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= TOTAL * 95 / 100,
        "only {} of {TOTAL} acknowledged",
        acked.len()
    );
    let resumed = first_after_kill.lock().unwrap().unwrap() - killed_at.lock().unwrap().unwrap();
    assert!(
        resumed < Duration::from_secs(10),
        "flow resumed {resumed:?} after the kill"
    );

    // Every acknowledged message arrives, those node 1 held included.
    let all_in = || {
        let seen = received(&sink);
        acked.iter().all(|s| seen.contains_key(s))
    };
    let arrived = wait_until(120, all_in).await;
    let seen = received(&sink);
    let missing: Vec<&String> = acked.iter().filter(|s| !seen.contains_key(*s)).collect();
    assert!(
        arrived,
        "{} acknowledged messages lost: {:?}\n{}",
        missing.len(),
        &missing[..missing.len().min(20)],
        read_log(&dir.join("n2"))
    );
    let claimed: usize = ["n2", "n3"]
        .iter()
        .map(|n| claimed_from(&dir.join(n), "n1"))
        .sum();
    assert!(
        claimed > 0,
        "nothing claimed from n1; the test did not test the copies"
    );
    let dups: usize = seen.values().map(|c| c - 1).sum();
    eprintln!("acked {} ({} before the kill), claimed {claimed}, duplicates {dups}, resumed after {resumed:?}", acked.len(), acked_before);
    assert!(
        dups * 100 <= acked.len(),
        "{dups} duplicates of {} messages",
        acked.len()
    );
}

/// A raw TCP connection to a holder from `from` (inside the lan): what it
/// reads before the holder closes it (empty: closed unread).
async fn stranger_reads(lan: &Lan, from: std::net::IpAddr, holder: SocketAddr) -> Vec<u8> {
    let socket = lan.socket(SocketAddr::new(from, 0));
    let mut s = socket.connect(holder).await.unwrap();
    let _ = s.write_all(&[0xff, 0xff, 0xff, 0xf0, 1]).await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the holder kept a stranger's connection open");
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_without_its_spool_has_its_copies_delivered_by_its_peer() {
    // Claims far beyond the test: only the new incarnation can set one off.
    let mut pair = Pair::start("shadow-incarnation", 600);
    pair.send_to_n1("s", 10).await;
    let (lan, dir) = (&pair.lan, &pair.dir);

    // A stranger (the lan's own address, not in n2's peers) gets nothing
    // from n2's holder: closed unread, whatever it sends; logged once.
    let holder = SocketAddr::new(lan.node_ip(1), 2526);
    for _ in 0..3 {
        assert!(stranger_reads(lan, lan.hub(), holder).await.is_empty());
    }
    let refusals = || {
        count_logged(&dir.join("n2"), |e| {
            matches!(e, Event::ShadowStrangersRefused { .. })
        })
    };
    assert!(
        wait_until(5, || refusals() >= 1).await,
        "{}",
        pair.log("n2")
    );
    assert_eq!(refusals(), 1, "one line per burst: {}", pair.log("n2"));
    let areas: Vec<String> = std::fs::read_dir(dir.join("n2/var/shadow"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(areas.len(), 1, "only n1's real copies: {areas:?}");
    assert!(areas[0].starts_with("n1@"), "{areas:?}");

    // n1 dies with its spool and comes back empty.
    let mut first = pair.nodes.0[0].take().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    std::fs::remove_dir_all(pair.dir.join("n1/var/spool")).unwrap();
    pair.restart_n1();
    let claimed = || pair.claimed("n2", "n1") >= 10;
    assert!(wait_until(30, claimed).await, "{}", pair.log("n2"));
    assert!(pair.said("n2", |e| matches!(
        e,
        Event::ShadowNewIncarnation { origin, .. } if origin == "n1"
    )));

    // The next hop is back: each message arrives once, from n2.
    pair.hop_back_and_receive_once("s", 10, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_cleanly_is_waited_for_not_claimed() {
    let mut pair = Pair::start("shadow-away", 1);
    pair.send_to_n1("a", 5).await;

    // A clean stop (SIGTERM), its spool kept: n2 sees it gone, and waits.
    let mut first = pair.nodes.0[0].take().unwrap();
    // SAFETY: signalling a child we spawned and have not reaped.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    first.wait().unwrap();
    // (`shadow_claimed`, which must not appear here, is the event the
    // tests above wait for: a misspelt name could not pass them.)
    let waits = || {
        pair.said(
            "n2",
            |e| matches!(e, Event::ShadowWaiting { origin } if origin == "n1"),
        )
    };
    assert!(wait_until(30, waits).await, "{}", pair.log("n2"));
    assert_eq!(pair.claimed("n2", "n1"), 0, "{}", pair.log("n2"));

    // Back with its spool, n1 delivers its own mail, once.
    pair.restart_n1();
    pair.hop_back_and_receive_once("a", 5, 60).await;
    assert_eq!(pair.claimed("n2", "n1"), 0, "{}", pair.log("n2"));
}
