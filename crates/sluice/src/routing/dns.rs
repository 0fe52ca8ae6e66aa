//! Mail hosts from DNS (RFC 5321 §5.1): MX records by preference, random
//! among equal preferences, each host's IPv6 and IPv4 addresses; the
//! domain itself when it has no MX (implicit MX); RFC 7505 null MX. The
//! names ([`Dns::exchangers`]) and each host's addresses can be asked for
//! apart, so that a caller looks up only the hosts it will try.
//!
//! Resolution is hickory-resolver's (asynchronous, cached per TTL; no
//! blocking getaddrinfo on the delivery path), against `[dns]
//! nameservers` or the system's resolver configuration.
//!
//! Trust: answers are data. Invariant: only a definite answer is
//! permanent — NXDOMAIN (5.1.2), null MX (5.1.10), a domain with neither
//! MX nor address (5.4.4); SERVFAIL, REFUSED and timeouts are temporary
//! (4.4.3), never a bounce.

use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolverConfig,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::NetError as ResolveError;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;

use crate::config::DnsConfig;

/// One host to try, with its addresses in the order to try them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailHost {
    pub name: String,
    pub preference: u16,
    pub addrs: Vec<IpAddr>,
}

/// A domain's mail exchangers, before their addresses are looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exchangers {
    /// MX host names (no trailing dot) by preference, shuffled within one.
    Mx(Vec<(u16, String)>),
    /// No MX: the domain itself, with its addresses (RFC 5321 §5.1).
    Implicit(MailHost),
}

/// One query's outcome, told apart as a stub resolver (and so Postfix)
/// tells it apart: for the checks that judge a client by its DNS
/// (`crate::receive::dnscheck`).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The records of the type asked for (CNAMEs followed), in the
    /// answer's order; never empty.
    Records(Vec<RData>),
    /// The name exists, without records of that type (NOERROR, none).
    NoData,
    /// The name does not exist (NXDOMAIN).
    NxDomain,
    /// No answer to go by: SERVFAIL, REFUSED, a timeout, a name that
    /// cannot be asked for. Temporary.
    Failed(String),
}

/// Why there are no hosts to try.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("5.1.2 domain {0} does not exist")]
    NoSuchDomain(String),
    #[error("5.1.10 domain {0} accepts no mail (null MX)")]
    NullMx(String),
    #[error("5.4.4 domain {0} has no mail host (no MX, no address)")]
    NoMailHost(String),
    #[error("4.4.3 DNS lookup for {0} failed: {1}")]
    Temporary(String, String),
}

impl DnsError {
    pub fn is_permanent(&self) -> bool {
        !matches!(self, DnsError::Temporary(..))
    }
}

pub struct Dns {
    resolver: TokioResolver,
}

