//! Where an outbound SMTP connection leaves from, and the name it gives
//! in EHLO: Postfix's `smtp_bind_address`, `smtp_bind_address6` and
//! `smtp_helo_name`, from `[delivery]` or a named transport
//! (`[transports.NAME]`, master.cf's `-o` overrides), or a weighted pool
//! of sources (KumoMTA's egress pools).
//!
//! Each new connection takes the next source of a smooth weighted round
//! robin: with weights 3 and 1, `a a b a` in every four connections, the
//! order fixed so the share holds from the first connection on.
//!
//! A source address that cannot be bound (not one of ours) is Postfix's
//! case too: with `smtp_bind_address_enforce = no` (its default) the
//! connection leaves from the system's choice with a warning; with yes,
//! the attempt fails and the mail is deferred.
//!
//! Trust: the administrator's configuration. Invariant: a HELO name here
//! passed `config::transports`'s check (no blank, no line break).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpSocket, TcpStream};

use super::tls::ClientTls;
use crate::config::delivery::ClientCert;
use crate::config::hop::NextHop;
use crate::config::transports::EgressSettings;
use crate::config::Config;
use crate::log::{Event, Logger};
use crate::pki::TlsError;

/// One source: the addresses a connection is bound to and its HELO name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Its name in the log.
    pub name: Arc<str>,
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
    pub helo: Arc<str>,
}

/// The sources of one scope and the round robin over them.
#[derive(Debug)]
pub struct Egress {
    sources: Vec<Source>,
    /// Indexes into `sources`, in the smooth weighted order.
    schedule: Vec<u16>,
    next: AtomicUsize,
    /// Something was configured: connections are logged with their source.
    pub configured: bool,
    /// `smtp_bind_address_enforce`.
    pub enforce: bool,
}

/// How a connection's source address came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// Nothing to bind for this address family.
    System,
    To(IpAddr),
    /// Binding failed; the connection left from the system's choice.
    Failed {
        wanted: IpAddr,
        error: String,
    },
}

impl Egress {
    /// The egress of `settings`, each unset field from `fallback`
    /// (`[delivery]`'s, for a transport); `hostname` is the default HELO.
    pub fn new(
        settings: EgressSettings<'_>,
        fallback: Option<EgressSettings<'_>>,
        hostname: &str,
        enforce: bool,
    ) -> Egress {
        let own = !settings.pool.is_empty()
            || settings.bind4.is_some()
            || settings.bind6.is_some()
            || settings.helo.is_some();
        let settings = match fallback {
            Some(f) if !own => f,
            Some(f) if settings.pool.is_empty() => EgressSettings {
                bind4: settings.bind4.or(f.bind4),
                bind6: settings.bind6.or(f.bind6),
                helo: settings.helo.or(f.helo),
                pool: &[],
            },
            _ => settings,
        };
        let configured = !settings.pool.is_empty()
            || settings.bind4.is_some()
            || settings.bind6.is_some()
            || settings.helo.is_some();
        let (sources, weights) = if settings.pool.is_empty() {
            let name = settings
                .bind4
                .map(|a| a.to_string())
                .or(settings.bind6.map(|a| a.to_string()))
                .unwrap_or_else(|| "default".into());
            let source = Source {
                name: name.into(),
                v4: settings.bind4,
                v6: settings.bind6,
                helo: settings.helo.unwrap_or(hostname).into(),
            };
            (vec![source], vec![1])
        } else {
            let sources = settings.pool.iter().map(|s| {
                let name = s.name.clone().or_else(|| {
                    s.bind_address
                        .map(|a| a.to_string())
                        .or(s.bind_address6.map(|a| a.to_string()))
                });
                Source {
                    name: name.unwrap_or_else(|| "default".into()).into(),
                    v4: s.bind_address,
                    v6: s.bind_address6,
                    helo: s.helo_name.as_deref().unwrap_or(hostname).into(),
                }
            });
            let weights = settings.pool.iter().map(|s| s.weight.max(1)).collect();
            (sources.collect(), weights)
        };
        Egress {
            sources,
            schedule: smooth_weighted(&weights),
            next: AtomicUsize::new(0),
            configured,
            enforce,
        }
    }

    /// The source of the next new connection.
    pub fn pick(&self) -> &Source {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.schedule.len();
        &self.sources[self.schedule[turn] as usize]
    }
}

/// The order of a smooth weighted round robin (nginx's): each turn, every
/// source gains its weight and the one with the most, less the total,
/// goes. One full cycle is the sum of the weights.
fn smooth_weighted(weights: &[u32]) -> Vec<u16> {
    let total: i64 = weights.iter().map(|&w| w as i64).sum();
    let mut current = vec![0i64; weights.len()];
    (0..total)
        .map(|_| {
            for (c, &w) in current.iter_mut().zip(weights) {
                *c += w as i64;
            }
            let best = (0..weights.len())
                .max_by_key(|&i| (current[i], std::cmp::Reverse(i)))
                .unwrap_or(0);
            current[best] -= total;
            best as u16
        })
        .collect()
}

/// The egress of every scope: `[delivery]`'s and each transport's, and
/// the TLS client of each transport with a certificate of its own.
pub struct Egresses {
    default: Arc<Egress>,
    transports: HashMap<String, Arc<Egress>>,
    tls: HashMap<String, Arc<ClientTls>>,
}

