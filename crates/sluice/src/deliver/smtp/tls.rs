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
//! Trust: with `may`/`encrypt` the peer's certificate is not checked (as
//! in Postfix: opportunistic TLS stops passive eavesdropping only); the
//! handshake signatures still are.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, InvalidDnsNameError, ServerName};
use tokio_rustls::TlsConnector;

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
    any_cert: TlsConnector,
    verifying: Option<TlsConnector>,
}

impl ClientTls {
    pub fn build(d: &DeliveryConfig) -> Result<ClientTls, TlsError> {
        // (Levels were parsed with the configuration.)
        let default = d.tls_security_level;
        let per_hop = d.tls_policy.clone();
        let needs_roots = default == Level::Verify || per_hop.values().any(|l| *l == Level::Verify);
        let verifying = match (needs_roots, d.mta_sts) {
            (true, _) => Some(verifying_connector(d)?),
            // MTA-STS verifies when a domain asks; without CA certificates
            // on this machine it cannot, and is left off.
            (false, true) => verifying_connector(d).ok(),
            (false, false) => None,
        };
        Ok(ClientTls {
            default,
            per_hop,
            any_cert: any_certificate_connector()?,
            verifying,
        })
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

    /// The certificate-checking connector, if trust anchors were found.
    pub fn verifying(&self) -> Option<TlsConnector> {
        self.verifying.clone()
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
    checking_connector(Box::new(|_| true), "")
}

/// A connector whose server certificate passes `check` (not a CA chain:
/// any certificate for opportunistic TLS, TLSA records for DANE); the
/// handshake signatures are always verified. `refusal` says why not.
pub fn checking_connector(
    check: CertCheck,
    refusal: &'static str,
) -> Result<TlsConnector, TlsError> {
    let provider = crate::pki::provider();
    let verifier = crate::pki::CheckedServer::new(
        Box::new(move |end_entity, _, _| match check(end_entity) {
            true => Ok(()),
            false => Err(rustls::Error::General(refusal.into())),
        }),
        provider.clone(),
    );
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A test of the server's end-entity certificate.
pub type CertCheck = Box<dyn Fn(&CertificateDer<'_>) -> bool + Send + Sync>;

/// The name a certificate must match: the host (a DNS name or an IP).
pub fn server_name(host: &str) -> Result<ServerName<'static>, InvalidDnsNameError> {
    ServerName::try_from(host.to_string())
}

fn verifying_connector(d: &DeliveryConfig) -> Result<TlsConnector, TlsError> {
    let roots =
        crate::pki::roots(d.tls_ca_file.as_deref()).map_err(|e| e.of("delivery.tls_ca_file"))?;
    if roots.is_empty() {
        return Err(TlsError::NoRoots.of("delivery"));
    }
    Ok(TlsConnector::from(Arc::new(crate::pki::verifying_client(
        roots,
    )?)))
}
