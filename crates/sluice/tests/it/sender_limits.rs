//! Sender limits (issue 38, item 6): an authenticated login that sends
//! through two nodes sharing a real redis-server is counted once; the
//! message over the limit, and the login's new mail on every node, are
//! accepted and held, with one `limit_crossed` event for the cluster;
//! `sluice queue release --login` lifts it and delivers what was held.
//! Alone, a node keeps a containment across a restart; with Redis
//! unreachable it counts alone (logged once) and never refuses mail.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;

use common::redis::Redis;
use common::*;
use sluice::admin::protocol::{Filter, Request};
use sluice::config::listener::{ListenerConfig, ListenerKind};
use sluice::intake::limits::Kind;
use sluice::tools::queue_cli::call;

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A node with AUTH in the clear on a second listener (users alice and
/// bob, password `pw`), relaying to `sink`, at most `per_hour` messages
/// a login.
fn node(dir: &Path, sink: SocketAddr, per_hour: u64) -> sluice::config::Config {
    let mut cfg = config(dir, Some(sink));
    cfg.smtpd.mynetworks = vec![net("127.0.0.3/32")];
    let users = dir.join("users");
    std::fs::create_dir_all(dir).unwrap();
    let hash = sluice::receive::smtp::auth::hash_password("pw").unwrap();
    std::fs::write(&users, format!("alice {hash}\nbob {hash}\n")).unwrap();
    cfg.tables.insert(
        "users".into(),
        toml::from_str(&format!("kind = \"static\"\npath = {users:?}")).unwrap(),
    );
    cfg.auth.table = Some("users".into());
    cfg.auth.failure_delay_ms = 0;
    cfg.smtpd.listeners.push(ListenerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        kind: ListenerKind::Smtp,
        proxy_protocol: false,
        proxy_protocol_from: Vec::new(),
        auth: Some(true),
        auth_without_tls: true,
        sender_auth: false,
        dmarc_reject: false,
        restrictions: Default::default(),
        content_checks: Default::default(),
        overrides: Default::default(),
        smtpd_tls_ask_ccert: None,
        content_filter: None,
    });
    cfg.sender_limits.login_messages_per_hour = per_hour;
    cfg
}

/// One message from `login` to a stranger's address; its queue ID.
async fn send_as(addr: SocketAddr, login: &str, tag: &str) -> String {
    let mut c = Client::ready(addr).await;
    let r = c
        .cmd(&format!("AUTH PLAIN {}", b64(&format!("\0{login}\0pw"))))
        .await;
    assert!(r.starts_with("235"), "{r}");
    let from = format!("{login}@ours.test");
    let r = c.message(&from, &["friend@far.test"], &body(tag)).await;
    assert!(r.starts_with("250"), "{tag}: {r}");
    qid_of(&r)
}

