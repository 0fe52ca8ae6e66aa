//! The client side of TLS: per-destination policy and the two connectors
//! it needs.
//!
//! Levels, as Postfix's `smtp_tls_security_level`: `none` never uses TLS;
//! `may` (the default) uses STARTTLS when offered, without checking the
//! certificate, and falls back to plain text if the handshake fails;
//! `encrypt` requires TLS (any certificate); `verify` requires TLS with a
//! certificate valid for the next hop's name, against the system roots or
//! `tls_ca_file`. A requirement not met defers (`4.7.4`/`4.7.5`), never
//! sends in clear.
//!
//! A client certificate (Postfix's `smtp_tls_cert_file`/`_key_file`, a
//! [`ClientCert`]) is presented by every connector built for it (levels,
//! DANE), to a server that asks; [`ClientTls::build_with`] takes it as a
//! value, so a transport can bring its own. It is loaded and checked
//! against its key when the configuration is (`check-config` too); the key
//! is held by rustls's signer, never logged nor shown.
//!
//! Trust: with `may`/`encrypt` the peer's certificate is not checked (as
//! in Postfix: opportunistic TLS stops passive eavesdropping only); the
//! handshake signatures still are.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::client::{ResolvesClientCert, WantsClientCert};
use rustls::pki_types::{CertificateDer, InvalidDnsNameError, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ConfigBuilder, SignatureScheme};
use tokio_rustls::TlsConnector;

use crate::config::delivery::ClientCert;
use crate::config::DeliveryConfig;
use crate::pki::TlsError;
use crate::smtp::io::MaybeTls;
use crate::smtp::wire::Wire;

/// What an outbound connection talks over.
pub type Stream = MaybeTls<Wire, tokio_rustls::client::TlsStream<Wire>>;

pub use crate::config::delivery::Level;

/// Outbound TLS: levels per next hop and the connectors.
pub struct ClientTls {
    default: Level,
    per_hop: BTreeMap<String, Level>,
    /// The certificate presented to servers that ask.
    identity: Option<ClientIdentity>,
    any_cert: TlsConnector,
    verifying: Option<TlsConnector>,
    /// As `verifying`, presenting no certificate (MTA-STS policy fetches
    /// over HTTPS: the certificate is for SMTP peers).
    fetching: Option<TlsConnector>,
}

impl ClientTls {
    /// `[delivery]`'s levels, with its certificate (`smtp_tls_cert_file`).
    pub fn build(d: &DeliveryConfig) -> Result<ClientTls, TlsError> {
        let cert = d
            .client_cert()
            .map_err(|_| TlsError::HalfPair.of("delivery.smtp_tls_cert_file"))?;
        ClientTls::build_with(d, cert.as_ref())
    }

    /// `[delivery]`'s levels, presenting `cert` (None: no certificate).
    pub fn build_with(
        d: &DeliveryConfig,
        cert: Option<&ClientCert>,
    ) -> Result<ClientTls, TlsError> {
        let identity = cert.map(ClientIdentity::load).transpose()?;
        let identity = identity.as_ref();
        // (Levels were parsed with the configuration.)
        let default = d.tls_security_level;
        let per_hop = d.tls_policy.clone();
        let needs_roots = default == Level::Verify || per_hop.values().any(|l| *l == Level::Verify);
        let verifying = |identity: Option<&ClientIdentity>| match (needs_roots, d.mta_sts) {
            (true, _) => verifying_connector(d, identity).map(Some),
            // MTA-STS verifies when a domain asks; without CA certificates
            // on this machine it cannot, and is left off.
            (false, true) => Ok(verifying_connector(d, identity).ok()),
            (false, false) => Ok(None),
        };
        let presenting = verifying(identity)?;
        let fetching = match identity {
            Some(_) => verifying(None)?,
            None => presenting.clone(),
        };
        Ok(ClientTls {
            default,
            per_hop,
            any_cert: checking_connector(Box::new(|_| true), "", identity)?,
            verifying: presenting,
            fetching,
            identity: identity.cloned(),
        })
    }

    /// The certificate this client presents, if any (DANE's connectors
    /// are built per host, with it).
    pub fn identity(&self) -> Option<&ClientIdentity> {
        self.identity.as_ref()
    }

