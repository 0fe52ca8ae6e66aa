//! Per-listener overrides, master.cf's `-o` (issue 40 item 5): a second
//! listener with its own `mynetworks`, `message_size_limit` and banner
//! decides as a real Postfix 3.7 with a second smtpd service `-o
//! mynetworks=127.0.0.0/8 -o message_size_limit=2000 -o smtpd_banner=…`
//! (reply codes and enhanced codes per port), while the main listener
//! keeps the main settings. Then Sluice's own: a listener with its own
//! milter and certificate, the other without.

use std::net::SocketAddr;

use crate::common;
use common::milter_probe::MilterProbe;
use common::postfix::{Postfix, Reply};
use common::tls::TlsClient;
use common::*;

/// What one port answered: the greeting after the host name, relaying
/// to far.test, and a MAIL with `SIZE=3000`.
type Answers = (String, Vec<(u16, Option<String>)>);

async fn ask(addr: SocketAddr) -> Answers {
    let (mut c, greeting) = Client::connect(addr).await;
    let banner = greeting
        .trim_end()
        .split_once(' ')
        .and_then(|(_, rest)| rest.split_once(' '))
        .map(|(_, text)| text.to_string())
        .unwrap_or_default();
    let mut replies = Vec::new();
    let mut push = |r: String| {
        let r = Reply::parse(&r);
        replies.push((r.code, r.enhanced));
    };
    push(c.cmd("EHLO client.test").await);
    push(c.cmd("MAIL FROM:<a@client.test>").await);
    push(c.cmd("RCPT TO:<b@far.test>").await);
    push(c.cmd("RSET").await);
    push(c.cmd("MAIL FROM:<a@client.test> SIZE=3000").await);
    push(c.cmd("RSET").await);
    push(c.cmd("MAIL FROM:<a@client.test> SIZE=1000").await);
    (banner, replies)
}

/// The listening addresses of a daemon logging to `dir`, in order.
async fn listeners(dir: &std::path::Path, n: usize) -> Vec<SocketAddr> {
    let found = || -> Vec<SocketAddr> {
        events_named(dir, "listening")
            .iter()
            .filter_map(|e| e["addr"].as_str()?.parse().ok())
            .collect()
    };
    assert!(wait_until(20, || found().len() >= n).await, "{:?}", found());
    found()
}

/// `[smtpd.listeners.overrides]` as a file would hold it.
fn overrides(text: &str) -> toml::Table {
    toml::from_str(text).unwrap()
}

fn second_listener(o: toml::Table) -> sluice::config::listener::ListenerConfig {
    let mut l: sluice::config::listener::ListenerConfig =
        toml::from_str("listen = \"127.0.0.1:0\"").unwrap();
    l.overrides = o;
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_decide_as_postfix_master_cf_o_does() {
    let postfix = Postfix::start_listening(
        &[],
        &[("mynetworks", "192.0.2.0/24")],
        "",
        &[
            "smtpd -o mynetworks=127.0.0.0/8 -o message_size_limit=2000 \
           -o { smtpd_banner = $myhostname ESMTP special }",
        ],
    );
    let theirs = (ask(postfix.addr).await, ask(postfix.listeners[0]).await);
    drop(postfix);

    let dir = temp_dir("listener-overrides");
    let mut cfg = config(&dir, None);
    cfg.smtpd.mynetworks = vec![net("192.0.2.0/24")];
    cfg.smtpd.listeners.push(second_listener(overrides(
        "smtpd.mynetworks = [\"127.0.0.0/8\"]\nsmtpd.message_size_limit = 2000\n\
         smtpd.banner = \"ESMTP special\"\n",
    )));
    let (server, _) = start(cfg).await;
    let addrs = listeners(&dir, 2).await;
    let ours = (ask(addrs[0]).await, ask(addrs[1]).await);
    server.shutdown().await;

    // Not vacuous: the two ports of Postfix answer differently.
    assert_ne!(theirs.0 .1, theirs.1 .1, "{theirs:?}");
    assert_eq!(theirs.1 .0, "ESMTP special", "{theirs:?}");
    assert_eq!(ours.0 .1, theirs.0 .1, "main listener: ours, Postfix's");
    assert_eq!(ours.1, theirs.1, "overriding listener: ours, Postfix's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_has_its_own_milters_and_certificate() {
    let sink = recording_sink().await;
    let dir = temp_dir("listener-own-parts");
    std::fs::create_dir_all(&*dir).unwrap();
    let probe = MilterProbe::start(
        &dir.join("probe.sock"),
        vec![(
            "X-Filtered-By".into(),
            "the second listener's milter".into(),
        )],
    );
    let made = rcgen::generate_simple_self_signed(vec!["b.example".into()]).unwrap();
    let (cert, key) = (dir.join("b.pem"), dir.join("b.key"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.smtpd.listeners.push(second_listener(overrides(&format!(
        "smtpd.milters = [\"unix:{}\"]\ntls.cert_file = {:?}\ntls.key_file = {:?}\n",
        probe.socket.display(),
        cert.display().to_string(),
        key.display().to_string()
    ))));
    let (server, _) = start(cfg).await;
    let addrs = listeners(&dir, 2).await;
    for (i, addr) in addrs.iter().enumerate() {
        let mut c = Client::ready(*addr).await;
        let r = c
            .message("a@sender.test", &["b@far.test"], &body(&format!("via {i}")))
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    assert!(wait_until(20, || sink.count() >= 2).await);
    let filtered = |i: usize| {
        sink.messages().iter().any(|m| {
            let text = String::from_utf8_lossy(&m.body);
            text.contains(&format!("via {i}")) && text.contains("X-Filtered-By:")
        })
    };
    assert_eq!((filtered(0), filtered(1)), (false, true));
    // The second listener's certificate is b.example's: the handshake
    // verifies against it as the only root.
    let (mut c, _) = Client::connect(addrs[1]).await;
    assert!(c.cmd("EHLO client.test").await.starts_with("250"));
    assert!(c.cmd("STARTTLS").await.starts_with("220"));
    let mut t = TlsClient::handshake(c.stream, &cert, "b.example").await;
    assert!(t.cmd("EHLO client.test").await.starts_with("250"));
    server.shutdown().await;
}
