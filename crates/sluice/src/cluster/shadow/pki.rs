//! `sluice cluster-ca` and `sluice cluster-cert`: the certificates of the
//! shadow link (`cluster/shadow/tls.rs`). A CA of the cluster's own (never
//! a public one: any certificate it signs is a node), and per node a key
//! and a certificate naming the node (its DNS subject alternative name
//! and common name), good as both TLS server and client.
//!
//! Trust: the CA key is the cluster's master secret; it is written 0600
//! and is needed only where node certificates are made, not on the nodes.
//! Invariant: no file is ever overwritten (an existing CA or node key
//! stays; remove it first to replace it).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The CA's certificate and key files in its directory.
pub const CA_CERT: &str = "ca.pem";
pub const CA_KEY: &str = "ca.key";
/// The CA's name: made again from here to sign (no parsing of our own file).
const CA_NAME: &str = "Sluice cluster CA";

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("{0:?} cannot name a node (1-64 of A-Z a-z 0-9 - . _)")]
    BadNode(String),
}

/// A certificate and its key, as PEM.
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// A new CA.
pub fn new_ca() -> Result<Pair, PkiError> {
    let key = KeyPair::generate()?;
    let cert = ca_params().self_signed(&key)?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A node's certificate, signed by the CA whose key is `ca_key_pem`.
pub fn new_node(ca_key_pem: &str, node: &str) -> Result<Pair, PkiError> {
    if !crate::config::cluster::node_name_ok(node) {
        return Err(PkiError::BadNode(node.to_string()));
    }
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let issuer = Issuer::new(ca_params(), ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![node.to_string()])?;
    params.distinguished_name.push(DnType::CommonName, node);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Writes a new file with `mode`, never over an existing one.
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), PkiError> {
    let failed = |err| PkiError::Io {
        path: path.to_path_buf(),
        err,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(failed)?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(failed)
}

/// `sluice cluster-ca DIR`: `DIR/ca.pem` (0644) and `DIR/ca.key` (0600).
pub fn make_ca(dir: &Path) -> Result<Vec<PathBuf>, PkiError> {
    std::fs::create_dir_all(dir).map_err(|err| PkiError::Io {
        path: dir.to_path_buf(),
        err,
    })?;
    let ca = new_ca()?;
    let (cert, key) = (dir.join(CA_CERT), dir.join(CA_KEY));
    write_new(&key, &ca.key_pem, 0o600)?;
    write_new(&cert, &ca.cert_pem, 0o644)?;
    Ok(vec![cert, key])
}

/// `sluice cluster-cert --ca DIR --node NAME OUT`: `OUT/NAME.pem` (0644)
/// and `OUT/NAME.key` (0600).
pub fn make_node(ca_dir: &Path, node: &str, out: &Path) -> Result<Vec<PathBuf>, PkiError> {
    let ca_key_path = ca_dir.join(CA_KEY);
    let ca_key = std::fs::read_to_string(&ca_key_path).map_err(|err| PkiError::Io {
        path: ca_key_path,
        err,
    })?;
    let pair = new_node(&ca_key, node)?;
    std::fs::create_dir_all(out).map_err(|err| PkiError::Io {
        path: out.to_path_buf(),
        err,
    })?;
    let (cert, key) = (
        out.join(format!("{node}.pem")),
        out.join(format!("{node}.key")),
    );
    write_new(&key, &pair.key_pem, 0o600)?;
    write_new(&cert, &pair.cert_pem, 0o644)?;
    Ok(vec![cert, key])
}
