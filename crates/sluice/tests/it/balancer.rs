//! Nodes behind a real HAProxy (PROXY v2 to each, SMTP health checks
//! with `check-send-proxy`): a node being stopped fails its health checks
//! first and keeps serving, so HAProxy takes it out before its listener
//! closes, and clients of the balancer see no error.

use crate::common;

use std::net::SocketAddr;

use common::haproxy::Balancer;
use common::*;

/// A node behind the balancer: one PROXY listener trusting 127.0.0.1 (the
/// balancer), relaying for 127.0.0.9 (the clients of the test).
fn node(dir: &std::path::Path, sink: SocketAddr, drain_secs: u64) -> sluice::config::Config {
    let mut cfg = config(dir, Some(sink));
    cfg.smtpd.mynetworks = vec![net("127.0.0.9/32")];
    cfg.smtpd.listen.clear();
    cfg.smtpd.listeners.push(proxy_listener());
    cfg.smtpd.balancer_drain_secs = drain_secs;
    cfg
}

/// One message through the balancer from a relaying client; its reply.
async fn relay_one(front: SocketAddr, subject: &str) -> String {
    let (mut c, greeting) = Client::connect_from("127.0.0.9", front).await;
    if !greeting.starts_with("220 ") {
        return format!("greeting: {greeting:?}");
    }
    let ehlo = c.cmd("EHLO client.test").await;
    if !ehlo.starts_with("250") {
        return format!("EHLO: {ehlo:?}");
    }
    c.message("a@b.test", &["x@dest.test"], &body(subject))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_is_taken_out_of_the_balancer_before_it_closes() {
    let dir = temp_dir("balancer-drain");
    let sink = recording_sink().await;
    let (a, addr_a) = start(node(&dir.join("a"), sink.addr, 3)).await;
    let (_b, addr_b) = start(node(&dir.join("b"), sink.addr, 3)).await;
    let lb = Balancer::start(&dir, &[("a", addr_a), ("b", addr_b)]);
    for i in 0..4 {
        let r = relay_one(lb.front, &format!("before-{i}")).await;
        assert!(r.starts_with("250 2.0.0"), "{r}\n{}", lb.said());
    }

    let stop = tokio::spawn(a.shutdown());
    let down = || lb.said().contains("smtp/a is DOWN");
    assert!(wait_until(10, down).await, "{}", lb.said());
    // HAProxy has taken it out while it still listens and serves.
    assert!(
        !stop.is_finished(),
        "node a closed before HAProxy took it out"
    );
    let header = b"PROXY TCP4 127.0.0.9 127.0.0.1 40000 25\r\n";
    let mut direct = tokio::net::TcpStream::connect(addr_a).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut direct, header)
        .await
        .unwrap();
    let mut greeting = vec![0u8; 256];
    let n = tokio::io::AsyncReadExt::read(&mut direct, &mut greeting)
        .await
        .unwrap();
    let greeting = String::from_utf8_lossy(&greeting[..n]).into_owned();
    assert!(
        greeting.starts_with("220 "),
        "node a, draining: {greeting:?}"
    );

    // Clients of the balancer meanwhile: every one served (by b).
    for i in 0..10 {
        let r = relay_one(lb.front, &format!("during-{i}")).await;
        assert!(r.starts_with("250 2.0.0"), "{r}\n{}", lb.said());
    }
    stop.await.unwrap();
    let checks = count_logged(&dir.join("a"), |e| {
        matches!(e, Event::HealthCheckFailed { .. })
    });
    assert!(checks > 0, "{}", read_log(&dir.join("a")));
    assert!(
        wait_until(10, || sink.count() == 14).await,
        "{}",
        sink.count()
    );
}