/// The queue IDs of `dir`'s `hold` events with cause `limit`.
fn held(dir: &Path) -> Vec<String> {
    events_named(dir, "hold")
        .iter()
        .filter(|e| e["cause"] == "limit")
        .map(|e| e["queue_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Subjects the sink received.
fn delivered(sink: &sluice_bench::sink::Sink) -> Vec<String> {
    let mut s: Vec<String> = sink
        .messages()
        .iter()
        .filter_map(|m| sluice_bench::sink::header_value(&m.body, b"Subject"))
        .map(|s| s.trim_start_matches(':').trim().to_string())
        .collect();
    s.sort();
    s
}

fn cluster_of(cfg: &mut sluice::config::Config, name: &str, url: &str) {
    let mut cluster: sluice::config::cluster::ClusterConfig =
        toml::from_str(&format!("redis_url = {url:?}")).unwrap();
    cluster.node = Some(name.into());
    cluster.heartbeat_ms = 200;
    cfg.cluster = Some(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_is_counted_once_across_the_cluster_and_released_by_name() {
    let dir = temp_dir("limits-cluster");
    let redis = Redis::start(&dir.join("redis"));
    let sink = recording_sink().await;
    let (da, db) = (dir.join("a"), dir.join("b"));
    let mut ca = node(&da, sink.addr, 3);
    let mut cb = node(&db, sink.addr, 3);
    cluster_of(&mut ca, "a", &redis.url());
    cluster_of(&mut cb, "b", &redis.url());
    let (data_a, data_b) = (ca.data_dir.clone(), cb.data_dir.clone());
    let (server_a, _) = start(ca).await;
    let (server_b, _) = start(cb).await;
    let (a, b) = (server_a.addrs[1], server_b.addrs[1]);
    send_as(a, "alice", "m1").await;
    send_as(b, "alice", "m2").await;
    send_as(a, "alice", "m3").await;
    // The fourth, on either node, is over the cluster's three.
    let over = send_as(b, "alice", "m4").await;
    let later = send_as(a, "alice", "m5").await;
    send_as(b, "bob", "bob1").await;
    assert!(wait_until(15, || delivered(&sink).len() >= 4).await);
    assert!(wait_until(15, || held(&da).len() + held(&db).len() >= 2).await);
    assert_eq!(delivered(&sink), ["bob1", "m1", "m2", "m3"]);
    assert_eq!(held(&db), [over]);
    assert_eq!(held(&da), [later]);
    let crossed: Vec<_> = [&da, &db]
        .iter()
        .flat_map(|d| events_named(d, "limit_crossed"))
        .collect();
    assert_eq!(crossed.len(), 1, "{crossed:?}");
    assert_eq!(
        (
            &crossed[0]["kind"],
            &crossed[0]["who"],
            &crossed[0]["count"]
        ),
        (&"login".into(), &"alice".into(), &4.into())
    );
    // Held mail shows its login, and is listed by it.
    let listed = call(
        &data_b,
        &Request::List {
            filter: Filter {
                login: Some("Alice".into()),
                ..Default::default()
            },
        },
    )
    .await
    .unwrap();
    assert_eq!(listed.messages.len(), 1, "{listed:?}");
    assert!(listed.messages[0].limited && listed.messages[0].state == "hold");
    // The command as an operator types it, on node b.
    let conf = client_config(&db, &data_b);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["queue", "--config"])
        .arg(&conf)
        .args(["release", "--login", "alice"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(wait_until(15, || delivered(&sink).len() >= 5).await);
    assert!(delivered(&sink).contains(&"m4".to_string()));
    // The containment is lifted for the cluster: a's new mail flows; what
    // a held stays held until it is released on a.
    send_as(a, "alice", "m6").await;
    assert!(wait_until(15, || delivered(&sink).contains(&"m6".into())).await);
    assert!(!delivered(&sink).contains(&"m5".into()));
    let r = call(
        &data_a,
        &Request::ReleaseLimited {
            kind: Kind::Login,
            who: "alice".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(r.count, 1, "{r:?}");
    assert!(wait_until(15, || delivered(&sink).contains(&"m5".into())).await);
    let released = events_named(&db, "limit_released");
    assert_eq!(released[0]["contained"], true, "{released:?}");
    assert_eq!(released[0]["released"], 1);
    server_a.shutdown().await;
    server_b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_node_keeps_a_sender_contained_across_a_restart() {
    let dir = temp_dir("limits-alone");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.sender_limits.sender_recipients_per_hour = 3;
    // Mail an access table holds stays held when the limit is lifted.
    std::fs::create_dir_all(&*dir).unwrap();
    std::fs::write(dir.join("access"), "review@far.test HOLD for review\n").unwrap();
    cfg.restrictions.recipient = format!(
        "check_recipient_access texthash:{}, permit",
        dir.join("access").display()
    );
    let data_dir = cfg.data_dir.clone();
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    // A mynetworks client (a web application): counted by its sender.
    let r = c
        .message("app@ours.test", &["x@far.test", "y@far.test"], &body("s1"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    let r = c
        .message("app@ours.test", &["z@far.test", "w@far.test"], &body("s2"))
        .await;
    assert!(r.starts_with("250"), "held, not refused: {r}");
    let s2 = qid_of(&r);
    let r = c
        .message("other@ours.test", &["x@far.test"], &body("o1"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(wait_until(15, || delivered(&sink).len() >= 2).await);
    assert!(wait_until(15, || !held(&dir).is_empty()).await);
    assert_eq!(held(&dir), [s2]);
    server.shutdown().await;
    // Restarted: the held message stays held, the sender stays contained.
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("APP@ours.test", &["v@far.test"], &body("s3"))
        .await;
    let s3 = qid_of(&r);
    assert!(wait_event(10, &dir, "hold", |e| e["queue_id"] == s3.as_str()).await);
    let r = c
        .message("app@ours.test", &["review@far.test"], &body("s4"))
        .await;
    let s4 = qid_of(&r);
    assert!(wait_event(10, &dir, "hold", |e| e["queue_id"] == s4.as_str()).await);
    assert_eq!(delivered(&sink), ["o1", "s1"]);
    let r = call(
        &data_dir,
        &Request::ReleaseLimited {
            kind: Kind::Sender,
            who: "app@ours.test".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(r.count, 2, "{r:?}");
    assert!(wait_until(15, || delivered(&sink).len() >= 4).await);
    assert_eq!(delivered(&sink), ["o1", "s1", "s2", "s3"]);
    let still = call(
        &data_dir,
        &Request::List {
            filter: Filter::default(),
        },
    )
    .await
    .unwrap();
    let ids: Vec<_> = still.messages.iter().map(|e| (&e.id, &e.state)).collect();
    assert_eq!(ids, [(&s4, &"hold".to_string())]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_a_node_counts_alone_and_still_takes_mail() {
    let dir = temp_dir("limits-no-redis");
    let sink = recording_sink().await;
    let mut cfg = node(&dir, sink.addr, 1);
    // Nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", closed.local_addr().unwrap());
    drop(closed);
    cluster_of(&mut cfg, "lone", &url);
    let (server, _) = start(cfg).await;
    let addr = server.addrs[1];
    send_as(addr, "alice", "n1").await;
    let over = send_as(addr, "alice", "n2").await;
    send_as(addr, "alice", "n3").await;
    assert!(wait_until(15, || held(&dir).len() >= 2).await);
    assert_eq!(held(&dir).first(), Some(&over));
    assert!(wait_until(15, || !delivered(&sink).is_empty()).await);
    assert_eq!(delivered(&sink), ["n1"]);
    let alone = events_named(&dir, "limits_alone");
    assert_eq!(alone.len(), 1, "logged once: {alone:?}");
    assert!(alone[0]["error"].is_string());
    server.shutdown().await;
}
