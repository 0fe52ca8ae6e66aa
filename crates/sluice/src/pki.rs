//! TLS building blocks shared by every TLS user (SMTP both ways, LDAP):
//! the one crypto provider (ring) and the trust anchors to verify peers.
//!
//! Sits beside `config` at the bottom of the tree, so tables and SMTP can
//! both use it. Trust: a CA file is the administrator's; the system store
//! is read with rustls-native-certs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// Why TLS material could not be loaded or a TLS configuration built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: {err}", path.display())]
    Pem {
        path: PathBuf,
        err: rustls::pki_types::pem::Error,
    },
    #[error("{}: no certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("{}: {err}", path.display())]
    Unusable { path: PathBuf, err: rustls::Error },
    #[error("{} does not match the certificate {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("set both cert_file and key_file, or neither")]
    HalfPair,
    #[error("`verify` needs CA certificates (none found)")]
    NoRoots,
    #[error("generating {}: {err}", path.display())]
    Generate { path: PathBuf, err: std::io::Error },
    #[error("generating a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    #[error("{what}: {err}")]
    In { what: String, err: Box<TlsError> },
}

impl TlsError {
    /// The same error, said to be about the setting `what`.
    pub fn of(self, what: impl Into<String>) -> TlsError {
        TlsError::In {
            what: what.into(),
            err: Box::new(self),
        }
    }
}

/// The crypto provider of every TLS configuration.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Trust anchors: the certificates of `ca_file`, or the system's.
pub fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|err| TlsError::Pem {
                    path: path.to_path_buf(),
                    err,
                })?;
            roots.add_parsable_certificates(certs);
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    Ok(roots)
}

/// A client configuration that verifies servers against `roots`.
pub fn verifying_client(roots: RootCertStore) -> Result<rustls::ClientConfig, TlsError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
