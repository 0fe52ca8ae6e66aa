//! SMTP AUTH through Dovecot SASL (`[auth] type = "dovecot"`, Postfix's
//! `smtpd_sasl_type = dovecot`): a real Dovecot decides, its answer is
//! the session's login; failures keep Sluice's delay and penalty; a
//! Dovecot that hangs or is absent gives `454 4.7.0`, never `235`, and
//! the session goes on; client bytes cannot add lines to the Dovecot
//! conversation (a scripted Dovecot records what it was sent).

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use common::dovecot::AuthServer;
use common::tls::TlsClient;
use common::*;
use sluice::config::listener::{ListenerConfig, ListenerKind};
use sluice::config::Config;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn snakeoil(dir: &Path) -> PathBuf {
    dir.join("var/tls/snakeoil-cert.pem")
}

/// An untrusted client, a `submission` listener (the second address) and
/// AUTH by the Dovecot at `path`, answering within `timeout_secs`.
fn with_dovecot(dir: &Path, sink: std::net::SocketAddr, path: &Path, timeout_secs: u64) -> Config {
    let mut cfg = config(dir, Some(sink));
    cfg.smtpd.mynetworks = vec![net("127.0.0.3/32")];
    cfg.auth = toml::from_str(&format!(
        "type = \"dovecot\"\ndovecot_path = {:?}\ndovecot_timeout_secs = {timeout_secs}\n\
         failure_delay_ms = 0\n",
        path.display().to_string()
    ))
    .unwrap();
    cfg.smtpd.listeners.push(ListenerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        kind: ListenerKind::Submission,
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
    cfg
}

/// Connects, EHLO, STARTTLS, handshake; returns the client and its
/// second EHLO's reply.
async fn starttls(addr: std::net::SocketAddr, ca: &Path) -> (TlsClient, String) {
    let mut c = Client::ready(addr).await;
    let r = c.cmd("STARTTLS").await;
    assert!(r.starts_with("220 2.0.0"), "{r}");
    let mut t = TlsClient::handshake(c.stream, ca, "mx.test").await;
    let ehlo = t.cmd("EHLO client.test").await;
    assert!(ehlo.starts_with("250"), "{ehlo}");
    (t, ehlo)
}

fn auth_logged(dir: &Path, method: &str, user: Option<&str>, result: &str) -> bool {
    any_logged(dir, |e| {
        matches!(
            e,
            Event::Auth { method: m, username, result: r, .. }
                if m == method && username.as_deref() == user && r == result
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_password_is_235_and_the_login_is_dovecots() {
    let dir = temp_dir("sasl-dovecot-ok");
    let dovecot = AuthServer::start(&dir, &[("alice@local.test", "wonderland")]);
    let sink = recording_sink().await;
    let cfg = with_dovecot(&dir, sink.addr, &dovecot.socket, 10);
    let (server, _) = start(cfg).await;
    let submission = server.addrs[1];
    let (mut t, ehlo) = starttls(submission, &snakeoil(&dir)).await;
    let offered = ehlo
        .lines()
        .find_map(|l| l.strip_prefix("250-AUTH "))
        .unwrap_or_else(|| panic!("{ehlo}"));
    let mut offered: Vec<&str> = offered.split(' ').collect();
    offered.sort_unstable();
    assert_eq!(
        offered,
        ["LOGIN", "PLAIN", "SCRAM-SHA-256"],
        "Dovecot's: {ehlo}"
    );
    // Typed in capitals; Dovecot answers the user it knows (%Lu).
    let r = t
        .cmd(&format!(
            "AUTH PLAIN {}",
            b64("\0ALICE@Local.Test\0wonderland")
        ))
        .await;
    assert!(r.starts_with("235 2.7.0"), "{r}");
    let r = t.cmd("MAIL FROM:<alice@local.test>").await;
    assert!(r.starts_with("250"), "{r}");
    let r = t.cmd("RCPT TO:<friend@elsewhere.test>").await;
    assert!(
        r.starts_with("250"),
        "an authenticated client may relay: {r}"
    );
    server.shutdown().await;
    assert!(
        auth_logged(&dir, "PLAIN", Some("alice@local.test"), "ok"),
        "{}",
        read_log(&dir)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_goes_through_dovecots_challenges_and_star_cancels() {
    let dir = temp_dir("sasl-dovecot-login");
    let dovecot = AuthServer::start(&dir, &[("bob@local.test", "builder")]);
    let sink = recording_sink().await;
    let cfg = with_dovecot(&dir, sink.addr, &dovecot.socket, 10);
    let (server, _) = start(cfg).await;
    let (mut t, _) = starttls(server.addrs[1], &snakeoil(&dir)).await;
    // Cancelled half-way: 501, and the next attempt starts afresh.
    assert!(t.cmd("AUTH LOGIN").await.starts_with("334 "));
    let r = t.cmd("*").await;
    assert!(r.starts_with("501 5.7.0"), "{r}");
    // Dovecot's own challenges, passed through.
    let r = t.cmd("AUTH LOGIN").await;
    assert_eq!(r, "334 VXNlcm5hbWU6\r\n");
    let r = t.cmd(&b64("bob@local.test")).await;
    assert_eq!(r, "334 UGFzc3dvcmQ6\r\n");
    let r = t.cmd(&b64("builder")).await;
    assert!(r.starts_with("235 2.7.0"), "{r}");
    server.shutdown().await;
    assert!(
        auth_logged(&dir, "LOGIN", Some("bob@local.test"), "ok"),
        "{}",
        read_log(&dir)
    );
}

/// SCRAM-SHA-256's proof for `password` (RFC 5802 §3), and the server
/// signature the client then expects, both base64.
fn scram(password: &str, salt: &str, iterations: u32, auth_message: &str) -> (String, String) {
    use ring::{digest, hmac, pbkdf2};
    let salt = base64::engine::general_purpose::STANDARD
        .decode(salt)
        .unwrap();
    let mut salted = [0u8; 32];
    let iterations = std::num::NonZeroU32::new(iterations).unwrap();
    let prf = pbkdf2::PBKDF2_HMAC_SHA256;
    pbkdf2::derive(prf, iterations, &salt, password.as_bytes(), &mut salted);
    let salted = hmac::Key::new(hmac::HMAC_SHA256, &salted);
    let sign = |key: &[u8], text: &[u8]| hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), text);
    let client_key = hmac::sign(&salted, b"Client Key");
    let stored_key = digest::digest(&digest::SHA256, client_key.as_ref());
    let client_signature = sign(stored_key.as_ref(), auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .as_ref()
        .iter()
        .zip(client_signature.as_ref())
        .map(|(k, s)| k ^ s)
        .collect();
    let server_key = hmac::sign(&salted, b"Server Key");
    let server_signature = sign(server_key.as_ref(), auth_message.as_bytes());
    let enc = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    (enc(&proof), enc(server_signature.as_ref()))
}

/// A mechanism of several steps with data on success: Dovecot's
/// challenge, the client's proof, Dovecot's signature (a `CONT`, as we
/// do not say `final-resp-ok`) as a `334`, the client's empty line,
/// `235` (RFC 4954 §4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_256_goes_through_with_dovecots_signature() {
    let dir = temp_dir("sasl-dovecot-scram");
    let dovecot = AuthServer::start(&dir, &[("carol@local.test", "s3cret")]);
    let sink = recording_sink().await;
    let cfg = with_dovecot(&dir, sink.addr, &dovecot.socket, 10);
    let (server, _) = start(cfg).await;
    let (mut t, _) = starttls(server.addrs[1], &snakeoil(&dir)).await;
    let decode = |reply: &str| {
        let data = reply
            .strip_prefix("334 ")
            .unwrap_or_else(|| panic!("{reply}"));
        let raw = base64::engine::general_purpose::STANDARD.decode(data.trim_end());
        String::from_utf8(raw.unwrap()).unwrap()
    };
    let bare = "n=carol@local.test,r=rOprNGfwEbeRWgbNEkqO";
    let r = t
        .cmd(&format!(
            "AUTH SCRAM-SHA-256 {}",
            b64(&format!("n,,{bare}"))
        ))
        .await;
    let first = decode(&r);
    let field = |name: &str| {
        let f = first.split(',').find_map(|f| f.strip_prefix(name));
        f.unwrap_or_else(|| panic!("{first}")).to_string()
    };
    let (nonce, salt, iterations) = (field("r="), field("s="), field("i="));
    assert!(
        nonce.starts_with("rOprNGfwEbeRWgbNEkqO") && nonce.len() > 20,
        "{first}"
    );
    let without_proof = format!("c=biws,r={nonce}");
    let auth_message = format!("{bare},{first},{without_proof}");
    let (proof, signature) = scram("s3cret", &salt, iterations.parse().unwrap(), &auth_message);
    let r = t.cmd(&b64(&format!("{without_proof},p={proof}"))).await;
    assert_eq!(
        decode(&r),
        format!("v={signature}"),
        "Dovecot proved it knows the key"
    );
    let r = t.cmd("").await;
    assert!(r.starts_with("235 2.7.0"), "{r}");
    server.shutdown().await;
    assert!(
        auth_logged(&dir, "SCRAM-SHA-256", Some("carol@local.test"), "ok"),
        "{}",
        read_log(&dir)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_535_and_counts_towards_the_penalty() {
    let dir = temp_dir("sasl-dovecot-fail");
    let dovecot = AuthServer::start(&dir, &[("alice@local.test", "wonderland")]);
    let sink = recording_sink().await;
    let mut cfg = with_dovecot(&dir, sink.addr, &dovecot.socket, 10);
    cfg.smtpd.client_auth_failure_limit = 2;
    let (server, _) = start(cfg).await;
    let (mut t, _) = starttls(server.addrs[1], &snakeoil(&dir)).await;
    let bad = format!("AUTH PLAIN {}", b64("\0alice@local.test\0nope"));
    for n in 1..=2 {
        let r = t.cmd(&bad).await;
        assert!(
            r.starts_with("535 5.7.8 Error: authentication failed"),
            "failure {n}: {r}"
        );
    }
    let r = t.reply().await;
    assert!(r.starts_with("421 4.7.0"), "{r}");
    assert_eq!(t.reply().await, "", "closed");
    // Penalised: the right password is refused before Dovecot is asked.
    let (mut t, _) = starttls(server.addrs[1], &snakeoil(&dir)).await;
    let good = format!("AUTH PLAIN {}", b64("\0alice@local.test\0wonderland"));
    let r = t.cmd(&good).await;
    assert!(r.starts_with("421 4.7.0"), "{r}");
    server.shutdown().await;
    // Dovecot's FAIL names the user it looked up.
    assert!(
        auth_logged(&dir, "PLAIN", Some("alice@local.test"), "failed"),
        "{}",
        read_log(&dir)
    );
    assert!(auth_logged(&dir, "PLAIN", None, "penalised"));
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::AuthPenaltyClose { .. }
    )));
    assert!(!auth_logged(&dir, "PLAIN", Some("alice@local.test"), "ok"));
}

/// A Dovecot that accepts connections and never answers: `454` within
/// the timeout (for the EHLO's mechanisms and the AUTH both), and the
/// session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dovecot_that_never_answers_gives_454_and_the_session_goes_on() {
    let dir = temp_dir("sasl-dovecot-hang");
    let socket = dir.join("silent-auth");
    let _silent = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let sink = recording_sink().await;
    let cfg = with_dovecot(&dir, sink.addr, &socket, 1);
    let (server, _) = start(cfg).await;
    let (mut t, ehlo) = starttls(server.addrs[1], &snakeoil(&dir)).await;
    assert!(ehlo.contains("250-AUTH "), "AUTH is still offered: {ehlo}");
    let good = format!("AUTH PLAIN {}", b64("\0alice@local.test\0wonderland"));
    let r = tokio::time::timeout(Duration::from_secs(20), t.cmd(&good))
        .await
        .expect("an answer, not a stuck session");
    assert!(
        r.starts_with("454 4.7.0 Temporary authentication failure"),
        "{r}"
    );
    assert!(t.cmd("NOOP").await.starts_with("250"));
    let r = t.cmd("MAIL FROM:<alice@local.test>").await;
    assert!(r.starts_with("530 5.7.0"), "not authenticated: {r}");
    server.shutdown().await;
    assert!(
        auth_logged(&dir, "PLAIN", None, "unavailable"),
        "{}",
        read_log(&dir)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_dovecot_gives_454() {
    let dir = temp_dir("sasl-dovecot-absent");
    let sink = recording_sink().await;
    let cfg = with_dovecot(&dir, sink.addr, &dir.join("no-such-socket"), 10);
    let (server, _) = start(cfg).await;
    let (mut t, ehlo) = starttls(server.addrs[1], &snakeoil(&dir)).await;
    assert!(ehlo.contains("250-AUTH "), "{ehlo}");
    let good = format!("AUTH PLAIN {}", b64("\0alice@local.test\0wonderland"));
    let r = t.cmd(&good).await;
    assert!(r.starts_with("454 4.7.0"), "{r}");
    assert!(t.cmd("NOOP").await.starts_with("250"));
    server.shutdown().await;
    assert!(
        auth_logged(&dir, "PLAIN", None, "unavailable"),
        "{}",
        read_log(&dir)
    );
}

/// A scripted Dovecot: offers PLAIN, LOGIN, a private and an anonymous
/// mechanism; answers LOGIN's first step with a challenge, PLAIN with
/// alice's password `OK`, everything else `FAIL`; records every line it
/// is sent and counts its connections. `hang_up`: closes each connection
/// after its first answer (as a restarted Dovecot would).
struct Scripted {
    lines: Arc<Mutex<Vec<String>>>,
    connections: Arc<AtomicUsize>,
}

async fn scripted_dovecot(path: &Path, hang_up: bool) -> Scripted {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let scripted = Scripted {
        lines: Arc::default(),
        connections: Arc::default(),
    };
    let (seen, connections) = (scripted.lines.clone(), scripted.connections.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            connections.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(converse(stream, seen.clone(), hang_up));
        }
    });
    scripted
}

async fn converse(stream: tokio::net::UnixStream, seen: Arc<Mutex<Vec<String>>>, hang_up: bool) {
    let (read, mut write) = stream.into_split();
    let hello = "VERSION\t1\t2\nSPID\t1\nCUID\t1\nCOOKIE\t00\n\
                 MECH\tPLAIN\tplaintext\nMECH\tLOGIN\tplaintext\n\
                 MECH\tSECRET\tprivate\nMECH\tANONYMOUS\tanonymous\nDONE\n";
    write.write_all(hello.as_bytes()).await.unwrap();
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    let right = format!("resp={}", b64("\0alice\0right"));
    while read.read_until(b'\n', &mut line).await.unwrap_or(0) > 0 {
        let text = String::from_utf8_lossy(&line).into_owned();
        seen.lock().unwrap().push(text.clone());
        let text = text.trim_end_matches('\n');
        let fields: Vec<&str> = text.split('\t').collect();
        let answer = match fields[..] {
            ["AUTH", id, "LOGIN", ..] if !text.contains("resp=") => {
                Some(format!("CONT\t{id}\tVXNlcm5hbWU6\n"))
            }
            ["AUTH", id, "PLAIN", ..] if text.ends_with(&right) => {
                Some(format!("OK\t{id}\tuser=alice\n"))
            }
            ["AUTH", id, ..] | ["CONT", id, ..] => Some(format!("FAIL\t{id}\n")),
            _ => None,
        };
        line.clear();
        let Some(answer) = answer else { continue };
        write.write_all(answer.as_bytes()).await.unwrap();
        if hang_up {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_bytes_cannot_add_lines_to_the_dovecot_conversation() {
    let dir = temp_dir("sasl-dovecot-inject");
    let socket = dir.join("scripted-auth");
    let lines = scripted_dovecot(&socket, false).await.lines;
    let sink = recording_sink().await;
    let cfg = with_dovecot(&dir, sink.addr, &socket, 10);
    let (server, _) = start(cfg).await;
    let (mut t, ehlo) = starttls(server.addrs[1], &snakeoil(&dir)).await;
    assert!(
        ehlo.contains("250-AUTH PLAIN LOGIN\r\n"),
        "private and anonymous ones are not offered: {ehlo}"
    );
    // Control characters inside the decoded data travel as base64.
    let hostile = b64("\0alice\tuser=root\0pw\r\nOK\t1\tuser=root\n");
    let r = t.cmd(&format!("AUTH PLAIN {hostile}")).await;
    assert!(r.starts_with("535 5.7.8"), "{r}");
    // Not base64: refused here, never sent.
    let r = t.cmd("AUTH PLAIN dGVzdA==\tresp=eA==").await;
    assert!(r.starts_with("501"), "{r}");
    let r = t.cmd("AUTH PLAIN dGVzdA==\u{1}tresp=eA==").await;
    assert!(r.starts_with("501"), "{r}");
    assert!(t.cmd("AUTH LOGIN").await.starts_with("334 VXNlcm5hbWU6"));
    let r = t.cmd("YWxpY2U=\tCONT\t1\teA==").await;
    assert!(r.starts_with("501 5.5.2"), "{r}");
    // Unoffered mechanisms are refused, not forwarded.
    for mech in ["SECRET", "ANONYMOUS", "PLAIN\tX"] {
        let r = t.cmd(&format!("AUTH {mech}")).await;
        assert!(r.starts_with("504") || r.starts_with("501"), "{mech}: {r}");
    }
    assert!(t.cmd("NOOP").await.starts_with("250"));
    server.shutdown().await;
    let lines = lines.lock().unwrap().clone();
    let auths: Vec<Vec<&str>> = lines
        .iter()
        .filter(|l| l.starts_with("AUTH\t"))
        .map(|l| l.trim_end_matches('\n').split('\t').collect())
        .collect();
    assert_eq!(
        auths.len(),
        2,
        "only the PLAIN with base64 and the first LOGIN: {lines:?}"
    );
    for line in &lines {
        let command = line.split('\t').next().unwrap();
        assert!(
            ["VERSION", "CPID", "AUTH"].contains(&command),
            "{line:?} in {lines:?}"
        );
        assert!(
            !line.trim_end_matches('\n').contains(['\n', '\r']),
            "{line:?}"
        );
    }
    let plain = &auths[0];
    assert_eq!(plain[2], "PLAIN");
    for want in [
        "service=smtp",
        "nologin",
        "secured",
        "rip=127.0.0.1",
        "lip=127.0.0.1",
    ] {
        assert!(plain.contains(&want), "{want} in {plain:?}");
    }
    let resp = plain
        .last()
        .unwrap()
        .strip_prefix("resp=")
        .expect("resp= last");
    assert_eq!(resp, hostile, "the client's base64 as it was");
    assert_eq!(auths[1][2], "LOGIN");
    assert!(
        !auths[1].iter().any(|f| f.starts_with("resp=")),
        "{:?}",
        auths[1]
    );
}

/// A kept connection that Dovecot closed meanwhile (restarted, idle
/// timeout) is replaced by a new one, and the client never notices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_dovecot_closed_is_replaced() {
    let dir = temp_dir("sasl-dovecot-reconnect");
    let socket = dir.join("scripted-auth");
    let scripted = scripted_dovecot(&socket, true).await;
    let sink = recording_sink().await;
    let cfg = with_dovecot(&dir, sink.addr, &socket, 10);
    let (server, _) = start(cfg).await;
    let (mut t, _) = starttls(server.addrs[1], &snakeoil(&dir)).await;
    let r = t
        .cmd(&format!("AUTH PLAIN {}", b64("\0alice\0wrong")))
        .await;
    assert!(r.starts_with("535 5.7.8"), "{r}");
    let r = t
        .cmd(&format!("AUTH PLAIN {}", b64("\0alice\0right")))
        .await;
    assert!(r.starts_with("235 2.7.0"), "{r}");
    server.shutdown().await;
    assert_eq!(scripted.connections.load(Ordering::SeqCst), 2);
    assert!(
        auth_logged(&dir, "PLAIN", Some("alice"), "ok"),
        "{}",
        read_log(&dir)
    );
}
