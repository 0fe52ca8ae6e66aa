//! TLS and AUTH through real sockets: STARTTLS with the generated
//! certificate, the CVE-2011-0411 injection, implicit TLS on a
//! `submissions` listener, submission's STARTTLS/AUTH requirements,
//! PLAIN and LOGIN, failure limits, and a certificate reload.

use crate::common;

use std::path::{Path, PathBuf};

use base64::Engine;
use common::tls::TlsClient;
use common::*;
use sluice::config::listener::{ListenerConfig, ListenerKind};
use sluice::config::Config;
use tokio::net::TcpStream;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn snakeoil(dir: &Path) -> PathBuf {
    dir.join("var/tls/snakeoil-cert.pem")
}

/// Untrusted client (127.0.0.1 outside mynetworks), a users table with
/// `alice@ours.test` / `wonderland`, and extra listeners of `kinds`.
fn with_auth(dir: &Path, sink: std::net::SocketAddr, kinds: &[ListenerKind]) -> Config {
    let mut cfg = config(dir, Some(sink));
    cfg.smtpd.mynetworks = vec![net("127.0.0.3/32")];
    let users = dir.join("users");
    let hash = sluice::receive::smtp::auth::hash_password("wonderland").unwrap();
    std::fs::write(&users, format!("alice@ours.test {hash}\n")).unwrap();
    cfg.tables.insert(
        "users".into(),
        toml::from_str(&format!("kind = \"static\"\npath = {users:?}")).unwrap(),
    );
    cfg.auth.table = Some("users".into());
    cfg.auth.failure_delay_ms = 0;
    for kind in kinds {
        cfg.smtpd.listeners.push(ListenerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            kind: *kind,
            proxy_protocol: false,
            proxy_protocol_from: Vec::new(),
            auth: None,
            auth_without_tls: false,
            sender_auth: false,
            dmarc_reject: false,
            restrictions: Default::default(),
            content_checks: Default::default(),
            overrides: Default::default(),
            smtpd_tls_ask_ccert: None,
            content_filter: None,
        });
    }
    cfg
}

