//! Hostile client certificates against Sluice alone: another client's
//! certificate without its key, garbage, a 100 KiB one, a CN with CR LF;
//! and `smtpd_tls_ask_ccert` per listener.

use super::*;

/// Presents whatever it holds, matching or not (rustls's own builders
/// would refuse a key that is not the certificate's).
#[derive(Debug)]
struct Presents(Arc<CertifiedKey>);

impl ResolvesClientCert for Presents {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A connector presenting `chain` signed for with `key` (any server).
fn presenting(chain: Vec<CertificateDer<'static>>, key: &Path) -> TlsConnector {
    let der = PrivateKeyDer::from_pem_file(key).unwrap();
    let signer = rustls::crypto::ring::sign::any_supported_type(&der).unwrap();
    let provider = sluice::pki::provider();
    let any = sluice::pki::CheckedServer::new(Box::new(|_, _, _| Ok(())), provider.clone());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(any))
        .with_client_cert_resolver(Arc::new(Presents(Arc::new(CertifiedKey::new(
            chain, signer,
        )))));
    TlsConnector::from(Arc::new(config))
}

/// STARTTLS with `connector`, then EHLO: the reply, or None when the
/// server ended the handshake or the session (in TLS 1.3 the client's
/// certificate is judged after the client thinks it is done).
async fn ehlo_over(addr: SocketAddr, connector: TlsConnector) -> Option<String> {
    let (mut c, _) = Client::connect(addr).await;
    c.cmd("EHLO client.test").await;
    let go = c.cmd("STARTTLS").await;
    assert!(go.starts_with("220"), "{go}");
    let name = server_name("server.test").unwrap();
    let mut tls = connector.connect(name, c.stream).await.ok()?;
    tls.write_all(b"EHLO client.test\r\n").await.ok()?;
    let mut buf = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf)).await;
    match read.expect("an answer or a close") {
        Ok(n) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_client_certificates_gain_nothing() {
    let dir = temp_dir("ccert-hostile");
    let pki = pki(&dir.join("pki"));
    // A certificate whose CN tries to end the reply line.
    let evil_key = KeyPair::generate().unwrap();
    let evil_cert = leaf("evil\r\n250 2.0.0 ok").self_signed(&evil_key).unwrap();
    let evil = write_pair(&dir.join("pki"), "evil", &evil_cert, &evil_key);
    let table = dir.join("ccert_access");
    std::fs::write(&table, format!("{} REJECT go away\n", evil.fingerprint())).unwrap();
    let relay = dir.join("relay_clientcerts");
    std::fs::write(&relay, format!("{} a\n", pki.a.fingerprint())).unwrap();
    let mut cfg = config(&dir, None);
    cfg.smtpd.mynetworks = vec![net("192.0.2.0/24")];
    cfg.tls.cert_file = Some(pki.server.cert.clone());
    cfg.tls.key_file = Some(pki.server.key.clone());
    cfg.tls.smtpd_tls_ask_ccert = true;
    cfg.restrictions.relay = format!(
        "check_ccert_access texthash:{}, permit_tls_clientcerts, reject_unauth_destination",
        table.display()
    );
    cfg.restrictions.relay_clientcerts = vec![format!("texthash:{}", relay.display())];
    let (server, addr) = start(cfg).await;

    // A's certificate (it would relay) replayed with B's key: no session.
    let replayed = presenting(chain_of(&pki.a), &pki.b.key);
    assert_eq!(ehlo_over(addr, replayed).await, None);
    // Not a certificate; a 100 KiB one: no session.
    let garbage = vec![CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])];
    assert_eq!(ehlo_over(addr, presenting(garbage, &pki.a.key)).await, None);
    let huge = vec![CertificateDer::from(vec![0x30u8; 100 << 10])];
    assert_eq!(ehlo_over(addr, presenting(huge, &pki.a.key)).await, None);
    // The server is still there, and A with its own key relays.
    assert_eq!(rcpt_over_tls(addr, Some(&pki.a)).await.code, 250);
    // The CN is shown on one line, its CR LF made harmless.
    let (mut c, _) = Client::connect(addr).await;
    c.cmd("EHLO client.test").await;
    c.cmd("STARTTLS").await;
    let identity = ClientIdentity::load(&evil.client_cert()).unwrap();
    let connector = checking_connector(Box::new(|_| true), "", Some(&identity)).unwrap();
    let tls = connector
        .connect(server_name("server.test").unwrap(), c.stream)
        .await
        .unwrap();
    let mut c = Client::on(tls);
    c.cmd("EHLO client.test").await;
    c.cmd("MAIL FROM:<a@sender.test>").await;
    let reply = c.cmd("RCPT TO:<b@far.test>").await;
    assert_eq!(reply.trim_end().lines().count(), 1, "{reply:?}");
    assert!(
        reply.starts_with("554 5.7.1 <evil??250 2.0.0 ok>: Client certificate rejected"),
        "{reply:?}"
    );
    server.shutdown().await;
    // Each refused by the handshake, for its own reason.
    let failed: Vec<String> = events_named(&dir, "tls_in_failed")
        .iter()
        .map(|e| e["error"].as_str().unwrap_or("").to_string())
        .collect();
    for why in ["BadSignature", "BadEncoding", "HandshakePayloadTooLarge"] {
        assert!(failed.iter().any(|f| f.contains(why)), "{why}: {failed:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_listeners_that_ask_see_a_certificate() {
    let dir = temp_dir("ccert-listener");
    let pki = pki(&dir.join("pki"));
    let relay = dir.join("relay_clientcerts");
    std::fs::write(&relay, format!("{} a\n", pki.a.fingerprint())).unwrap();
    let mut cfg = config(&dir, None);
    cfg.smtpd.mynetworks = vec![net("192.0.2.0/24")];
    cfg.tls.cert_file = Some(pki.server.cert.clone());
    cfg.tls.key_file = Some(pki.server.key.clone());
    cfg.restrictions.relay = "permit_tls_clientcerts, reject_unauth_destination".into();
    cfg.restrictions.relay_clientcerts = vec![format!("texthash:{}", relay.display())];
    // `[tls]` does not ask; one listener does (master.cf's `-o
    // smtpd_tls_ask_ccert=yes`).
    let mut asking = proxy_listener();
    asking.proxy_protocol = false;
    asking.proxy_protocol_from = Vec::new();
    asking.smtpd_tls_ask_ccert = Some(true);
    cfg.smtpd.listeners.push(asking);
    let (server, plain) = start(cfg).await;
    let mut other = None;
    let found = wait_until(20, || {
        other = events_named(&dir, "listening")
            .iter()
            .filter_map(|e| e["addr"].as_str()?.parse::<SocketAddr>().ok())
            .find(|a| *a != plain);
        other.is_some()
    })
    .await;
    assert!(found, "no second listener");
    let asking = other.unwrap();
    assert_eq!(rcpt_over_tls(plain, Some(&pki.a)).await.code, 554);
    assert_eq!(rcpt_over_tls(asking, Some(&pki.a)).await.code, 250);
    assert_eq!(rcpt_over_tls(asking, None).await.code, 554);
    server.shutdown().await;
}
