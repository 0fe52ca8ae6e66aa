//! DANE for SMTP (RFC 7672): when a domain's MX RRset and an MX host's
//! `_<port>._tcp.<host>` TLSA RRset are DNSSEC-secure, the connection to
//! that host must use TLS and the server's certificate must match a
//! DANE-EE (usage 3) record — full certificate or SubjectPublicKeyInfo,
//! exact or SHA-256/SHA-512; names and expiry do not matter (§3.1.1).
//! TLSA records that are all unusable (PKIX-TA/EE, or DANE-TA, which is
//! not implemented here) still require TLS, without authentication
//! (§2.2). A bogus answer (validation failed) makes the host unusable.
//!
//! Validation is hickory's own (DNSSEC with ring), from the root trust
//! anchors or `[dns] trust_anchor_file` (DNSKEY records), through the same
//! servers as every lookup. Trust: records are data; only Secure answers
//! are acted on. When a domain's MX RRset is secure, only the hosts of
//! that validated RRset are connected to: the routing lookup does not
//! validate, and an on-path attacker forging it could otherwise name a
//! host without TLSA records and get the mail in opportunistic TLS.

use std::path::Path;
use std::sync::Arc;

use hickory_resolver::config::{LookupIpStrategy, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::dnssec::{Proof, TrustAnchors};
use hickory_resolver::proto::rr::rdata::tlsa::{CertUsage, Matching, Selector};
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;
use rustls::pki_types::CertificateDer;
use tokio_rustls::TlsConnector;

use super::tls::{checking_connector, ClientIdentity};
use crate::config::DnsConfig;
use crate::pki::TlsError;
use crate::routing::dns::{ascii_name, resolver_parts, ResolverError};

/// What DANE says about one MX host.
pub enum HostDane {
    /// No secure TLSA records: the usual TLS level applies.
    None,
    /// TLS required, certificate checked by this connector.
    Authenticated(TlsConnector),
    /// Secure TLSA records, none usable: TLS required, not authenticated.
    Unusable,
}

/// Why DANE could not say (the mail waits: 4.7.5, RFC 7672 §2.1).
#[derive(Debug, thiserror::Error)]
pub enum DaneError {
    #[error("4.7.5 DNSSEC lookup of {domain} MX failed: {why}")]
    MxLookup { domain: String, why: String },
    #[error("4.7.5 TLSA lookup for {host} failed: {why}")]
    Tlsa { host: String, why: String },
    #[error("{0}")]
    Name(#[from] crate::routing::dns::DnsError),
    #[error("4.7.5 {0}")]
    Connector(TlsError),
}

/// One usable (DANE-EE) TLSA record.
#[derive(Debug, Clone)]
struct Association {
    selector: Selector,
    matching: Matching,
    data: Vec<u8>,
}

pub struct Dane {
    resolver: TokioResolver,
}

impl Dane {
    pub fn new(
        config: &DnsConfig,
        trust_anchor_file: Option<&Path>,
    ) -> Result<Dane, ResolverError> {
        let (servers, timeout, attempts) = resolver_parts(config)?;
        let anchors = match trust_anchor_file {
            Some(path) => {
                TrustAnchors::from_file(path).map_err(|err| ResolverError::TrustAnchors {
                    path: path.to_path_buf(),
                    err,
                })?
            }
            None => TrustAnchors::default(),
        };
        let mut opts = ResolverOpts::default();
        opts.timeout = timeout;
        opts.attempts = attempts;
        opts.ndots = 0;
        opts.validate = true;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.cache_size = 16_384;
        let resolver = TokioResolver::builder_with_config(servers, TokioRuntimeProvider::default())
            .with_options(opts)
            .with_trust_anchor(Arc::new(anchors))
            .build()
            .map_err(|e| ResolverError::Start {
                who: "dane",
                err: Box::new(e),
            })?;
        Ok(Dane { resolver })
    }

    /// The MX host names of `domain` when its MX RRset is DNSSEC-secure
    /// (DANE applies to them, and only they may be used: a non-validating
    /// lookup's answer may be forged); `None` if insecure or absent; an
    /// error if bogus or unanswered.
    pub async fn secure_mx_hosts(&self, domain: &str) -> Result<Option<Vec<String>>, DaneError> {
        let fqdn = format!("{}.", ascii_name(domain)?);
        match self.resolver.mx_lookup(fqdn.as_str()).await {
            Ok(found) if all_secure(found.answers().iter().map(|r| r.proof)) => Ok(Some(
                found
                    .answers()
                    .iter()
                    .filter_map(|r| match &r.data {
                        RData::MX(mx) => Some(host_name(&mx.exchange.to_ascii())),
                        _ => None,
                    })
                    .collect(),
            )),
            Ok(_) => Ok(None),
            Err(e) if e.is_no_records_found() => Ok(None),
            Err(e) => Err(DaneError::MxLookup {
                domain: domain.to_string(),
                why: e.to_string(),
            }),
        }
    }

    /// The TLSA verdict for `host` on `port`; its connector presents
    /// `identity` to a server that asks.
    pub async fn host(
        &self,
        host: &str,
        port: u16,
        identity: Option<&ClientIdentity>,
    ) -> Result<HostDane, DaneError> {
        let name = format!("_{port}._tcp.{}.", ascii_name(host)?);
        let found = match self.resolver.tlsa_lookup(name.as_str()).await {
            Ok(found) => found,
            Err(e) if e.is_no_records_found() => return Ok(HostDane::None),
            Err(e) => {
                let (host, why) = (host.to_string(), e.to_string());
                return Err(DaneError::Tlsa { host, why });
            }
        };
        let records: Vec<_> = found
            .answers()
            .iter()
            .filter_map(|r| match &r.data {
                RData::TLSA(t) => Some((r.proof, t.clone())),
                _ => None,
            })
            .collect();
        if records.is_empty() || !all_secure(records.iter().map(|(p, _)| *p)) {
            return Ok(HostDane::None);
        }
        let usable: Vec<Association> = records
            .into_iter()
            .filter(|(_, t)| t.cert_usage == CertUsage::DaneEe)
            .filter(|(_, t)| matches!(t.selector, Selector::Full | Selector::Spki))
            .filter(|(_, t)| {
                matches!(
                    t.matching,
                    Matching::Raw | Matching::Sha256 | Matching::Sha512
                )
            })
            .map(|(_, t)| Association {
                selector: t.selector,
                matching: t.matching,
                data: t.cert_data,
            })
            .collect();
        if usable.is_empty() {
            return Ok(HostDane::Unusable);
        }
        Ok(HostDane::Authenticated(
            connector(usable, identity).map_err(DaneError::Connector)?,
        ))
    }
}

/// A host name as compared: lower case, no final dot.
pub fn host_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn all_secure(proofs: impl Iterator<Item = Proof>) -> bool {
    let mut any = false;
    for p in proofs {
        if p != Proof::Secure {
            return false;
        }
        any = true;
    }
    any
}

fn connector(
    records: Vec<Association>,
    identity: Option<&ClientIdentity>,
) -> Result<TlsConnector, TlsError> {
    let check = move |cert: &CertificateDer<'_>| records.iter().any(|r| r.matches(cert));
    checking_connector(
        Box::new(check),
        "no DANE TLSA record matches the certificate",
        identity,
    )
}

impl Association {
    fn matches(&self, cert: &CertificateDer<'_>) -> bool {
        let spki;
        let selected: &[u8] = match self.selector {
            Selector::Spki => match webpki::EndEntityCert::try_from(cert) {
                Ok(ee) => {
                    spki = ee.subject_public_key_info();
                    spki.as_ref()
                }
                Err(_) => return false,
            },
            _ => cert.as_ref(),
        };
        match self.matching {
            Matching::Sha256 => {
                ring::digest::digest(&ring::digest::SHA256, selected).as_ref() == self.data
            }
            Matching::Sha512 => {
                ring::digest::digest(&ring::digest::SHA512, selected).as_ref() == self.data
            }
            _ => selected == self.data,
        }
    }
}
