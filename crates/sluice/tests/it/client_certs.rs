//! Client certificates, with Postfix's names (issue 40 item 3).
//!
//! Outbound (`[delivery] smtp_tls_cert_file`/`_key_file`): a real Postfix
//! next hop asks for a certificate (`smtpd_tls_ask_ccert`) and relays only
//! for the one in its `relay_clientcerts` (`permit_tls_clientcerts`):
//! Sluice's mail is relayed with the certificate, refused without it; a
//! key that is not the certificate's fails the configuration check.
//!
//! Inbound, differential: the same conversations (a client presenting
//! certificate A, B, a self-signed C, or none, over STARTTLS) against a
//! real Postfix and against Sluice with the same lists
//! (`permit_tls_clientcerts` + `relay_clientcerts`,
//! `permit_tls_all_clientcerts` + `smtpd_tls_CAfile`, `check_ccert_access`
//! by certificate and by public-key fingerprint), their RCPT replies
//! compared by code and enhanced code. Certificates are made with rcgen;
//! the fingerprints the tables hold are OpenSSL's (`openssl x509
//! -fingerprint`, `openssl pkey | openssl dgst`), not Sluice's own.
//! Hostile certificates: `client_certs/hostile.rs`; the policy
//! attributes, also against Postfix: `client_certs/policy.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;
use sluice::config::delivery::ClientCert;
use sluice::deliver::smtp::tls::{checking_connector, server_name, ClientIdentity};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use crate::common;
use common::postfix::{Postfix, Reply};
use common::*;
use sluice::daemon::Server;

/// A certificate and its key, as files.
#[derive(Clone)]
struct Pair {
    cert: PathBuf,
    key: PathBuf,
}

impl Pair {
    fn client_cert(&self) -> ClientCert {
        ClientCert {
            cert_file: self.cert.clone(),
            key_file: self.key.clone(),
        }
    }

    /// OpenSSL's SHA-256 fingerprint of the certificate (`AB:CD:…`).
    fn fingerprint(&self) -> String {
        let out = Command::new("openssl")
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(&self.cert)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let (_, print) = text.trim().split_once('=').expect("openssl's fingerprint");
        print.to_string()
    }

    /// OpenSSL's SHA-256 digest of the public key (SubjectPublicKeyInfo
    /// DER), in the same form.
    fn pubkey_fingerprint(&self) -> String {
        let script = format!(
            "openssl x509 -noout -pubkey -in {} | openssl pkey -pubin -outform DER \
             | openssl dgst -sha256 -c",
            self.cert.display()
        );
        let out = Command::new("sh").args(["-c", &script]).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        // `SHA2-256(stdin)= 1f:76:…`
        let (_, print) = text.trim().rsplit_once(' ').expect("a digest");
        assert_eq!(print.len(), 32 * 3 - 1, "{text}");
        print.to_ascii_uppercase()
    }
}

/// A CA, certificates A and B it issued (for clients), C self-signed
/// (no CA), and the server's own.
struct Pki {
    ca: PathBuf,
    a: Pair,
    b: Pair,
    c: Pair,
    server: Pair,
}

fn write_pair(dir: &Path, name: &str, cert: &rcgen::Certificate, key: &KeyPair) -> Pair {
    let pair = Pair {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&pair.cert, cert.pem()).unwrap();
    std::fs::write(&pair.key, key.serialize_pem()).unwrap();
    pair
}

fn leaf(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::new(vec![format!("{cn}.test")]).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ClientAuth,
        ExtendedKeyUsagePurpose::ServerAuth,
    ];
    p
}

fn pki(dir: &Path) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "Sluice Test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    let issuer = Issuer::from_params(&ca, &ca_key);
    let issued = |cn: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = leaf(cn).signed_by(&key, &issuer).unwrap();
        write_pair(dir, cn, &cert, &key)
    };
    let (a, b, server) = (issued("client-a"), issued("client-b"), issued("server"));
    let c_key = KeyPair::generate().unwrap();
    let c = write_pair(
        dir,
        "client-c",
        &leaf("client-a").self_signed(&c_key).unwrap(),
        &c_key,
    );
    Pki {
        ca: ca_file,
        a,
        b,
        c,
        server,
    }
}

// ---------------------------------------------------------------- outbound