    /// The level for a next hop (its `smtp:[host]:port` key).
    pub fn level(&self, hop: &str) -> Level {
        self.per_hop.get(hop).copied().unwrap_or(self.default)
    }

    /// The level's choice of connector.
    pub fn choice(&self, level: Level) -> TlsChoice<'_> {
        TlsChoice {
            level,
            connector: self.connector(level),
        }
    }

    /// The certificate-checking connector for HTTPS (MTA-STS policies),
    /// if trust anchors were found; it presents no client certificate.
    pub fn verifying(&self) -> Option<TlsConnector> {
        self.fetching.clone()
    }

    pub fn connector(&self, level: Level) -> &TlsConnector {
        match (level, &self.verifying) {
            (Level::Verify, Some(v)) => v,
            _ => &self.any_cert,
        }
    }
}

/// How one connection is secured: the level, and the connector that
/// checks the server (a DANE connector checks TLSA records instead of a
/// CA chain).
#[derive(Clone, Copy)]
pub struct TlsChoice<'a> {
    pub level: Level,
    pub connector: &'a TlsConnector,
}

/// A connector that accepts any certificate (opportunistic TLS; also the
/// `sluice-bench bench` generator's).
pub fn any_certificate_connector() -> Result<TlsConnector, TlsError> {
    checking_connector(Box::new(|_| true), "", None)
}

/// A connector whose server certificate passes `check` (not a CA chain:
/// any certificate for opportunistic TLS, TLSA records for DANE); the
/// handshake signatures are always verified. `refusal` says why not.
/// It presents `identity` to a server that asks.
pub fn checking_connector(
    check: CertCheck,
    refusal: &'static str,
    identity: Option<&ClientIdentity>,
) -> Result<TlsConnector, TlsError> {
    let provider = crate::pki::provider();
    let verifier = crate::pki::CheckedServer::new(
        Box::new(move |end_entity, _, _| match check(end_entity) {
            true => Ok(()),
            false => Err(rustls::Error::General(refusal.into())),
        }),
        provider.clone(),
    );
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    Ok(TlsConnector::from(Arc::new(presenting(builder, identity))))
}

/// A test of the server's end-entity certificate.
pub type CertCheck = Box<dyn Fn(&CertificateDer<'_>) -> bool + Send + Sync>;

/// The name a certificate must match: the host (a DNS name or an IP).
pub fn server_name(host: &str) -> Result<ServerName<'static>, InvalidDnsNameError> {
    ServerName::try_from(host.to_string())
}

fn verifying_connector(
    d: &DeliveryConfig,
    identity: Option<&ClientIdentity>,
) -> Result<TlsConnector, TlsError> {
    let roots =
        crate::pki::roots(d.tls_ca_file.as_deref()).map_err(|e| e.of("delivery.tls_ca_file"))?;
    if roots.is_empty() {
        return Err(TlsError::NoRoots.of("delivery"));
    }
    let builder = ClientConfig::builder_with_provider(crate::pki::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    Ok(TlsConnector::from(Arc::new(presenting(builder, identity))))
}

/// A client certificate with its key, loaded and checked to belong
/// together. Debug shows no key.
#[derive(Clone)]
pub struct ClientIdentity(Arc<CertifiedKey>);

impl ClientIdentity {
    /// Reads the pair; an unreadable file, or a key that is not the
    /// certificate's, is an error naming the setting.
    pub fn load(cert: &ClientCert) -> Result<ClientIdentity, TlsError> {
        crate::pki::certified_key(&cert.cert_file, &cert.key_file)
            .map(|k| ClientIdentity(Arc::new(k)))
            .map_err(|e| e.of("delivery.smtp_tls_cert_file"))
    }
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientIdentity")
    }
}

impl ResolvesClientCert for ClientIdentity {
    /// The one certificate, whatever CAs the server names (as Postfix:
    /// it has one), if its key can sign with a scheme the server takes.
    fn resolve(&self, _: &[&[u8]], schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.0.key.choose_scheme(schemes).map(|_| self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The configuration, presenting `identity` when a server asks.
fn presenting(
    builder: ConfigBuilder<ClientConfig, WantsClientCert>,
    identity: Option<&ClientIdentity>,
) -> ClientConfig {
    match identity {
        Some(id) => builder.with_client_cert_resolver(Arc::new(id.clone())),
        None => builder.with_no_client_auth(),
    }
}
