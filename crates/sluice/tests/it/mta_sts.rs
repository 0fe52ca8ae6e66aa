//! MTA-STS (RFC 8461) through a real nsd and an HTTPS policy server: with
//! `mode: enforce`, mail goes only over TLS verified for a matching MX
//! host (a hop without STARTTLS is deferred, not sent in clear), and the
//! policy is fetched once and cached, on disk too (a restart keeps it in
//! force); a policy body over 64 KiB is refused, not cut and used.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::nsd::Nsd;
use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ZONE: &str = "$ORIGIN test.
$TTL 300
@ SOA ns.test. admin.test. 1 3600 600 86400 300
@ NS ns
ns A 127.0.0.1
sts MX 10 mx.sts
mx.sts A 127.0.0.21
mta-sts.sts A 127.0.0.20
_mta-sts.sts TXT \"v=STSv1; id=20261122\"
";

const POLICY: &str = "version: STSv1\r\nmode: enforce\r\nmx: mx.sts.test\r\nmax_age: 86400\r\n";

/// A self-signed certificate for `name`: (cert, key) files.
fn certificate(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let made = rcgen::generate_simple_self_signed(vec![name.into()]).unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

/// An HTTPS server on 127.0.0.20 answering every request with `policy`;
/// returns its port, the number of requests served, and its accept loop
/// (abort it to take the server away).
async fn policy_server(
    cert: &Path,
    key: &Path,
    policy: String,
) -> (u16, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let certs = vec![CertificateDer::from_pem_file(cert).unwrap()];
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(sluice::pki::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.20:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let policy = Arc::new(policy);
    let server = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, count, policy) = (acceptor.clone(), count.clone(), policy.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&req).to_ascii_lowercase();
                assert!(head.starts_with("get /.well-known/mta-sts.txt http/1.1\r\n"));
                assert!(head.contains("\r\nhost: mta-sts.sts.test\r\n"), "{head}");
                count.fetch_add(1, Ordering::SeqCst);
                let resp = format!("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{policy}");
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, served, server)
}

struct Setup {
    dir: TestDir,
    _nsd: Nsd,
    served: Arc<AtomicUsize>,
    policy_server: tokio::task::JoinHandle<()>,
    cfg: sluice::config::Config,
}

/// nsd, the policy server, and a config routing sts.test by MX to `port`.
async fn setup(name: &str, port: u16, mx_cert: &Path) -> Setup {
    setup_serving(name, port, mx_cert, POLICY.to_string()).await
}

/// As [`setup`], the policy server answering with `policy`.
async fn setup_serving(name: &str, port: u16, mx_cert: &Path, policy: String) -> Setup {
    let dir = temp_dir(name);
    let nsd = Nsd::start(&dir, &[("test", ZONE)]);
    let (cert, key) = certificate(&dir, "mta-sts.sts.test");
    let (https_port, served, policy_server) = policy_server(&cert, &key, policy).await;
    // Both self-signed certificates are the trust anchors.
    let ca = dir.join("ca.pem");
    let pems = [
        std::fs::read_to_string(&cert).unwrap(),
        std::fs::read_to_string(mx_cert).unwrap(),
    ];
    std::fs::write(&ca, pems.concat()).unwrap();
    let mut cfg = config(&dir, None);
    cfg.dns.nameservers = vec![nsd.addr];
    cfg.dns.timeout_ms = 1000;
    cfg.delivery.tls_ca_file = Some(ca);
    cfg.delivery.mta_sts_port = https_port;
    cfg.transport.insert(
        "sts.test".into(),
        format!("smtp:sts.test:{port}").parse().unwrap(),
    );
    Setup {
        dir,
        _nsd: nsd,
        served,
        policy_server,
        cfg,
    }
}