impl Egresses {
    /// Fails on a transport's certificate that cannot be loaded (or a
    /// key that is not its certificate's).
    pub fn new(config: &Config) -> Result<Egresses, TlsError> {
        let mut tls = HashMap::new();
        for (name, t) in &config.transports {
            let setting = || format!("transports.{name}.smtp_tls_cert_file");
            let cert = ClientCert::of(t.smtp_tls_cert_file.as_ref(), t.smtp_tls_key_file.as_ref())
                .map_err(|_| TlsError::HalfPair.of(setting()))?;
            if let Some(cert) = cert {
                let client = ClientTls::build_with(&config.delivery, Some(&cert))?;
                tls.insert(name.clone(), Arc::new(client));
            }
        }
        Ok(Egresses {
            tls,
            ..Egresses::sources(config)
        })
    }

    /// The TLS client of `hop`'s transport, when it has a certificate of
    /// its own (else `[delivery]`'s applies).
    pub fn tls(&self, hop: &NextHop) -> Option<Arc<ClientTls>> {
        self.tls.get(&**hop.transport()?).cloned()
    }

    fn sources(config: &Config) -> Egresses {
        let d = &config.delivery;
        let host = config.hostname.as_str();
        let enforce = d.smtp_bind_address_enforce;
        let default = Arc::new(Egress::new(d.egress(), None, host, enforce));
        let transports = config
            .transports
            .iter()
            .map(|(name, t)| {
                let egress = Egress::new(t.egress(), Some(d.egress()), host, enforce);
                (name.clone(), Arc::new(egress))
            })
            .collect();
        Egresses {
            default,
            transports,
            tls: HashMap::new(),
        }
    }

    /// The egress of `hop`'s transport (`[delivery]`'s if it names none
    /// or one that is not defined).
    pub fn of(&self, hop: &NextHop) -> Arc<Egress> {
        hop.transport()
            .and_then(|t| self.transports.get(&**t))
            .unwrap_or(&self.default)
            .clone()
    }
}

/// Connects to `addr` from `source`'s address of the same family.
pub async fn dial(
    addr: SocketAddr,
    source: &Source,
    enforce: bool,
) -> std::io::Result<(TcpStream, Bound)> {
    let wanted = match addr {
        SocketAddr::V4(_) => source.v4.map(IpAddr::V4),
        SocketAddr::V6(_) => source.v6.map(IpAddr::V6),
    };
    let socket = || match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    };
    let Some(wanted) = wanted else {
        return Ok((TcpStream::connect(addr).await?, Bound::System));
    };
    let s = socket()?;
    match s.bind(SocketAddr::new(wanted, 0)) {
        Ok(()) => Ok((s.connect(addr).await?, Bound::To(wanted))),
        Err(e) if enforce => Err(std::io::Error::new(
            e.kind(),
            format!("cannot bind to {wanted}: {e}"),
        )),
        Err(e) => {
            let bound = Bound::Failed {
                wanted,
                error: e.to_string(),
            };
            Ok((TcpStream::connect(addr).await?, bound))
        }
    }
}

/// Says where a new connection left from, when a source is configured or
/// its address could not be bound.
pub fn log(logger: &Logger, egress: &Egress, relay: &str, source: &Source, bound: Bound) {
    let (address, bind_error) = match bound {
        Bound::System => (None, None),
        Bound::To(ip) => (Some(ip), None),
        Bound::Failed { error, wanted } => (None, Some(format!("{wanted}: {error}").into())),
    };
    if egress.configured || bind_error.is_some() {
        logger.emit(&Event::Egress {
            relay: relay.into(),
            source: (&*source.name).into(),
            address,
            helo: (&*source.helo).into(),
            bind_error,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::transports::EgressSource;

    fn source(name: &str, weight: u32) -> EgressSource {
        EgressSource {
            name: Some(name.into()),
            bind_address: None,
            bind_address6: None,
            helo_name: Some(format!("{name}.example")),
            weight,
        }
    }

    #[test]
    fn a_pool_shares_connections_by_weight_from_the_first_on() {
        let pool = [source("a", 3), source("b", 1)];
        let settings = EgressSettings {
            bind4: None,
            bind6: None,
            helo: None,
            pool: &pool,
        };
        let e = Egress::new(settings, None, "host.example", false);
        let names: Vec<String> = (0..8).map(|_| e.pick().name.to_string()).collect();
        assert_eq!(names, ["a", "a", "b", "a", "a", "a", "b", "a"]);
        assert_eq!(&*e.pick().helo, "a.example");
        assert_eq!(smooth_weighted(&[5, 1, 1]), [0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn a_transport_inherits_what_it_does_not_set() {
        let global = EgressSettings {
            bind4: Some(Ipv4Addr::new(127, 0, 0, 2)),
            bind6: None,
            helo: Some("global.example"),
            pool: &[],
        };
        let own = EgressSettings {
            bind4: None,
            bind6: None,
            helo: Some("out2.example"),
            pool: &[],
        };
        let e = Egress::new(own, Some(global), "host.example", false);
        let s = e.pick();
        assert_eq!((s.v4, &*s.helo), (global.bind4, "out2.example"));
        let none = EgressSettings {
            bind4: None,
            bind6: None,
            helo: None,
            pool: &[],
        };
        let e = Egress::new(none, None, "host.example", false);
        assert!(!e.configured);
        assert_eq!(&*e.pick().helo, "host.example");
    }
}