/// Connects, EHLO, STARTTLS, handshake, and EHLO again.
async fn starttls(addr: std::net::SocketAddr, ca: &Path) -> TlsClient {
    let mut c = Client::ready(addr).await;
    let r = c.cmd("STARTTLS").await;
    assert!(r.starts_with("220 2.0.0"), "{r}");
    let mut t = TlsClient::handshake(c.stream, ca, "mx.test").await;
    assert!(t.cmd("EHLO client.test").await.starts_with("250"));
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_with_the_generated_certificate_and_no_injection() {
    let dir = temp_dir("tls-starttls");
    let sink = recording_sink().await;
    let (server, addr) = start(config(&dir, Some(sink.addr))).await;
    let mut c = Client::ready(addr).await;
    let ehlo = c.cmd("EHLO client.test").await;
    assert!(ehlo.contains("250-STARTTLS"), "{ehlo}");
    // A command pipelined in clear behind STARTTLS must not run after it.
    c.send(b"STARTTLS\r\nEHLO injected.test\r\n").await;
    assert!(c.reply().await.starts_with("220 2.0.0"));
    let mut t = TlsClient::handshake(c.stream, &snakeoil(&dir), "mx.test").await;
    let first = t.cmd("NOOP").await;
    assert_eq!(first, "250 2.0.0 Ok\r\n", "the injected EHLO was not run");
    let ehlo = t.cmd("EHLO client.test").await;
    assert!(!ehlo.contains("STARTTLS"), "{ehlo}");
    assert!(t.cmd("MAIL FROM:<a@b.test>").await.starts_with("250"));
    assert!(t.cmd("RCPT TO:<x@dest.test>").await.starts_with("250"));
    assert!(t.cmd("DATA").await.starts_with("354"));
    t.send(format!("{}.\r\n", body("tls")).as_bytes()).await;
    assert!(t.reply().await.starts_with("250 2.0.0"));
    assert!(wait_until(10, || sink.count() == 1).await);
    let got = String::from_utf8_lossy(&sink.messages()[0].body).into_owned();
    assert!(got.contains("(using TLSv1.3 with cipher TLS13_"), "{got}");
    assert!(got.contains("with ESMTPS id"), "{got}");
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::TlsIn { client_ip, result, detail }
            if client_ip.to_string() == "127.0.0.1"
                && result == "established"
                && detail.starts_with("TLSv1.3")
    )));
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::StarttlsInjection { octets: 20, .. }
    )));
    // The generated certificate names the host and lasts ten years from
    // now (rcgen's defaults: "rcgen self signed cert", 1975 to 4096).
    let pem = std::fs::read(snakeoil(&dir)).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
    let cert = pem.parse_x509().unwrap();
    let cn = cert.subject().iter_common_name().next().unwrap();
    assert_eq!(cn.as_str().unwrap(), "mx.test");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (from, until) = (
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    );
    assert!(from <= now && now - from < 3 * 86_400, "not before {from}");
    let years = (until - now) / (365 * 86_400);
    assert!((9..=10).contains(&years), "valid for {years} years");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submission_needs_tls_then_auth_and_then_may_relay() {
    let dir = temp_dir("tls-submission");
    let sink = recording_sink().await;
    let cfg = with_auth(&dir, sink.addr, &[ListenerKind::Submission]);
    let (server, _) = start(cfg).await;
    let (smtp, submission) = (server.addrs[0], server.addrs[1]);
    // Port 25 style: no AUTH in clear, and no relaying for strangers.
    let mut c = Client::ready(smtp).await;
    assert!(!c.cmd("EHLO client.test").await.contains("AUTH"));
    let r = c
        .cmd(&format!(
            "AUTH PLAIN {}",
            b64("\0alice@ours.test\0wonderland")
        ))
        .await;
    assert!(r.starts_with("503 5.5.1"), "{r}");
    // Nor once encrypted: AUTH belongs to submission, not port 25, unless
    // `[auth] offer_on_smtp` or the listener's `auth` says so (as
    // Postfix's master.cf).
    let mut t = starttls(smtp, &snakeoil(&dir)).await;
    let ehlo = t.cmd("EHLO client.test").await;
    assert!(!ehlo.contains("AUTH"), "AUTH offered on port 25: {ehlo}");
    let r = t
        .cmd(&format!(
            "AUTH PLAIN {}",
            b64("\0alice@ours.test\0wonderland")
        ))
        .await;
    assert!(r.starts_with("503 5.5.1"), "{r}");
    // Submission: STARTTLS first, then AUTH.
    let mut c = Client::ready(submission).await;
    let r = c.cmd("MAIL FROM:<alice@ours.test>").await;
    assert!(r.starts_with("530 5.7.0 Must issue a STARTTLS"), "{r}");
    let mut t = starttls(submission, &snakeoil(&dir)).await;
    let r = t.cmd("MAIL FROM:<alice@ours.test>").await;
    assert!(r.starts_with("530 5.7.0 Authentication required"), "{r}");
    let r = t
        .cmd(&format!("AUTH PLAIN {}", b64("\0alice@ours.test\0wrong")))
        .await;
    assert!(r.starts_with("535 5.7.8"), "{r}");
    let r = t
        .cmd(&format!(
            "AUTH PLAIN {}",
            b64("\0alice@ours.test\0wonderland")
        ))
        .await;
    assert!(r.starts_with("235 2.7.0"), "{r}");
    let r = t.cmd("MAIL FROM:<alice@ours.test> AUTH=<>").await;
    assert!(r.starts_with("250"), "{r}");
    let r = t.cmd("RCPT TO:<friend@elsewhere.test>").await;
    assert!(
        r.starts_with("250"),
        "an authenticated client may relay: {r}"
    );
    assert!(t.cmd("DATA").await.starts_with("354"));
    t.send(format!("{}.\r\n", body("sub")).as_bytes()).await;
    assert!(t.reply().await.starts_with("250 2.0.0"));
    assert!(wait_until(10, || sink.count() == 1).await);
    let got = String::from_utf8_lossy(&sink.messages()[0].body).into_owned();
    assert!(got.contains("with ESMTPSA id"), "{got}");
    server.shutdown().await;
    let auth = |result: &str| {
        any_logged(&dir, |e| {
            matches!(
                e,
                Event::Auth { method, username: Some(user), result: r, .. }
                    if method == "PLAIN" && user == "alice@ours.test" && r == result
            )
        })
    };
    assert!(auth("ok") && auth("failed"), "{}", read_log(&dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submissions_is_tls_from_the_first_byte_and_login_works() {
    let dir = temp_dir("tls-submissions");
    let sink = recording_sink().await;
    let cfg = with_auth(&dir, sink.addr, &[ListenerKind::Submissions]);
    let (server, _) = start(cfg).await;
    let stream = TcpStream::connect(server.addrs[1]).await.unwrap();
    let mut t = TlsClient::handshake(stream, &snakeoil(&dir), "mx.test").await;
    assert!(t.reply().await.starts_with("220 "), "greeting over TLS");
    let ehlo = t.cmd("EHLO client.test").await;
    assert!(
        ehlo.contains("AUTH PLAIN LOGIN") && !ehlo.contains("STARTTLS"),
        "{ehlo}"
    );
    assert!(t.cmd("AUTH LOGIN").await.starts_with("334 VXNlcm5hbWU6"));
    assert!(t
        .cmd(&b64("alice@ours.test"))
        .await
        .starts_with("334 UGFzc3dvcmQ6"));
    let r = t.cmd(&b64("wonderland")).await;
    assert!(r.starts_with("235 2.7.0"), "{r}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_auth_failures_end_with_421() {
    let dir = temp_dir("tls-auth-failures");
    let sink = recording_sink().await;
    let mut cfg = with_auth(&dir, sink.addr, &[]);
    cfg.auth.offer_on_smtp = true; // Postfix's smtpd_sasl_auth_enable = yes
    cfg.smtpd.client_auth_failure_limit = 2;
    let (server, addr) = start(cfg).await;
    let mut t = starttls(addr, &snakeoil(&dir)).await;
    let bad = format!("AUTH PLAIN {}", b64("\0alice@ours.test\0nope"));
    // A limit of 2 is two passwords checked: the second failure is
    // answered 535, then 421 and the session ends (newcomer review,
    // friction 22: a limit of 3 had let 4 passwords be checked).
    for n in 1..=2 {
        let r = t.cmd(&bad).await;
        assert!(r.starts_with("535 5.7.8"), "failure {n}: {r}");
    }
    let r = t.reply().await;
    assert!(r.starts_with("421 4.7.0"), "{r}");
    assert_eq!(t.reply().await, "", "closed");
    // The limit is per address, across sessions, and it is a penalty: a
    // new session's AUTH is refused before any check, the right password
    // included.
    let mut t = starttls(addr, &snakeoil(&dir)).await;
    let good = format!("AUTH PLAIN {}", b64("\0alice@ours.test\0wonderland"));
    let r = t.cmd(&good).await;
    assert!(r.starts_with("421 4.7.0"), "{r}");
    assert_eq!(t.reply().await, "", "closed");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_certificate_is_served_after_reload() {
    let dir = temp_dir("tls-reload");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let write = |name: &str| {
        let made = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    };
    write("mx.test");
    let mut cfg = config(&dir, None);
    cfg.tls.cert_file = Some(cert.clone());
    cfg.tls.key_file = Some(key.clone());
    let (mut server, addr) = start(cfg).await;
    let first = dir.join("first.pem");
    std::fs::copy(&cert, &first).unwrap();
    starttls(addr, &first).await;
    write("mx.test");
    server
        .reload(&sluice::config::source::Source::default())
        .await;
    let second = dir.join("second.pem");
    std::fs::copy(&cert, &second).unwrap();
    // The new certificate verifies against the new CA only.
    starttls(addr, &second).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("STARTTLS").await.starts_with("220"));
    let name = rustls::pki_types::ServerName::try_from("mx.test").unwrap();
    let old = common::tls::connector(&first).connect(name, c.stream).await;
    assert!(old.is_err(), "the old certificate is no longer served");
    server.shutdown().await;
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::Reload(Reload::Certificate { result, .. }) if result == "certificate"
    )));
}

/// RFC 3207 §4.2: an AUTH given in the clear (a listener with
/// `auth_without_tls`) is forgotten by STARTTLS: after the handshake the
/// stranger may not relay until it authenticates again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_forgets_an_earlier_authentication() {
    let dir = temp_dir("tls-forget-auth");
    let sink = recording_sink().await;
    let mut cfg = with_auth(&dir, sink.addr, &[ListenerKind::Smtp]);
    cfg.smtpd.listeners[0].auth_without_tls = true;
    cfg.smtpd.listeners[0].auth = Some(true);
    let (server, _) = start(cfg).await;
    let clear = server.addrs[1];
    let mut c = Client::ready(clear).await;
    let r = c
        .cmd(&format!(
            "AUTH PLAIN {}",
            b64("\0alice@ours.test\0wonderland")
        ))
        .await;
    assert!(r.starts_with("235"), "{r}");
    let r = c.cmd("STARTTLS").await;
    assert!(r.starts_with("220 2.0.0"), "{r}");
    let mut t = TlsClient::handshake(c.stream, &snakeoil(&dir), "mx.test").await;
    assert!(t.cmd("EHLO client.test").await.starts_with("250"));
    assert!(t
        .cmd("MAIL FROM:<alice@ours.test>")
        .await
        .starts_with("250"));
    let r = t.cmd("RCPT TO:<friend@elsewhere.test>").await;
    assert!(
        r.starts_with("554 5.7.1"),
        "relayed on a forgotten AUTH: {r}"
    );
    server.shutdown().await;
}

