//! DANE (RFC 7672) through a real DNSSEC-signed zone (ldns-signzone,
//! served by nsd, validated by hickory from the zone's own key as trust
//! anchor): a TLSA 3 1 1 record matching the MX host's key means verified
//! TLS; a record that does not match means the mail waits; an MX answer
//! forged for the non-validating lookups is not used.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::dns_split::DnsSplit;
use common::nsd::Nsd;
use common::*;

/// Signs `zone` (origin `zone_name`) with fresh keys in `keys`; returns
/// the signed text and the key-signing key's file stem.
fn sign_zone(keys: &Path, zone_name: &str, file: &str, zone: &str) -> (String, String) {
    let keygen = |ksk: bool| {
        let mut cmd = Command::new("/usr/bin/ldns-keygen");
        cmd.current_dir(keys).args(["-a", "ECDSAP256SHA256"]);
        if ksk {
            cmd.arg("-k");
        }
        let out = cmd.arg(zone_name).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let (ksk, zsk) = (keygen(true), keygen(false));
    std::fs::write(keys.join(file), zone).unwrap();
    let out = Command::new("/usr/bin/ldns-signzone")
        .current_dir(keys)
        .args([file, &zsk, &ksk])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let signed = std::fs::read_to_string(keys.join(format!("{file}.signed"))).unwrap();
    (signed, ksk)
}

/// A signed `test.` zone and a signed root zone delegating to it (with
/// its DS), as on the Internet; the trust anchor is this root's key.
/// Returns (root zone, test zone, trust anchor file).
fn sign(dir: &Path, zone: &str) -> (String, String, PathBuf) {
    ensure_package("/usr/bin/ldns-signzone", "ldnsutils");
    let keys = dir.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let (test, test_ksk) = sign_zone(&keys, "test.", "test.zone", zone);
    let ds = std::fs::read_to_string(keys.join(format!("{test_ksk}.ds"))).unwrap();
    let root_zone = format!(
        "$ORIGIN .\n$TTL 300\n. SOA ns.test. admin.test. 1 3600 600 86400 300\n. NS ns.test.\n\
         test. NS ns.test.\nns.test. A 127.0.0.1\n{ds}\n"
    );
    let (root, root_ksk) = sign_zone(&keys, ".", "root.zone", &root_zone);
    (root, test, keys.join(format!("{root_ksk}.key")))
}

/// Delivers one message to x@dane.test, whose MX (127.0.0.31) is a second
/// Sluice with a fresh key; the TLSA record holds `tlsa(spki_sha256)`.
async fn run(name: &str, tlsa: impl Fn(&str) -> String) -> (TestDir, sluice_bench::sink::Sink) {
    let dir = temp_dir(name);
    let sink = recording_sink().await;
    let made = rcgen::generate_simple_self_signed(vec!["mx.dane.test".into()]).unwrap();
    let spki = ring::digest::digest(
        &ring::digest::SHA256,
        &rcgen::PublicKeyData::subject_public_key_info(&made.signing_key),
    );
    let hex: String = spki.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let (cert, key) = (dir.join("mx.pem"), dir.join("mx.key"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let mut hop_cfg = config(&dir.join("hop"), Some(sink.addr));
    hop_cfg.smtpd.listen = vec!["127.0.0.31:0".parse().unwrap()];
    hop_cfg.log_file = Some(dir.join("hop.log"));
    hop_cfg.tls.cert_file = Some(cert);
    hop_cfg.tls.key_file = Some(key);
    let (hop, hop_addr) = start(hop_cfg).await;
    let port = hop_addr.port();
    let zone = format!(
        "$ORIGIN test.\n$TTL 300\n@ SOA ns.test. admin.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\n\
         dane MX 10 mx.dane\nmx.dane A 127.0.0.31\n_{port}._tcp.mx.dane TLSA {}\n",
        tlsa(&hex)
    );
    let (root, signed, anchor) = sign(&dir, &zone);
    let nsd = Nsd::start(&dir, &[(".", &root), ("test", &signed)]);
    send_to_dane_test(&dir, nsd.addr, anchor, port).await;
    hop.shutdown().await;
    drop(nsd);
    (dir, sink)
}

/// Starts Sluice with DANE on, resolving through `dns` with `anchor`, and
/// sends one message to x@dane.test (MX hosts on `port`); returns once
/// the log has its delivery attempt.
async fn send_to_dane_test(dir: &Path, dns: std::net::SocketAddr, anchor: PathBuf, port: u16) {
    let mut cfg = config(dir, None);
    cfg.dns.nameservers = vec![dns];
    cfg.dns.timeout_ms = 1000;
    cfg.dns.trust_anchor_file = Some(anchor);
    cfg.delivery.dane = true;
    cfg.transport.insert(
        "dane.test".into(),
        format!("smtp:dane.test:{port}").parse().unwrap(),
    );
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c.message("a@b.test", &["x@dane.test"], &body("dane")).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(
        wait_until(20, || any_logged(dir, |e| matches!(
            e,
            Event::Delivery { to, .. } if to == "x@dane.test"
        )))
        .await,
        "{}",
        read_log(dir)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matching_tlsa_record_authenticates_the_mx() {
    let (dir, sink) = run("dane-match", |spki| format!("3 1 1 {spki}")).await;
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::TlsOut { verified: true, relay, .. } if relay.starts_with("mx.dane.test[127.0.0.31]")
        )),
        "{}",
        read_log(&dir)
    );
    assert!(wait_until(10, || sink.count() == 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tlsa_record_that_does_not_match_keeps_the_mail() {
    let wrong = "ab".repeat(32);
    let (dir, sink) = run("dane-mismatch", |_| format!("3 1 1 {wrong}")).await;
    let log = read_log(&dir);
    // The handshake failed on the certificate check (no TLSA matched).
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::ConnectFailed(ConnectFailed::Host { host, tls: true, .. })
                if host == "mx.dane.test"
        )),
        "{log}"
    );
    assert!(
        delivered_as(&dir, "", "x@dane.test", "deferred", ""),
        "{log}"
    );
    assert_eq!(sink.count(), 0);
}

/// An on-path attacker forges the answers to queries without the DNSSEC
/// (DO) bit: the routing lookup sees `dane.test MX mx.evil.test` (a plain
/// sink, no TLSA), the validating lookup the signed truth (`mx.dane.test`
/// with a TLSA record). Before: the secure MX RRset turned DANE on, the
/// forged host had no TLSA, so the mail went to it in opportunistic TLS.
/// Now only MX hosts of the validated RRset are used: nothing reaches the
/// forger, the mail waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mx_hosts_not_in_the_validated_answer_are_not_used() {
    let dir = temp_dir("dane-forged-mx");
    let evil = sink_on("127.0.0.32:0".parse().unwrap()).await;
    let port = evil.addr.port();
    let head = "$ORIGIN test.\n$TTL 300\n@ SOA ns.test. admin.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\n";
    let truth = format!(
        "{head}dane MX 10 mx.dane\nmx.dane A 127.0.0.31\n_{port}._tcp.mx.dane TLSA 3 1 1 {}\n",
        "ab".repeat(32)
    );
    let forged = format!("{head}dane MX 10 mx.evil\nmx.evil A 127.0.0.32\n");
    let (root, signed, anchor) = sign(&dir, &truth);
    let real = Nsd::start(&dir.join("real"), &[(".", &root), ("test", &signed)]);
    let forger = Nsd::start(&dir.join("forger"), &[("test", &forged)]);
    let split = DnsSplit::start(real.addr, forger.addr).await;
    send_to_dane_test(&dir, split.addr, anchor, port).await;
    let log = read_log(&dir);
    assert_eq!(evil.count(), 0, "delivered to the forged MX: {log}");
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::DaneExcluded { domain, .. } if domain == "dane.test"
        )),
        "{log}"
    );
    assert!(
        delivered_as(&dir, "", "x@dane.test", "deferred", ""),
        "{log}"
    );
}
