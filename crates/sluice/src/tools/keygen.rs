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
    file.write_all(pem(label, pair.private_key()).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(failed)?;
    Ok(txt_record(domain, selector, k, &pair.encoded_public_key()))
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
