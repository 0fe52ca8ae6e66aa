//! Client certificates (Postfix's `smtpd_tls_ask_ccert`): the verifier
//! that asks a client for one and takes any, and what a session knows of
//! the one it got ([`PeerCert`]: its fingerprints, names, and whether it
//! is verified against `smtpd_tls_CAfile`).
//!
//! Trust: a client certificate is the client's claim. The handshake has
//! proved only that the client holds the certificate's key (its signature
//! is checked here, always): a certificate replayed without its key gets
//! no handshake at all. Its names (subject and issuer CN) are text for the
//! log, replies and policy services, made printable and bounded here,
//! never an identity: restrictions look up fingerprints, and only
//! `permit_tls_all_clientcerts` trusts a CA (the operator's CAfile, with
//! no name check, as Postfix). A certificate that is not X.509 DER ends
//! the handshake; rustls bounds a handshake message to 64 KiB.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

pub use crate::receive::restrict::PeerCert;

use crate::config::listener::FingerprintDigest;
use crate::pki::TlsError;

/// Asking for certificates: the verifier of the asking listeners' TLS,
/// and the CA check a certificate is "verified" by.
pub struct Asking {
    pub verifier: Arc<AnyClientCert>,
    trust: Option<Arc<dyn ClientCertVerifier>>,
    digest: FingerprintDigest,
}

impl Asking {
    /// With `ca_file`'s CAs (named to clients, and verified against); none:
    /// no certificate is verified.
    pub fn new(
        ca_file: Option<&std::path::Path>,
        digest: FingerprintDigest,
    ) -> Result<Asking, TlsError> {
        let provider = crate::pki::provider();
        let roots = match ca_file {
            Some(path) => Some(Arc::new(
                crate::pki::roots(Some(path)).map_err(|e| e.of("tls.smtpd_tls_CAfile"))?,
            )),
            None => None,
        };
        let hints = roots.as_ref().map(|r| r.subjects()).unwrap_or_default();
        let trust = match roots {
            Some(roots) if !roots.is_empty() => Some(webpki_verifier(roots, provider.clone())?),
            _ => None,
        };
        Ok(Asking {
            verifier: Arc::new(AnyClientCert { provider, hints }),
            trust,
            digest,
        })
    }

    /// What the handshake's peer chain says (None: no certificate).
    pub fn peer(&self, chain: Option<&[CertificateDer<'_>]>) -> Option<PeerCert> {
        let (end, intermediates) = chain?.split_first()?;
        let verified = self.trust.as_ref().is_some_and(|t| {
            t.verify_client_cert(end, intermediates, UnixTime::now())
                .is_ok()
        });
        let (spki, subject, issuer) = match x509_parser::parse_x509_certificate(end.as_ref()) {
            Ok((_, cert)) => (
                cert.tbs_certificate.subject_pki.raw.to_vec(),
                common_name(cert.subject()),
                common_name(cert.issuer()),
            ),
            // (The handshake took only what webpki parses.)
            Err(_) => return None,
        };
        Some(PeerCert {
            fingerprint: fingerprint(self.digest, end),
            pubkey_fingerprint: fingerprint(self.digest, &spki),
            subject,
            issuer,
            verified,
        })
    }
}

fn webpki_verifier(
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    WebPkiClientVerifier::builder_with_provider(roots, provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))
}

/// `AB:CD:…`: the digest of `bytes`, upper-case hex pairs joined by `:`
/// (Postfix's tls_digest_encode).
pub fn fingerprint(digest: FingerprintDigest, bytes: &[u8]) -> String {
    use md5::Digest;
    let sum: Vec<u8> = match digest {
        FingerprintDigest::Sha256 => ring::digest::digest(&ring::digest::SHA256, bytes)
            .as_ref()
            .to_vec(),
        FingerprintDigest::Sha1 => {
            ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, bytes)
                .as_ref()
                .to_vec()
        }
        FingerprintDigest::Md5 => md5::Md5::digest(bytes).to_vec(),
    };
    let hex: Vec<String> = sum.iter().map(|b| format!("{b:02X}")).collect();
    hex.join(":")
}

/// RFC 3461 xtext, as Postfix's xtext_quote: `+`, `=` and anything
/// but visible ASCII as `+XX`.
pub fn xtext(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'!'..=b'~' if b != b'+' && b != b'=' => out.push(char::from(b)),
            _ => out.push_str(&format!("+{b:02X}")),
        }
    }
    out
}

/// The first CN of a name, printable ASCII (anything else `?`), at most
/// 256 characters; "" when there is none.
fn common_name(name: &x509_parser::x509::X509Name<'_>) -> String {
    let Some(cn) = name.iter_common_name().next() else {
        return String::new();
    };
    let raw = cn.as_slice();
    String::from_utf8_lossy(raw)
        .chars()
        .take(256)
        .map(|c| match c {
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

/// Asks for a certificate, requires none, and takes any the client proves
/// it holds the key of: whether it is acceptable is for the restriction
/// lists (by fingerprint), as in Postfix, where an untrusted certificate
/// still completes the handshake.
#[derive(Debug)]
pub struct AnyClientCert {
    provider: Arc<CryptoProvider>,
    /// The CAs named to the client (smtpd_tls_CAfile's subjects).
    hints: Vec<DistinguishedName>,
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Something X.509 at least: a certificate neither webpki nor the
        // name parser can read is refused here.
        webpki::EndEntityCert::try_from(end_entity).map_err(|_| bad_encoding())?;
        x509_parser::parse_x509_certificate(end_entity.as_ref()).map_err(|_| bad_encoding())?;
        Ok(ClientCertVerified::assertion())
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

fn bad_encoding() -> rustls::Error {
    rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_postfix_hex_pairs() {
        // `printf abc | openssl dgst -md5 / -sha1`.
        assert_eq!(
            fingerprint(FingerprintDigest::Md5, b"abc"),
            "90:01:50:98:3C:D2:4F:B0:D6:96:3F:7D:28:E1:7F:72"
        );
        assert_eq!(
            fingerprint(FingerprintDigest::Sha1, b"abc"),
            "A9:99:3E:36:47:06:81:6A:BA:3E:25:71:78:50:C2:6C:9C:D0:D8:9D"
        );
        assert_eq!(
            fingerprint(FingerprintDigest::Sha256, b"").len(),
            32 * 3 - 1
        );
    }
}
