//! DKIM signing: `sluice dkim-keygen` makes a key and its record; mail
//! from a client that may relay, with a From: domain that has a key, is
//! signed; the signature verifies (mail-auth) against the record served
//! by a real nsd; other mail is not signed. From is oversigned: a From
//! field added after signing breaks the signature.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::nsd::Nsd;
use common::*;
use sluice::tools::keygen::{keygen, Algorithm};

#[test]
fn keygen_writes_a_private_key_and_prints_the_record() {
    let dir = temp_dir("dkim-keygen");
    let out = dir.join("rsa.pem");
    let record = keygen(Algorithm::Rsa(1024), "ours.test", "s1", &out).unwrap();
    assert!(
        record.starts_with("s1._domainkey.ours.test. IN TXT ( \"v=DKIM1; k=rsa; p=MI"),
        "{record}"
    );
    let pem = std::fs::read_to_string(&out).unwrap();
    assert!(
        pem.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"),
        "{pem}"
    );
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        keygen(Algorithm::Ed25519, "ours.test", "s1", &out).is_err(),
        "an existing key is never overwritten"
    );
    assert!(keygen(
        Algorithm::Rsa(512),
        "ours.test",
        "s1",
        &dir.join("weak.pem")
    )
    .is_err());
}

/// The record `dkim-keygen` prints, put in a real nsd's zone exactly as
/// printed, lets a real OpenDKIM receiver verify Sluice-signed mail: RSA
/// (a SubjectPublicKeyInfo, `MIIBIj…`; a bare PKCS#1 key gave `dkim=fail
/// … key not found`/`unable to apply public key`) and Ed25519. The
/// Ed25519 key file is one OpenSSL reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opendkim_verifies_our_mail_against_the_record_as_printed() {
    let dir = temp_dir("dkim-opendkim");
    let (rsa, ed) = (dir.join("rsa.pem"), dir.join("ed.pem"));
    let rsa_record = keygen(Algorithm::Rsa(2048), "ours.test", "r1", &rsa).unwrap();
    let ed_record = keygen(Algorithm::Ed25519, "ours.test", "e1", &ed).unwrap();
    assert!(rsa_record.contains("p=MIIBIj"), "{rsa_record}");
    let pkey = std::process::Command::new("openssl")
        .args(["pkey", "-noout", "-in"])
        .arg(&ed)
        .output()
        .unwrap();
    assert!(pkey.status.success(), "{pkey:?}");
    let zone = format!(
        "$ORIGIN ours.test.\n$TTL 300\n@ SOA ns.ours.test. admin.ours.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\n{rsa_record}\n"
    );
    let nsd = Nsd::start(&dir, &[("ours.test", &zone)]);
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.dkim.keys.push(dkim_key("ours.test", "r1", rsa));
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let msg = "From: Someone <a@ours.test>\r\nTo: x@elsewhere.test\r\nSubject: verify me\r\n\
               Date: Sun, 22 Nov 2026 10:00:00 +0000\r\nMessage-ID: <v.1@ours.test>\r\n\r\nHello  there.\r\n";
    let r = c.message("a@ours.test", &["x@elsewhere.test"], msg).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(wait_until(15, || sink.count() == 1).await);
    server.shutdown().await;
    let signed = sink.messages()[0].body.clone();
    let verdict = common::opendkim::verify(&dir, nsd.addr.port(), "ours.test", &signed);
    assert!(
        verdict.contains("dkim=pass") && verdict.contains("header.d=ours.test"),
        "{verdict}"
    );
    // A body changed in transit fails at the same receiver: the check can fail.
    let mut tampered = signed.clone();
    let at = tampered.len() - 3;
    tampered[at] = b'X';
    let verdict = common::opendkim::verify(&dir, nsd.addr.port(), "ours.test", &tampered);
    assert!(
        verdict.contains("dkim=fail") || verdict.contains("dkim=neutral"),
        "{verdict}"
    );
    assert!(ed_record.contains("k=ed25519; p="), "{ed_record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_mail_is_signed_and_the_signature_verifies() {
    use mail_auth::hickory_resolver::config::{
        ConnectionConfig, NameServerConfig, ResolverConfig, ResolverOpts,
    };
    use mail_auth::{AuthenticatedMessage, DkimResult, MessageAuthenticator};
    let dir = temp_dir("dkim-sign");
    let key = dir.join("ed.pem");
    let record = keygen(Algorithm::Ed25519, "ours.test", "s1", &key).unwrap();
    // The value between the quotes, for the zone file.
    let txt = record.split('"').nth(1).unwrap().to_string();
    let zone = format!(
        "$ORIGIN ours.test.\n$TTL 300\n@ SOA ns.ours.test. admin.ours.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\ns1._domainkey TXT \"{txt}\"\n"
    );
    let nsd = Nsd::start(&dir, &[("ours.test", &zone)]);
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.dkim.keys.push(dkim_key("ours.test", "s1", key));
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    for from in ["a@Mail.Ours.Test", "a@elsewhere.test"] {
        let msg = format!(
            "From: Someone <{from}>\r\nTo: x@ours.test\r\nSubject: signed?\r\nDate: Sun, 22 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{from}.1@ours.test>\r\n\r\nHello  there.\r\n\r\n"
        );
        let r = c.message(from, &["x@ours.test"], &msg).await;
        assert!(r.starts_with("250"), "{r}");
    }
    assert!(wait_until(15, || sink.count() == 2).await);
    server.shutdown().await;
    let got = sink.messages();
    let signed = got
        .iter()
        .find(|m| m.sender.eq_ignore_ascii_case("a@Mail.Ours.Test"))
        .unwrap();
    let unsigned = got.iter().find(|m| m.sender == "a@elsewhere.test").unwrap();
    let text = String::from_utf8_lossy(&signed.body);
    assert!(text.starts_with("DKIM-Signature: "), "{text}");
    assert!(
        text.contains("d=ours.test") && text.contains("s=s1"),
        "{text}"
    );
    assert!(
        !String::from_utf8_lossy(&unsigned.body).contains("DKIM-Signature"),
        "no key for elsewhere.test"
    );
    // Verify it as a receiver would, against the record in nsd.
    let mut udp = ConnectionConfig::udp();
    udp.port = nsd.addr.port();
    let ns = NameServerConfig::new(nsd.addr.ip(), true, vec![udp]);
    // Short timeouts, so the loop below polls nsd many times.
    let mut opts = ResolverOpts::default();
    opts.timeout = std::time::Duration::from_millis(500);
    opts.attempts = 1;
    let auth = MessageAuthenticator::new(ResolverConfig::from_parts(None, vec![], vec![ns]), opts)
        .unwrap();
    let parsed = AuthenticatedMessage::parse(&signed.body).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let results = auth.verify_dkim(&parsed).await;
        let pass = results.iter().any(|r| r.result() == &DkimResult::Pass);
        if pass {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "signature does not verify: {:?}",
            results.iter().map(|r| r.result()).collect::<Vec<_>>()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A resolver for mail-auth that asks `nsd`, with short timeouts (so a
/// loop can poll nsd while it loads).
fn authenticator(nsd: &Nsd) -> mail_auth::MessageAuthenticator {
    use mail_auth::hickory_resolver::config::{
        ConnectionConfig, NameServerConfig, ResolverConfig, ResolverOpts,
    };
    let mut udp = ConnectionConfig::udp();
    udp.port = nsd.addr.port();
    let ns = NameServerConfig::new(nsd.addr.ip(), true, vec![udp]);
    let mut opts = ResolverOpts::default();
    opts.timeout = std::time::Duration::from_millis(500);
    opts.attempts = 1;
    mail_auth::MessageAuthenticator::new(ResolverConfig::from_parts(None, vec![], vec![ns]), opts)
        .unwrap()
}

/// The DKIM results for `message`, once nsd answers (not a temperror).
async fn dkim_results(
    auth: &mail_auth::MessageAuthenticator,
    message: &[u8],
) -> Vec<mail_auth::DkimResult> {
    use mail_auth::{AuthenticatedMessage, DkimResult};
    let parsed = AuthenticatedMessage::parse(message).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let results: Vec<DkimResult> = (auth.verify_dkim(&parsed).await.iter())
            .map(|r| r.result().clone())
            .collect();
        let waiting = results
            .iter()
            .any(|r| matches!(r, DkimResult::TempError(_)));
        if !waiting || std::time::Instant::now() > deadline {
            return results;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_from_added_after_signing_breaks_the_signature() {
    use mail_auth::DkimResult;
    let dir = temp_dir("dkim-oversign");
    let key = dir.join("ed.pem");
    let record = keygen(Algorithm::Ed25519, "ours.test", "s1", &key).unwrap();
    let txt = record.split('"').nth(1).unwrap().to_string();
    let zone = format!(
        "$ORIGIN ours.test.\n$TTL 300\n@ SOA ns.ours.test. admin.ours.test. 1 3600 600 86400 300\n@ NS ns\nns A 127.0.0.1\ns1._domainkey TXT \"{txt}\"\n"
    );
    let nsd = Nsd::start(&dir, &[("ours.test", &zone)]);
    let signers =
        sluice::intake::dkim::Signers::load(&[dkim_key("ours.test", "s1", key)], 432_000).unwrap();
    let message =
        "From: Alice <alice@ours.test>\r\nTo: x@dest.test\r\nSubject: pay\r\n\r\nPay Bob.\r\n";
    let (signature, _) = signers.sign(message.as_bytes()).unwrap().unwrap();
    // h= names From once more than the message has From fields.
    let tags: String = signature.split_whitespace().collect();
    let h = tags.split(';').find_map(|t| t.strip_prefix("h=")).unwrap();
    let froms = h
        .split(':')
        .filter(|n| n.eq_ignore_ascii_case("from"))
        .count();
    assert_eq!(froms, 2, "From oversigned: {signature}");

    let auth = authenticator(&nsd);
    let signed = format!("{signature}{message}");
    let results = dkim_results(&auth, signed.as_bytes()).await;
    assert_eq!(results, vec![DkimResult::Pass], "as sent");
    // A second From above the signed one: a verifier that did not count
    // it would still pass, and a reader would see Mallory's.
    let forged = format!("{signature}From: Mallory <m@ours.test>\r\n{message}");
    let results = dkim_results(&auth, forged.as_bytes()).await;
    assert!(
        !results.contains(&DkimResult::Pass),
        "a From added after signing fails: {results:?}"
    );
}

/// The value of tag `name` in a DKIM-Signature field.
fn tag(signature: &str, name: &str) -> Option<String> {
    let tags: String = signature.split_whitespace().collect();
    let found = tags
        .split(';')
        .find_map(|t| t.strip_prefix(&format!("{name}=")));
    found.map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_expire_two_days_after_the_queue_gives_up() {
    let dir = temp_dir("dkim-expire");
    let key = dir.join("ed.pem");
    keygen(Algorithm::Ed25519, "ours.test", "s1", &key).unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.queue.maximal_lifetime_secs = 86_400;
    let key_config = format!("domain = \"ours.test\"\nselector = \"s1\"\nkey_file = {key:?}\n");
    cfg.dkim.keys.push(toml::from_str(&key_config).unwrap());
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let msg = "From: <a@ours.test>\r\nTo: <x@ours.test>\r\nSubject: expiring\r\n\r\nHello.\r\n";
    let r = c.message("a@ours.test", &["x@ours.test"], msg).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(wait_until(15, || sink.count() == 1).await);
    server.shutdown().await;
    let text = String::from_utf8_lossy(&sink.messages()[0].body).into_owned();
    let start = text.find("DKIM-Signature:").expect("signed");
    let text = &text[start..];
    let mut end = text.find("\r\n").unwrap();
    while text[end + 2..].starts_with([' ', '\t']) {
        end += 2 + text[end + 2..].find("\r\n").unwrap();
    }
    let signature = &text[..end];
    let t: u64 = tag(signature, "t").unwrap().parse().unwrap();
    let x: u64 = tag(signature, "x")
        .unwrap_or_else(|| panic!("no x= in {signature}"))
        .parse()
        .unwrap();
    assert_eq!(x - t, 86_400 + 2 * 86_400, "{signature}");
    // An expiry within the queue lifetime is a configuration error.
    let mut short: sluice::config::DkimKeyConfig = toml::from_str(&key_config).unwrap();
    short.expire_secs = Some(3_600);
    let refused = sluice::intake::dkim::Signers::load(&[short], 86_400);
    let why = refused.err().expect("refused");
    assert!(
        matches!(
            why,
            sluice::intake::dkim::DkimError::ExpiresInQueue {
                secs: 3_600,
                lifetime: 86_400,
                ..
            }
        ),
        "{why}"
    );
}
