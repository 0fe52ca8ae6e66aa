//! `sluice dkim-keygen`: a DKIM key pair (mail-auth's generator), the
//! private key written as PEM (mode 0600) for `[[dkim.keys]] key_file`,
//! and the DNS TXT record to publish printed on stdout.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use base64::Engine;
use mail_auth::dkim::generate::DkimKeyPair;

/// Which algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Rsa(usize),
    Ed25519,
}

/// Why no key was made.
#[derive(Debug, thiserror::Error)]
pub enum KeygenError {
    #[error("RSA keys need at least 1024 bits (RFC 8301); 2048 is usual")]
    TooShort,
    #[error("key generation failed: {0}")]
    Generate(mail_auth::Error),
    #[error("{}: {err}", path.display())]
    Write {
        path: std::path::PathBuf,
        err: std::io::Error,
    },
}

/// Generates a key pair, writes the private key to `out` (refusing to
/// overwrite a file) and returns the TXT record line.
pub fn keygen(
    algorithm: Algorithm,
    domain: &str,
    selector: &str,
    out: &Path,
) -> Result<String, KeygenError> {
    let (pair, label, k) = match algorithm {
        Algorithm::Rsa(bits) if bits < 1024 => return Err(KeygenError::TooShort),
        Algorithm::Rsa(bits) => (DkimKeyPair::generate_rsa(bits), "RSA PRIVATE KEY", "rsa"),
        Algorithm::Ed25519 => (DkimKeyPair::generate_ed25519(), "PRIVATE KEY", "ed25519"),
    };
    let pair = pair.map_err(KeygenError::Generate)?;
    let failed = |err| KeygenError::Write {
        path: out.to_path_buf(),
        err,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(failed)?;
    let private = match algorithm {
        Algorithm::Rsa(_) => pair.private_key().to_vec(),
        Algorithm::Ed25519 => ed25519_v1(pair.private_key()).ok_or(KeygenError::Generate(
            mail_auth::Error::Io("unexpected Ed25519 key encoding".into()),
        ))?,
    };
    file.write_all(pem(label, &private).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(failed)?;
    let public = match algorithm {
        Algorithm::Rsa(_) => rsa_spki(pair.public_key()),
        Algorithm::Ed25519 => pair.public_key().to_vec(),
    };
    let public = base64::engine::general_purpose::STANDARD.encode(public);
    Ok(txt_record(domain, selector, k, &public))
}

/// An Ed25519 private key as RFC 8410's PKCS#8 (version 1, the seed
/// only), the form OpenSSL and OpenDKIM read; ring writes version 2 (with
/// the public key), which OpenSSL 3.0 refuses. `None` if `v2` is not
/// ring's layout.
fn ed25519_v1(v2: &[u8]) -> Option<Vec<u8>> {
    const V2_HEAD: [u8; 16] = [
        0x30, 0x51, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    const V1_HEAD: [u8; 16] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    let seed = v2.strip_prefix(&V2_HEAD)?.get(..32)?;
    Some([&V1_HEAD[..], seed].concat())
}

/// An RSA public key as DKIM's `p=` wants it (RFC 6376 3.6.1): a
/// SubjectPublicKeyInfo (`MIIBIj…`), the PKCS#1 RSAPublicKey wrapped with
/// the rsaEncryption algorithm. Receivers built on OpenSSL (OpenDKIM)
/// refuse a bare PKCS#1 key. Hand-written: ten bytes of fixed DER, no
/// crate needed for it.
fn rsa_spki(pkcs1: &[u8]) -> Vec<u8> {
    // SEQUENCE { OID 1.2.840.113549.1.1.1, NULL }
    const ALGORITHM: [u8; 15] = [
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    let mut bits = vec![0x00]; // no unused bits
    bits.extend_from_slice(pkcs1);
    let mut inner = ALGORITHM.to_vec();
    inner.extend(der(0x03, &bits));
    der(0x30, &inner)
}

/// One DER element: tag, definite length, content.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = vec![tag];
    match len {
        0..=0x7f => out.push(len as u8),
        _ => {
            let bytes: Vec<u8> = len
                .to_be_bytes()
                .into_iter()
                .skip_while(|&b| b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend(bytes);
        }
    }
    out.extend_from_slice(content);
    out
}

/// DER in PEM armour (RFC 7468), 64 characters a line.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The record as a zone file line; long values split into 255-octet strings.
pub fn txt_record(domain: &str, selector: &str, k: &str, public: &str) -> String {
    let value = format!("v=DKIM1; k={k}; p={public}");
    let strings: Vec<String> = value
        .as_bytes()
        .chunks(255)
        .map(|c| format!("\"{}\"", String::from_utf8_lossy(c)))
        .collect();
    format!(
        "{selector}._domainkey.{domain}. IN TXT ( {} )",
        strings.join(" ")
    )
}
