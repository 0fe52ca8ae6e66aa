//! Trust on the shadow link (the 2026-11-27 security review): a relay
//! on a peer's address cannot inject copies, acknowledgements or
//! outcomes (mutual TLS), and an administrator's hold follows the copy to
//! the peer that claims it. Nodes in network namespaces of their own with
//! a real redis-server (`common/shadow_nodes.rs`).

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::netns::Lan;
use common::redis::Redis;
use common::shadow_nodes::*;
use common::*;
use sluice_bench::sink::{Sink, SinkOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A relay the two links pass through, in the third namespace (the
/// address the nodes know as their peer: an attacker who took it over).
/// It forwards both ways; once `inject` is set, it writes a STORE (a
/// forged message), an ACK and an OUTCOMES frame into each direction of
/// every link. Returns how many injections it made.
async fn relay(
    lan: &Lan,
    to: SocketAddr,
    inject: Arc<std::sync::atomic::AtomicBool>,
) -> Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ns = lan.nodes[2].clone();
    let (me, origin) = (lan.node_ip(2), lan.node_ip(0));
    let listener = Lan::within(&ns, || {
        let l = std::net::TcpListener::bind(SocketAddr::new(me, 2526)).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    });
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let injected = Arc::new(AtomicUsize::new(0));
    let count = injected.clone();
    let forged = sluice::cluster::shadow::forged_frames(
        "ceo@victim.test",
        "victim@elsewhere.test",
        b"From: CEO <ceo@victim.test>\r\nSubject: injected\r\n\r\npay now\r\n",
    );
    let forged = Arc::new(forged);
    tokio::spawn(async move {
        while let Ok((inbound, from)) = listener.accept().await {
            // Only n1's links (n2's own, to itself through here, are not
            // the link under attack).
            if from.ip() != origin {
                continue;
            }
            let socket = Lan::within(&ns, || tokio::net::TcpSocket::new_v4().unwrap());
            let Ok(outbound) = socket.connect(to).await else {
                continue;
            };
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            for (r, w) in [(ri, wo), (ro, wi)].map(|(r, w)| {
                (
                    Box::new(r) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                    Box::new(w) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                )
            }) {
                let (inject, count, forged) = (inject.clone(), count.clone(), forged.clone());
                tokio::spawn(async move {
                    let (mut r, mut w) = (r, w);
                    let mut buf = vec![0u8; 65536];
                    let mut done = false;
                    while let Ok(n) = r.read(&mut buf).await {
                        if n == 0 || w.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        if !done && inject.load(Ordering::Relaxed) {
                            done = true;
                            count.fetch_add(1, Ordering::Relaxed);
                            if w.write_all(&forged).await.is_err() {
                                break;
                            }
                        }
                    }
                });
            }
        }
    });
    injected
}

/// H2 of the 2026-11-27 review: a host that took over the peer's address
/// relays the link, and injects a STORE, an ACK and an OUTCOMES frame.
/// Through an honest relay copies flow (TLS end to end, the relay sees
/// nothing); once it injects, every frame is refused with the link (TLS
/// records it cannot make), no `250` is given without a real copy
/// (`shadow_required`: 451), and when n1 dies, n2 delivers the real copy
/// once and never the forged message (before, with the HMAC proof of the
/// handshake only: the forged copy was claimed and delivered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_on_the_shadow_link_cannot_inject_frames() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = temp_dir("shadow-relay");
    let lan = Lan::create(3);
    let redis = Redis::start(&dir);
    let held = lan.socket(SocketAddr::new(lan.hub(), 0));
    let setup = Setup {
        hop: held.local_addr().unwrap(),
        proxied: false,
        claim_secs: 1,
        required: true,
        relay: Some(lan.node_ip(2)),
    };
    let configs: Vec<_> = (0..2)
        .map(|i| node_config(&dir, &lan, i, &redis, &setup))
        .collect();
    let inject = Arc::new(AtomicBool::new(false));
    let injected = relay(&lan, SocketAddr::new(lan.node_ip(1), 2526), inject.clone()).await;
    let mut nodes = Nodes(
        (0..2)
            .map(|i| Some(spawn_node(&lan, i, &configs[i])))
            .collect(),
    );
    let n1 = SocketAddr::new(lan.node_ip(0), 25);
    let up = async {
        while send_one(&lan, n1, "real-0").await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), up)
        .await
        .expect("n1 up, its copy on n2 through the relay");
    inject.store(true, Ordering::Relaxed);
    // The live link carries keepalives both ways within 2 s: the relay
    // injects into each direction then.
    let broken = || injected.load(Ordering::Relaxed) >= 2;
    assert!(
        wait_until(15, broken).await,
        "nothing went through the relay"
    );
    let refused = send_one(&lan, n1, "real-1").await;
    assert!(
        refused.as_ref().is_err_and(|r| r.starts_with("451")),
        "a 250 without a real copy: {refused:?}"
    );
    let link_broken = |e: &Event| {
        matches!(
            e,
            Event::ShadowLinkEnded { .. } | Event::ShadowLinkRefused { .. }
        )
    };
    let n2_events = logged_events(&dir.join("n2"));
    assert!(
        n2_events.iter().any(link_broken),
        "{}",
        read_log(&dir.join("n2"))
    );
    // n1 dies: n2 claims what it really holds.
    let mut first = nodes.0[0].take().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let claimed = || claimed_from(&dir.join("n2"), "n1") > 0;
    assert!(
        wait_until(30, claimed).await,
        "{}",
        read_log(&dir.join("n2"))
    );
    let sink = Sink::start_on(
        held,
        SinkOptions {
            record: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(wait_until(30, || received(&sink).contains_key("real-0")).await);
    let seen = received(&sink);
    assert_eq!(seen.get("real-0"), Some(&1), "{seen:?}");
    assert!(
        !seen.contains_key("injected") && !seen.contains_key("real-1"),
        "{seen:?}"
    );
    drop(nodes);
}

/// `sluice queue` against a node's configuration: its JSON answer.
fn queue_json(config: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("queue")
        .arg("--json")
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// L4 of the 2026-11-27 review: a message an administrator held on its
/// origin stays held when its peer claims the copy (before: the claim
/// delivered it), and the other one is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_message_stays_held_when_its_copy_is_claimed() {
    let mut pair = Pair::start("shadow-hold", 1);
    pair.send_to_n1("h", 2).await;
    let listed = queue_json(&pair.configs[0], &["list"]);
    let ids: Vec<String> = listed["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    let held = queue_json(&pair.configs[0], &["hold", &ids[0]]);
    assert_eq!(held["count"], 1, "{held}");
    // The hold reaches n2 with the outcomes (every 100 ms).
    let n2_log = pair.dir.join("n2/maillog");
    let marked = || {
        logged_in(&n2_log)
            .iter()
            .any(|l| matches!(l.event, Event::CopyMarked { held: true, .. }))
    };
    assert!(wait_until(10, marked).await, "{}", pair.log("n2"));
    // n1 dies; n2 claims both copies.
    let mut first = pair.nodes.0[0].take().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let claimed = || pair.claimed("n2", "n1") >= 2;
    assert!(wait_until(30, claimed).await, "{}", pair.log("n2"));
    let on_hold = queue_json(&pair.configs[1], &["list", "--state", "hold"]);
    assert_eq!(
        on_hold["messages"].as_array().map(Vec::len),
        Some(1),
        "the held message is not held on n2: {on_hold}"
    );
    // The next hop comes back: one of the two arrives, the held one waits.
    let held = pair.held.take().unwrap();
    let sink = Sink::start_on(
        held,
        SinkOptions {
            record: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        wait_until(30, || sink.count() == 1).await,
        "{}",
        pair.log("n2")
    );
    let on_hold = queue_json(&pair.configs[1], &["list", "--state", "hold"]);
    assert_eq!(
        on_hold["messages"].as_array().map(Vec::len),
        Some(1),
        "{on_hold}"
    );
}