/// A key that does not belong to the certificate: `check-config` says so,
/// and a SIGHUP with such a pair keeps serving the previous certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_does_not_match_its_certificate_is_refused() {
    let dir = temp_dir("tls-mismatch");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let one = rcgen::generate_simple_self_signed(vec!["mx.test".to_string()]).unwrap();
    let two = rcgen::generate_simple_self_signed(vec!["mx.test".to_string()]).unwrap();
    std::fs::write(&cert, one.cert.pem()).unwrap();
    std::fs::write(&key, two.signing_key.serialize_pem()).unwrap();
    let mut cfg = config(&dir, None);
    cfg.tls.cert_file = Some(cert.clone());
    cfg.tls.key_file = Some(key.clone());
    let err = sluice::daemon::check(cfg.clone()).unwrap_err();
    use sluice::pki::TlsError;
    let mismatch = |e: &TlsError| matches!(e, TlsError::KeyMismatch { .. });
    assert!(
        matches!(&err, sluice::daemon::BuildError::Tls(TlsError::In { err, .. }) if mismatch(err)),
        "{err}"
    );
    assert!(err.to_string().contains("does not match the certificate"));
    // A matching pair to start with, then a mismatched one and a reload.
    std::fs::write(&key, one.signing_key.serialize_pem()).unwrap();
    sluice::daemon::check(cfg.clone()).unwrap();
    let (mut server, addr) = start(cfg).await;
    std::fs::write(&key, two.signing_key.serialize_pem()).unwrap();
    server
        .reload(&sluice::config::source::Source::default())
        .await;
    starttls(addr, &cert).await;
    server.shutdown().await;
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::Reload(Reload::CertificateKept { result, .. }) if result == "certificate_kept"
        )),
        "{}",
        read_log(&dir)
    );
}