/// A sink on the MX's address (127.0.0.21) that offers no STARTTLS.
async fn plain_mx() -> sluice_bench::sink::Sink {
    sluice_bench::sink::Sink::start(sluice_bench::sink::SinkOptions {
        listen: Some("127.0.0.21:0".parse().unwrap()),
        record: true,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Waits until the message was either sent to `sink` or deferred for
/// want of TLS; true if deferred.
async fn deferred_for_tls(dir: &Path, sink: &sluice_bench::sink::Sink, deferrals: usize) -> bool {
    assert!(
        wait_until(20, || sink.count() > 0 || tls_deferrals(dir) > deferrals).await,
        "neither sent nor deferred: {}",
        read_log(dir)
    );
    sink.count() == 0
}

/// Deliveries deferred because TLS was required and not to be had (4.7.4).
fn tls_deferrals(dir: &Path) -> usize {
    count_logged(dir, |e| is_delivery(e, "", "deferred", "4.7.4", ""))
}

async fn send(addr: SocketAddr, subject: &str) {
    let mut c = Client::ready(addr).await;
    let r = c.message("a@b.test", &["x@sts.test"], &body(subject)).await;
    assert!(r.starts_with("250"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_defers_rather_than_send_in_clear() {
    let sink = plain_mx().await;
    let scratch = temp_dir("mta-sts-scratch");
    let (mx_cert, _) = certificate(&scratch, "mx.sts.test");
    let s = setup("mta-sts-clear", sink.addr.port(), &mx_cert).await;
    let (server, addr) = start(s.cfg).await;
    send(addr, "never in clear").await;
    assert!(
        wait_until(20, || tls_deferrals(&s.dir) > 0).await,
        "deferred for want of TLS: {}",
        read_log(&s.dir)
    );
    server.shutdown().await;
    assert_eq!(sink.count(), 0, "nothing went in clear");
    assert!(s.served.load(Ordering::SeqCst) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_delivers_over_verified_tls_and_caches_the_policy() {
    let sink = recording_sink().await;
    let scratch = temp_dir("mta-sts-hop");
    let (mx_cert, mx_key) = certificate(&scratch, "mx.sts.test");
    // The MX: a second Sluice on 127.0.0.21 with a certificate for its name.
    let mut hop_cfg = config(&scratch.join("hop"), Some(sink.addr));
    hop_cfg.smtpd.listen = vec!["127.0.0.21:0".parse().unwrap()];
    hop_cfg.log_file = Some(scratch.join("hop.log"));
    hop_cfg.tls.cert_file = Some(mx_cert.clone());
    hop_cfg.tls.key_file = Some(mx_key);
    let (hop, hop_addr) = start(hop_cfg).await;
    let s = setup("mta-sts-tls", hop_addr.port(), &mx_cert).await;
    let (server, addr) = start(s.cfg).await;
    send(addr, "sts one").await;
    send(addr, "sts two").await;
    assert!(
        wait_until(20, || sink.count() == 2).await,
        "{}",
        read_log(&s.dir)
    );
    server.shutdown().await;
    hop.shutdown().await;
    assert!(
        any_logged(&s.dir, |e| matches!(
            e,
            Event::TlsOut { verified: true, relay, .. } if relay.starts_with("mx.sts.test[127.0.0.21]")
        )),
        "{}",
        read_log(&s.dir)
    );
    assert_eq!(s.served.load(Ordering::SeqCst), 1, "the policy is cached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_policy_survives_a_restart_without_its_policy_host() {
    let sink = plain_mx().await;
    let scratch = temp_dir("mta-sts-restart-scratch");
    let (mx_cert, _) = certificate(&scratch, "mx.sts.test");
    let s = setup("mta-sts-restart", sink.addr.port(), &mx_cert).await;
    let (server, addr) = start(s.cfg.clone()).await;
    send(addr, "before the restart").await;
    assert!(deferred_for_tls(&s.dir, &sink, 0).await, "enforced");
    server.shutdown().await;
    // The policy host goes away (an attacker blocking it, say), and the
    // spool is emptied so that only new mail is looked at.
    s.policy_server.abort();
    let _ = s.policy_server.await;
    let deferrals = tls_deferrals(&s.dir);
    std::fs::remove_dir_all(s.cfg.data_dir.join("spool")).unwrap();

    let (server, addr) = start(s.cfg.clone()).await;
    send(addr, "after the restart").await;
    let deferred = deferred_for_tls(&s.dir, &sink, deferrals).await;
    server.shutdown().await;
    assert!(deferred, "the policy from before the restart is enforced");
    assert_eq!(sink.count(), 0, "nothing went in clear");
    assert_eq!(s.served.load(Ordering::SeqCst), 1, "fetched once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_over_64_kib_is_refused_not_cut() {
    let sink = plain_mx().await;
    let scratch = temp_dir("mta-sts-big-scratch");
    let (mx_cert, _) = certificate(&scratch, "mx.sts.test");
    // A valid enforce policy, then extension lines past 64 KiB: cut at any
    // length, it still parses (extensions are ignored).
    let pad: String = (0..2000)
        .map(|i| format!("x-pad{i}: {}\r\n", "p".repeat(40)))
        .collect();
    assert!(POLICY.len() + pad.len() > 64 << 10);
    let s = setup_serving(
        "mta-sts-big",
        sink.addr.port(),
        &mx_cert,
        format!("{POLICY}{pad}"),
    )
    .await;
    let (server, addr) = start(s.cfg.clone()).await;
    send(addr, "big policy").await;
    let deferred = deferred_for_tls(&s.dir, &sink, 0).await;
    server.shutdown().await;
    let log = read_log(&s.dir);
    assert!(!deferred, "no policy in force, so sent: {log}");
    assert!(s.served.load(Ordering::SeqCst) >= 1);
    assert!(
        any_logged(&s.dir, |e| matches!(
            e,
            Event::MtaSts { domain, result, cause, policy_in_force: false, .. }
                if domain == "sts.test" && result == "fetch_failed" && cause == "too_large"
        )),
        "{log}"
    );
}
