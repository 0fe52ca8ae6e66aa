//! Behind a real HAProxy: the PROXY v1 and v2 headers give the real client
//! address, which decides relaying and appears in the log and Received.

use crate::common;

use common::haproxy::HaProxy;
use common::*;
use std::net::SocketAddr;

use sluice::config::listener::ListenerConfig;
use tokio::io::AsyncReadExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_client_behind_haproxy_decides_relaying() {
    let dir = temp_dir("proxy-haproxy");
    let sink = recording_sink().await;
    // Only 127.0.0.9 may relay; HAProxy itself connects from 127.0.0.1.
    let cfg = proxy_listener_config(&dir, sink.addr);
    let (server, addr) = start(cfg).await;
    let lb = HaProxy::start(&dir, addr);
    for (front, version) in [(lb.v1, "v1"), (lb.v2, "v2")] {
        // The trusted client may relay, through either header version.
        let (mut c, greeting) = Client::connect_from("127.0.0.9", front).await;
        assert!(greeting.starts_with("220 "), "{version}: {greeting}");
        assert!(c.cmd("EHLO client.test").await.starts_with("250"));
        let r = c
            .message("a@b.test", &["x@dest.test"], &body(version))
            .await;
        assert!(r.starts_with("250 2.0.0"), "{version}: {r}");
        // Another client through the same balancer may not.
        let (mut c, _) = Client::connect_from("127.0.0.8", front).await;
        assert!(c.cmd("EHLO client.test").await.starts_with("250"));
        assert!(c.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
        let r = c.cmd("RCPT TO:<x@dest.test>").await;
        assert!(r.starts_with("554 5.7.1"), "{version}: {r}");
    }
    assert!(wait_until(10, || sink.count() == 2).await);
    for m in sink.messages() {
        let text = String::from_utf8_lossy(&m.body).into_owned();
        assert!(text.contains("([127.0.0.9])"), "{text}");
    }
    // Straight to the listener, without a header: no session.
    let (_c, greeting) = Client::connect(addr).await;
    assert_eq!(greeting, "", "closed without a greeting");
    drop(lb);
    server.shutdown().await;
    let log = read_log(&dir);
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::Proxied { client_ip, .. } if client_ip.to_string() == "127.0.0.9"
        )),
        "{log}"
    );
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::Connect { client_ip, .. } if client_ip.to_string() == "127.0.0.8"
        )),
        "{log}"
    );
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::ProxyRefused { cause, .. } if cause == "no_header" || cause == "bad_header"
        )),
        "{log}"
    );
}

/// A PROXY listener that trusts only 127.0.0.1 as its balancer, and lets
/// 127.0.0.9 relay.
fn proxy_listener_config(dir: &std::path::Path, sink: SocketAddr) -> sluice::config::Config {
    let mut cfg = config(dir, Some(sink));
    cfg.smtpd.mynetworks = vec![net("127.0.0.9/32")];
    cfg.smtpd.idle_timeout_secs = 2;
    cfg.smtpd.listen.clear();
    cfg.smtpd.listeners.push(proxy_listener());
    cfg
}

/// Connects from `local`, sends `header` then a whole relay attempt, and
/// returns everything the server answered before it closed.
async fn forge(local: &str, addr: SocketAddr, header: &[u8]) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let mut out = header.to_vec();
    out.extend_from_slice(
        b"EHLO evil.test\r\nMAIL FROM:<a@b.test>\r\nRCPT TO:<x@dest.test>\r\nDATA\r\n\
          Subject: forged\r\n\r\nrelayed?\r\n.\r\nQUIT\r\n",
    );
    // The server may close before reading it all: a failed write is fine.
    let _ = tokio::io::AsyncWriteExt::write_all(&mut stream, &out).await;
    let mut got = Vec::new();
    let read = stream.read_to_end(&mut got);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("the server closes the connection");
    String::from_utf8_lossy(&got).into_owned()
}

/// PROXY v2 header (PROXY, TCP over IPv4) naming `src` as the client.
fn v2_header(src: [u8; 4]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&[127, 0, 0, 1, 0x9c, 0x40, 0, 25]);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_header_from_a_peer_that_is_not_the_balancer_gains_nothing() {
    let dir = temp_dir("proxy-forged");
    let sink = recording_sink().await;
    let (server, addr) = start(proxy_listener_config(&dir, sink.addr)).await;
    let v1: &[u8] = b"PROXY TCP4 127.0.0.9 127.0.0.1 40000 25\r\n";
    // The attacker at 127.0.0.8 claims the relaying address 127.0.0.9.
    for (version, header) in [("v1", v1.to_vec()), ("v2", v2_header([127, 0, 0, 9]))] {
        let got = forge("127.0.0.8", addr, &header).await;
        assert_eq!(got, "", "{version}: closed without a word, got {got:?}");
    }
    // The same bytes from the balancer's address are believed: the check
    // is on the peer, not on the header.
    let got = forge("127.0.0.1", addr, v1).await;
    assert!(got.contains("250 2.0.0"), "from the balancer: {got}");
    assert!(wait_until(10, || sink.count() == 1).await);
    server.shutdown().await;
    assert_eq!(sink.count(), 1, "only the balancer's message was relayed");
    let log = read_log(&dir);
    let refused: Vec<Event> = logged_events(&dir)
        .into_iter()
        .filter(|e| matches!(e, Event::ProxyRefused { .. }))
        .collect();
    assert_eq!(refused.len(), 2, "one line per refused peer: {log}");
    assert!(
        refused.iter().all(|e| matches!(
            e,
            Event::ProxyRefused { lb_ip, cause, .. }
                if lb_ip.to_string() == "127.0.0.8" && cause == "peer_not_allowed"
        )),
        "{log}"
    );
}

#[test]
fn a_proxy_listener_without_its_balancers_is_a_configuration_error() {
    let dir = temp_dir("proxy-config");
    let mut cfg = proxy_listener_config(&dir, "127.0.0.1:9".parse().unwrap());
    cfg.smtpd.listeners[0].proxy_protocol_from.clear();
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("proxy_protocol_from"), "{err}");
    let parsed: Result<ListenerConfig, _> = toml::from_str(
        "listen = \"127.0.0.1:25\"\nproxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/99\"]",
    );
    assert!(parsed.is_err(), "a bad network fails when the file is read");
}
