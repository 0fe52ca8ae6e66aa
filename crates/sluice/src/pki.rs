//! TLS building blocks shared by every TLS user (SMTP both ways, LDAP):
//! the one crypto provider (ring) and the trust anchors to verify peers.
//!
//! Sits beside `config` at the bottom of the tree, so tables and SMTP can
//! both use it. Trust: a CA file is the administrator's; the system store
//! is read with rustls-native-certs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

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

/// Reads a PEM chain and its key, and checks that they belong together
/// (a server's certificate, a client's: never logged, never shown).
pub fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let pem = |path: &Path| {
        let path = path.to_path_buf();
        move |err| TlsError::Pem { path, err }
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect())
        .map_err(pem(cert))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_path_buf()));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(pem(key))?;
    let signer =
        rustls::crypto::ring::sign::any_supported_type(&der).map_err(|err| TlsError::Unusable {
            path: key.to_path_buf(),
            err,
        })?;
    let pair = CertifiedKey::new(chain, signer);
    // A pair that does not match fails here (check-config, start, reload)
    // rather than at every client's handshake (security review M6).
    match pair.keys_match() {
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            })
        }
        Err(err @ rustls::Error::InvalidCertificate(_)) => Err(TlsError::Unusable {
            path: cert.to_path_buf(),
            err,
        }),
        // The key cannot say its public half: nothing to compare.
        _ => Ok(pair),
    }
}

/// A client configuration that verifies servers against `roots`.
pub fn verifying_client(roots: RootCertStore) -> Result<rustls::ClientConfig, TlsError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A test of a server's certificate chain (end entity, intermediates, now)
/// that is not the name check of the web PKI: any certificate, TLSA
/// records, a CA of our own whatever the name.
pub type ServerCheck = Box<
    dyn Fn(&CertificateDer<'_>, &[CertificateDer<'_>], UnixTime) -> Result<(), rustls::Error>
        + Send
        + Sync,
>;

/// A server verifier that runs a [`ServerCheck`] on the chain, and checks
/// the handshake's signatures with the provider's algorithms (always).
pub struct CheckedServer {
    check: ServerCheck,
    provider: Arc<CryptoProvider>,
}

impl CheckedServer {
    pub fn new(check: ServerCheck, provider: Arc<CryptoProvider>) -> CheckedServer {
        CheckedServer { check, provider }
    }
}

impl std::fmt::Debug for CheckedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckedServer")
    }
}

impl ServerCertVerifier for CheckedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        (self.check)(end_entity, intermediates, now).map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