/// Why a resolver could not be set up from `[dns]`.
#[derive(Debug, thiserror::Error)]
pub enum ResolverError {
    #[error("dns.trust_anchor_file: {}: {err}", path.display())]
    TrustAnchors {
        path: std::path::PathBuf,
        err: hickory_resolver::proto::serialize::txt::ParseError,
    },
    #[error("{who}: cannot start the resolver: {err}")]
    Start {
        who: &'static str,
        err: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The servers `[dns]` names (or the system's resolv.conf; without one, a
/// resolver on this host, never a public server picked for the
/// administrator), its timeout and attempts: for [`Dns`] and for sender
/// authentication, so both ask the same servers.
pub fn resolver_parts(
    config: &DnsConfig,
) -> Result<(ResolverConfig, Duration, usize), ResolverError> {
    let servers = if config.nameservers.is_empty() {
        match hickory_resolver::system_conf::read_system_conf() {
            Ok((system, _)) => system,
            Err(_) => {
                let local = vec![server(SocketAddr::from(([127, 0, 0, 1], 53)))];
                ResolverConfig::from_parts(None, vec![], local)
            }
        }
    } else {
        // (Parsed with the configuration.)
        let servers = config.nameservers.iter().map(|ns| server(*ns)).collect();
        ResolverConfig::from_parts(None, vec![], servers)
    };
    let timeout = Duration::from_millis(config.timeout_ms.max(1));
    Ok((servers, timeout, config.attempts.max(1)))
}

impl Dns {
    pub fn new(config: &DnsConfig) -> Result<Dns, ResolverError> {
        let (servers, timeout, attempts) = resolver_parts(config)?;
        let mut builder =
            TokioResolver::builder_with_config(servers, TokioRuntimeProvider::default());
        let opts = builder.options_mut();
        opts.timeout = timeout;
        opts.attempts = attempts;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.ndots = 0;
        // Answers are cached per their TTL; room for many destinations
        // (hickory's default of 32 would be refilled constantly).
        opts.cache_size = 16_384;
        let resolver = builder.build().map_err(|e| ResolverError::Start {
            who: "dns",
            err: Box::new(e),
        })?;
        Ok(Dns { resolver })
    }

    /// The hosts to try for `domain`, best first, every MX host looked up
    /// (the delivery agent looks up only as many as it will try, see
    /// [`Dns::exchangers`]).
    pub async fn mail_hosts(&self, domain: &str) -> Result<Vec<MailHost>, DnsError> {
        let mx = match self.exchangers(domain).await? {
            Exchangers::Implicit(host) => return Ok(vec![host]),
            Exchangers::Mx(mx) => mx,
        };
        let mut hosts = Vec::with_capacity(mx.len());
        let mut last_error = None;
        for (preference, name) in mx {
            match self.mx_host_addresses(&name).await {
                Ok(addrs) if !addrs.is_empty() => hosts.push(MailHost {
                    name,
                    preference,
                    addrs,
                }),
                Ok(_) => {}
                Err(e) => last_error = Some(e),
            }
        }
        match (hosts.is_empty(), last_error) {
            (false, _) => Ok(hosts),
            (true, Some(e)) => Err(DnsError::Temporary(domain.into(), e.to_string())),
            (true, None) => Err(DnsError::Temporary(
                domain.into(),
                "no MX host has an address".into(),
            )),
        }
    }

    /// `domain`'s mail exchangers before their addresses are looked up:
    /// its MX hosts by preference (random among equals, null MX and
    /// definite failures as in [`DnsError`]), or, without MX, the domain
    /// itself with its addresses (implicit MX).
    pub async fn exchangers(&self, domain: &str) -> Result<Exchangers, DnsError> {
        let fqdn = format!("{}.", ascii_name(domain)?);
        let temporary = |e: &ResolveError| DnsError::Temporary(domain.to_string(), e.to_string());
        let mut mx: Vec<(u16, String)> = match self.resolver.mx_lookup(fqdn.as_str()).await {
            Ok(found) => found
                .answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::MX(mx) => Some((mx.preference, mx.exchange.to_ascii())),
                    _ => None,
                })
                .collect(),
            Err(e) if e.is_nx_domain() => return Err(DnsError::NoSuchDomain(domain.into())),
            Err(e) if no_data(&e) => Vec::new(),
            Err(e) => return Err(temporary(&e)),
        };
        if let [(_, exchange)] = &mx[..] {
            if exchange == "." {
                return Err(DnsError::NullMx(domain.into()));
            }
        }
        if mx.is_empty() {
            // Implicit MX (RFC 5321 §5.1): the domain's own addresses.
            return match self.addresses(&fqdn).await {
                Ok(addrs) if !addrs.is_empty() => Ok(Exchangers::Implicit(MailHost {
                    name: domain.to_string(),
                    preference: 0,
                    addrs,
                })),
                Ok(_) => Err(DnsError::NoMailHost(domain.into())),
                Err(e) if e.is_nx_domain() || no_data(&e) => {
                    Err(DnsError::NoMailHost(domain.into()))
                }
                Err(e) => Err(temporary(&e)),
            };
        }
        mx.retain(|(_, name)| name != ".");
        order(&mut mx);
        for (_, name) in &mut mx {
            name.truncate(name.trim_end_matches('.').len());
        }
        Ok(Exchangers::Mx(mx))
    }

    /// The addresses of MX host `name` (from [`Dns::exchangers`]), IPv6
    /// first; none is an empty list, a failed lookup the resolver's error.
    pub async fn mx_host_addresses(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        self.addresses(&format!("{name}.")).await
    }

    /// The addresses of a host named in the configuration (a relayhost):
    /// any failure is temporary, since the name is the administrator's.
    pub async fn host_addresses(&self, name: &str) -> Result<Vec<IpAddr>, DnsError> {
        let ascii =
            ascii_name(name).map_err(|e| DnsError::Temporary(name.into(), e.to_string()))?;
        let fqdn = format!("{ascii}.");
        match self.addresses(&fqdn).await {
            Ok(a) if !a.is_empty() => Ok(a),
            Ok(_) => Err(DnsError::Temporary(name.into(), "no address".into())),
            Err(e) => Err(DnsError::Temporary(name.into(), e.to_string())),
        }
    }

    /// The TXT records at `name`, each record's strings joined; a
    /// definite "none" is an empty list.
    pub async fn txt(&self, name: &str) -> Result<Vec<String>, DnsError> {
        let fqdn = format!("{}.", ascii_name(name)?);
        match self.resolver.txt_lookup(fqdn.as_str()).await {
            Ok(found) => Ok(found
                .answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::TXT(txt) => Some(
                        txt.txt_data
                            .iter()
                            .map(|s| String::from_utf8_lossy(s))
                            .collect::<String>(),
                    ),
                    _ => None,
                })
                .collect()),
            Err(e) if e.is_nx_domain() || no_data(&e) => Ok(Vec::new()),
            Err(e) => Err(DnsError::Temporary(name.into(), e.to_string())),
        }
    }

    /// The IPv4 addresses at `name` (a DNS list's answer); a definite
    /// "none" (NXDOMAIN, no data) is an empty list.
    pub async fn ipv4(&self, name: &str) -> Result<Vec<std::net::Ipv4Addr>, DnsError> {
        let fqdn = format!("{}.", ascii_name(name)?);
        match self.resolver.ipv4_lookup(fqdn.as_str()).await {
            Ok(found) => Ok(found
                .answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::A(a) => Some(a.0),
                    _ => None,
                })
                .collect()),
            Err(e) if e.is_nx_domain() || no_data(&e) => Ok(Vec::new()),
            Err(e) => Err(DnsError::Temporary(name.into(), e.to_string())),
        }
    }

    /// The records of `rtype` at `name` (an absolute name, ASCII), typed as
    /// [`Answer`]: NXDOMAIN apart from "no data", failures apart from both.
    pub async fn answer(&self, name: &str, rtype: RecordType) -> Answer {
        // As ASCII, not through IDNA: host names with `_` (which
        // Postfix's checks accept) stay askable.
        let fqdn = format!("{}.", name.trim_end_matches('.'));
        let fqdn = match hickory_resolver::proto::rr::Name::from_ascii(&fqdn) {
            Ok(n) => n,
            Err(e) => return Answer::Failed(format!("{name}: {e}")),
        };
        match self.resolver.lookup(fqdn, rtype).await {
            Ok(found) => {
                let records: Vec<RData> = found
                    .answers()
                    .iter()
                    .filter(|r| r.record_type() == rtype)
                    .map(|r| r.data.clone())
                    .collect();
                match records.is_empty() {
                    true => Answer::NoData,
                    false => Answer::Records(records),
                }
            }
            Err(e) if e.is_nx_domain() => Answer::NxDomain,
            Err(e) if no_data(&e) => Answer::NoData,
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    /// IPv6 then IPv4 addresses of `name`.
    async fn addresses(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let found = self.resolver.lookup_ip(name).await?;
        let mut addrs: Vec<IpAddr> = found.iter().collect();
        addrs.sort_by_key(|a| a.is_ipv4());
        Ok(addrs)
    }
}

/// The name as DNS knows it: an internationalized domain (U-labels, as
/// SMTPUTF8 clients may send them) in A-labels (IDNA 2008 / UTS 46), so
/// `bücher.example` is looked up as `xn--bcher-kva.example`. A name that
/// cannot be converted does not exist (5.1.2).
pub fn ascii_name(domain: &str) -> Result<String, DnsError> {
    let domain = domain.trim_end_matches('.');
    if domain.is_ascii() {
        return Ok(domain.to_string());
    }
    idna::domain_to_ascii(domain).map_err(|_| DnsError::NoSuchDomain(domain.into()))
}

/// A definite "no records of this type" (NOERROR with an empty answer);
/// hickory reports REFUSED and SERVFAIL as "no records" too, and those
/// are temporary.
fn no_data(e: &ResolveError) -> bool {
    use hickory_resolver::net::{DnsError, NoRecords};
    use hickory_resolver::proto::op::ResponseCode;
    matches!(
        e,
        ResolveError::Dns(DnsError::NoRecordsFound(NoRecords {
            response_code: ResponseCode::NoError,
            ..
        }))
    )
}

/// A name server at `addr`, over UDP with TCP for truncated answers.
fn server(addr: SocketAddr) -> NameServerConfig {
    let on_port = |mut c: ConnectionConfig| {
        c.port = addr.port();
        c
    };
    NameServerConfig::new(
        addr.ip(),
        true,
        vec![
            on_port(ConnectionConfig::udp()),
            on_port(ConnectionConfig::tcp()),
        ],
    )
}

/// Sorts by preference and shuffles hosts of equal preference (RFC 5321
/// §5.1: spread the load among them).
fn order(mx: &mut [(u16, String)]) {
    mx.sort_by_key(|(p, _)| *p);
    let mut start = 0;
    while start < mx.len() {
        let end = start
            + mx[start..]
                .iter()
                .take_while(|(p, _)| *p == mx[start].0)
                .count();
        let group = &mut mx[start..end];
        for i in (1..group.len()).rev() {
            group.swap(i, (random() % (i as u64 + 1)) as usize);
        }
        start = end;
    }
}

/// Shuffles `items` (hosts of one preference, RFC 5321 §5.1).
pub fn shuffle<T>(items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, (random() % (i as u64 + 1)) as usize);
    }
}

/// A random number from the standard library's per-process random keys.
fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_domains_are_looked_up_in_a_labels() {
        assert_eq!(
            ascii_name("bücher.example.").unwrap(),
            "xn--bcher-kva.example"
        );
        assert_eq!(ascii_name("Example.COM").unwrap(), "Example.COM");
        assert!(matches!(
            ascii_name("bad\u{fffd}.example"),
            Err(DnsError::NoSuchDomain(_))
        ));
    }
}