/// A next hop that relays only for the certificate whose fingerprint is
/// in its relay_clientcerts (127.0.0.1 is outside its mynetworks).
fn certifying_next_hop(pki: &Pki, relay_clientcerts: &str) -> Postfix {
    let (cert, key) = (pki.server.cert.display(), pki.server.key.display());
    let (cert, key) = (cert.to_string(), key.to_string());
    Postfix::start_with(
        &[("relay_clientcerts", relay_clientcerts)],
        &[
            ("mynetworks", "192.0.2.0/24"),
            ("smtpd_tls_security_level", "may"),
            ("smtpd_tls_cert_file", &cert),
            ("smtpd_tls_key_file", &key),
            ("smtpd_tls_ask_ccert", "yes"),
            ("smtpd_tls_fingerprint_digest", "sha256"),
            ("smtpd_tls_loglevel", "1"),
            (
                "relay_clientcerts",
                "texthash:$config_directory/relay_clientcerts",
            ),
            (
                "smtpd_relay_restrictions",
                "permit_tls_clientcerts, reject_unauth_destination",
            ),
        ],
        "tlsmgr unix - - n 1000? 1 tlsmgr",
    )
}

/// Sends one message through a Sluice relaying to `next_hop`, presenting
/// `cert`; its queue ID and the Sluice directory.
async fn relay_one(dir: &Path, next_hop: &Postfix, cert: Option<&Pair>) -> (String, Server) {
    let mut cfg = config(dir, Some(next_hop.addr));
    if let Some(pair) = cert {
        cfg.delivery.smtp_tls_cert_file = Some(pair.cert.clone());
        cfg.delivery.smtp_tls_key_file = Some(pair.key.clone());
    }
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["b@far.test"], &body("certified"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    (qid_of(&r), server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_hop_relays_for_our_certificate_only() {
    let dir = temp_dir("ccert-out");
    let pki = pki(&dir.join("pki"));
    let table = format!("{} ok\n", pki.a.fingerprint());
    let postfix = certifying_next_hop(&pki, &table);

    // With the certificate in its relay_clientcerts: relayed.
    let with = dir.join("with");
    let (qid, server) = relay_one(&with, &postfix, Some(&pki.a)).await;
    let sent = wait_until(30, || delivered_as(&with, &qid, "b@far.test", "sent", "")).await;
    assert!(
        sent,
        "{:?}\n{}",
        delivery_events(&with, &qid),
        postfix.maillog()
    );
    server.shutdown().await;
    let log = postfix.maillog();
    assert!(log.contains("TLS connection established from"), "{log}");

    // Without a certificate: refused by the next hop (relay access denied).
    let without = dir.join("without");
    let (qid, server) = relay_one(&without, &postfix, None).await;
    let refused = |e: &Event| is_delivery(e, "b@far.test", "bounced", "5.7.1", "");
    let bounced = wait_until(30, || delivery_events(&without, &qid).iter().any(refused)).await;
    assert!(
        bounced,
        "{:?}\n{}",
        delivery_events(&without, &qid),
        postfix.maillog()
    );
    server.shutdown().await;

    // With another certificate (B, not in the table): refused too.
    let other = dir.join("other");
    let (qid, server) = relay_one(&other, &postfix, Some(&pki.b)).await;
    let bounced = wait_until(30, || delivery_events(&other, &qid).iter().any(refused)).await;
    assert!(bounced, "{:?}", delivery_events(&other, &qid));
    server.shutdown().await;
    // Never the key in Sluice's log.
    let key = std::fs::read_to_string(&pki.a.key).unwrap();
    let body = key.lines().nth(1).unwrap();
    assert!(!read_log(&with).contains(body));
}

/// A named transport (`[transports.NAME]`, master.cf's `-o
/// smtp_tls_cert_file=`) presents its own certificate; mail routed
/// through the default transport presents none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_presents_its_own_certificate() {
    let dir = temp_dir("ccert-transport");
    let pki = pki(&dir.join("pki"));
    let postfix = certifying_next_hop(&pki, &format!("{} ok\n", pki.a.fingerprint()));
    let sluice_dir = dir.join("sluice");
    let mut cfg = config(&sluice_dir, Some(postfix.addr));
    let certified = sluice::config::transports::TransportConfig {
        smtp_tls_cert_file: Some(pki.a.cert.clone()),
        smtp_tls_key_file: Some(pki.a.key.clone()),
        ..Default::default()
    };
    cfg.transports.insert("certified".into(), certified);
    let hop = format!("certified:[127.0.0.1]:{}", postfix.addr.port());
    cfg.transport
        .insert("far.test".into(), hop.parse().unwrap());
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message(
            "a@sender.test",
            &["b@far.test", "c@other.test"],
            &body("per transport"),
        )
        .await;
    let qid = qid_of(&r);
    let refused = |e: &Event| is_delivery(e, "c@other.test", "bounced", "5.7.1", "");
    let done = wait_until(30, || {
        delivered_as(&sluice_dir, &qid, "b@far.test", "sent", "")
            && delivery_events(&sluice_dir, &qid).iter().any(refused)
    })
    .await;
    assert!(
        done,
        "{:?}\n{}",
        delivery_events(&sluice_dir, &qid),
        postfix.maillog()
    );
    server.shutdown().await;
}

#[test]
fn a_key_that_is_not_the_certificates_fails_the_check() {
    let dir = temp_dir("ccert-mismatch");
    let pki = pki(&dir.join("pki"));
    let mut cfg = config(&dir, None);
    cfg.delivery.smtp_tls_cert_file = Some(pki.a.cert.clone());
    cfg.delivery.smtp_tls_key_file = Some(pki.b.key.clone());
    let err = sluice::daemon::check(cfg.clone()).expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("does not match the certificate"), "{text}");
    assert!(text.contains("smtp_tls_cert_file"), "{text}");
    // An unreadable file names itself; a half pair is refused.
    cfg.delivery.smtp_tls_key_file = Some(dir.join("missing.key"));
    let text = sluice::daemon::check(cfg.clone())
        .expect_err("refused")
        .to_string();
    assert!(text.contains("missing.key"), "{text}");
    cfg.delivery.smtp_tls_key_file = None;
    let text = sluice::daemon::check(cfg.clone())
        .expect_err("refused")
        .to_string();
    assert!(text.contains("smtp_tls_cert_file"), "{text}");
    // The right pair passes.
    cfg.delivery.smtp_tls_key_file = Some(pki.a.key.clone());
    sluice::daemon::check(cfg).expect("a matching pair");
}

// ----------------------------------------------------------------- inbound

/// The client presents `cert` (or none) over STARTTLS, then tries to
/// relay: the RCPT reply.
async fn rcpt_over_tls(addr: SocketAddr, cert: Option<&Pair>) -> Reply {
    let (mut c, greeting) = Client::connect(addr).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    let ehlo = c.cmd("EHLO client.test").await;
    assert!(ehlo.contains("STARTTLS"), "{ehlo}");
    let go = c.cmd("STARTTLS").await;
    assert!(go.starts_with("220"), "{go}");
    let identity = cert.map(|p| ClientIdentity::load(&p.client_cert()).unwrap());
    let connector = checking_connector(Box::new(|_| true), "", identity.as_ref()).unwrap();
    let name = server_name("server.test").unwrap();
    let tls = connector.connect(name, c.stream).await.unwrap();
    let mut c = Client::on(tls);
    let ehlo = c.cmd("EHLO client.test").await;
    assert!(ehlo.starts_with("250"), "{ehlo}");
    let mail = c.cmd("MAIL FROM:<a@sender.test>").await;
    assert!(mail.starts_with("250"), "{mail}");
    Reply::parse(&c.cmd("RCPT TO:<b@far.test>").await)
}

/// One setup: Postfix's main.cf lines and files, Sluice's translation.
struct Setup {
    name: &'static str,
    relay: &'static str,
    /// relay_clientcerts' lines.
    relay_clientcerts: String,
    /// The check_ccert_access table's lines.
    ccert_access: String,
    ca_file: bool,
    /// The RCPT codes expected for A, B, C and no certificate (so the
    /// comparison is not vacuous).
    expect: [u16; 4],
}

/// Postfix and Sluice, each with `setup`; the conversations' replies.
/// A Postfix and a Sluice (under `dir/name`) asking for client
/// certificates, with `relay` as their relay list (`$config_directory`:
/// where `files` are) and `ca_file` as smtpd_tls_CAfile or not.
async fn start_both(
    dir: &Path,
    pki: &Pki,
    name: &str,
    relay: &str,
    files: [(&str, &str); 2],
    ca_file: bool,
) -> (Postfix, Server, SocketAddr) {
    let (cert, key) = (pki.server.cert.display(), pki.server.key.display());
    let (cert, key, ca) = (
        cert.to_string(),
        key.to_string(),
        pki.ca.display().to_string(),
    );
    let mut cf = vec![
        ("mynetworks", "192.0.2.0/24"),
        ("smtpd_tls_security_level", "may"),
        ("smtpd_tls_cert_file", cert.as_str()),
        ("smtpd_tls_key_file", key.as_str()),
        ("smtpd_tls_ask_ccert", "yes"),
        ("smtpd_tls_fingerprint_digest", "sha256"),
        (
            "relay_clientcerts",
            "texthash:$config_directory/relay_clientcerts",
        ),
        ("smtpd_relay_restrictions", relay),
    ];
    if ca_file {
        cf.push(("smtpd_tls_CAfile", ca.as_str()));
    }
    let postfix = Postfix::start_with(&files, &cf, "tlsmgr unix - - n 1000? 1 tlsmgr");

    let sdir = dir.join(name);
    std::fs::create_dir_all(&sdir).unwrap();
    for (name, text) in files {
        std::fs::write(sdir.join(name), text).unwrap();
    }
    let mut cfg = config(&sdir, None);
    cfg.smtpd.mynetworks = vec![net("192.0.2.0/24")];
    cfg.tls.cert_file = Some(pki.server.cert.clone());
    cfg.tls.key_file = Some(pki.server.key.clone());
    cfg.tls.smtpd_tls_ask_ccert = true;
    cfg.tls.smtpd_tls_ca_file = ca_file.then(|| pki.ca.clone());
    let sdirs = sdir.display().to_string();
    cfg.restrictions.relay = relay.replace("$config_directory", &sdirs);
    cfg.restrictions.relay_clientcerts = vec![format!("texthash:{sdirs}/relay_clientcerts")];
    let (server, addr) = start(cfg).await;
    (postfix, server, addr)
}

async fn compare(dir: &Path, pki: &Pki, setup: &Setup) {
    let files = [
        ("relay_clientcerts", setup.relay_clientcerts.as_str()),
        ("ccert_access", setup.ccert_access.as_str()),
    ];
    let (postfix, server, addr) =
        start_both(dir, pki, setup.name, setup.relay, files, setup.ca_file).await;

    let cases = [
        ("A", Some(&pki.a)),
        ("B", Some(&pki.b)),
        ("C (self-signed)", Some(&pki.c)),
        ("none", None),
    ];
    let mut differ = Vec::new();
    let mut codes = Vec::new();
    for (what, cert) in cases {
        let p = rcpt_over_tls(postfix.addr, cert).await;
        let s = rcpt_over_tls(addr, cert).await;
        if (p.code, &p.enhanced) != (s.code, &s.enhanced) {
            differ.push(format!(
                "{}: {what}: postfix {p:?}, sluice {s:?}",
                setup.name
            ));
        }
        codes.push(s.code);
    }
    server.shutdown().await;
    assert!(differ.is_empty(), "{differ:#?}\n{}", postfix.maillog());
    assert_eq!(codes, setup.expect, "{}", setup.name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_restrictions_answer_as_postfix() {
    common::ensure_package("/usr/bin/openssl", "openssl");
    let dir = temp_dir("ccert-diff");
    let pki = pki(&dir.join("pki"));
    let setups = [
        // A by its certificate's fingerprint, C by its public key's.
        Setup {
            name: "relay_clientcerts",
            relay: "permit_tls_clientcerts, reject_unauth_destination",
            relay_clientcerts: format!(
                "{} a\n{} c\n",
                pki.a.fingerprint(),
                pki.c.pubkey_fingerprint()
            ),
            ccert_access: String::new(),
            ca_file: false,
            expect: [250, 554, 250, 554],
        },
        // Any certificate the CA issued (A, B); C by the table.
        Setup {
            name: "all_clientcerts",
            relay: "permit_tls_all_clientcerts, reject_unauth_destination",
            relay_clientcerts: format!("{} c\n", pki.c.fingerprint()),
            ccert_access: String::new(),
            ca_file: true,
            expect: [250, 250, 250, 554],
        },
        // Without a CAfile nothing is verified: only the table counts.
        Setup {
            name: "all_clientcerts_no_ca",
            relay: "permit_tls_all_clientcerts, reject_unauth_destination",
            relay_clientcerts: format!("{} b\n", pki.b.fingerprint()),
            ccert_access: String::new(),
            ca_file: false,
            expect: [554, 250, 554, 554],
        },
        // check_ccert_access: A refused by its fingerprint, B allowed by
        // its public key's, C deferred with a reply of the table's.
        Setup {
            name: "check_ccert_access",
            relay: "check_ccert_access texthash:$config_directory/ccert_access, \
                    reject_unauth_destination",
            relay_clientcerts: String::new(),
            ccert_access: format!(
                "{} REJECT not you\n{} OK\n{} 450 4.7.9 later\n",
                pki.a.fingerprint(),
                pki.b.pubkey_fingerprint(),
                pki.c.fingerprint()
            ),
            ca_file: false,
            expect: [554, 250, 450, 554],
        },
    ];
    for setup in &setups {
        compare(&dir, &pki, setup).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_fingerprints_are_openssls() {
    let dir = temp_dir("ccert-prints");
    let pki = pki(&dir.join("pki"));
    let der = chain_of(&pki.a).remove(0);
    let asking = sluice::receive::smtp::ccert::Asking::new(
        Some(&pki.ca),
        sluice::config::listener::FingerprintDigest::Sha256,
    )
    .unwrap();
    let peer = asking.peer(Some(std::slice::from_ref(&der))).unwrap();
    assert_eq!(peer.fingerprint, pki.a.fingerprint());
    assert_eq!(peer.pubkey_fingerprint, pki.a.pubkey_fingerprint());
    assert_eq!(
        (peer.subject.as_str(), peer.issuer.as_str()),
        ("client-a", "Sluice Test CA")
    );
    assert!(peer.verified);
}

fn chain_of(pair: &Pair) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(&pair.cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

mod hostile;
mod policy;
