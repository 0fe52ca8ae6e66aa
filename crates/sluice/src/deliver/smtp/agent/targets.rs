//! Where a delivery attempt connects: a literal address, a bracketed
//! host's addresses, or the mail hosts of a domain (its MX hosts, or an
//! MX group's), with the domain's MTA-STS policy applied to the host names
//! and, for a next hop from DNS, every address screened (`guard.rs`).
//!
//! Trust: MX answers are the zone owner's, and a zone may list hundreds of
//! hosts. Invariant: one attempt looks up MX hosts in order only until it
//! has `delivery.mx_address_limit` addresses (Postfix's
//! smtp_mx_address_limit, 5), and uses no more than that, whether they
//! pass the screen or not; a cut is logged, one line per attempt. Names a
//! domain's MTA-STS policy refuses (enforce) are dropped before any
//! address is looked up, so they never take the place of allowed hosts.
//! Configured hops (a relayhost, `[host]`, a literal) are the
//! administrator's and are not capped. When a domain's MX RRset is
//! DNSSEC-secure (DANE), only the hosts it names are used: the routing
//! lookup does not validate and may be forged.

use std::net::{IpAddr, SocketAddr};

use super::super::guard;
use super::super::mta_sts::{Mode, Policy};
use super::{Reach, Targets, Unreachable};
use crate::config::hop::NextHop;
use crate::log::Event;
use crate::routing::dns::{DnsError, Exchangers};

/// An enforced MTA-STS policy allows none of the domain's MX hosts.
#[derive(Debug, thiserror::Error)]
#[error("4.7.5 MTA-STS policy of {0}: no MX host matches its mx patterns")]
pub(super) struct NoHostAllowed(String);

/// A mail host to try: its name, and its addresses if already known.
type Host = (String, Option<Vec<IpAddr>>);

impl Reach {
    /// Where to connect for this worker's hop, best first, with its
    /// domain's DANE and MTA-STS policy applied and, for a hop from DNS,
    /// every address screened (`guard.rs`). `rcpt` is the first
    /// recipient's address (it names an MX group's domain in the log).
    pub(super) async fn first_targets(
        &mut self,
        rcpt: Option<&str>,
    ) -> Result<Targets, Unreachable> {
        let hop = self.hop.clone();
        match &*hop {
            NextHop::Smtp {
                host,
                port,
                bracketed,
                screened,
                ..
            } => {
                let validated = self.dane_domain(host, *bracketed).await.map_err(|why| {
                    self.logger.emit(&Event::DaneUnusable {
                        line: why.to_string().into(),
                    });
                    Unreachable::Temporary(why.to_string())
                })?;
                self.dane_secure = validated.is_some();
                self.sts_enforce = false;
                if *bracketed || host.parse::<IpAddr>().is_ok() {
                    let targets = self.configured_targets(host, *port).await?;
                    return match *screened {
                        true => self.screen(host, targets),
                        false => Ok(targets),
                    };
                }
                let policy = self.sts_policy(host, false).await;
                let hosts = match self.dns.exchangers(host).await {
                    Ok(Exchangers::Mx(mx)) => mx.into_iter().map(|(_, n)| (n, None)).collect(),
                    Ok(Exchangers::Implicit(h)) => vec![(h.name, Some(h.addrs))],
                    Err(e) if e.is_permanent() => {
                        return Err(Unreachable::Permanent(e.to_string()))
                    }
                    Err(e) => return Err(Unreachable::Temporary(e.to_string())),
                };
                let mut hosts = self
                    .apply_sts(host, hosts, policy.as_deref())
                    .map_err(|refused| Unreachable::Temporary(refused.to_string()))?;
                if let Some(validated) = &validated {
                    // DANE: only the hosts of the validated MX RRset.
                    hosts = self.keep_validated(host, hosts, validated)?;
                }
                self.look_up(host, hosts, *port, *screened).await
            }
            NextHop::MxSet { levels, port } => {
                // Rolled-up domains have no DANE or MTA-STS policy of
                // their own (rollup.rs keeps those apart).
                self.dane_secure = false;
                self.sts_enforce = false;
                let domain = rcpt
                    .and_then(|r| r.rsplit_once('@'))
                    .map_or("this domain", |(_, d)| d)
                    .to_string();
                let mut hosts = Vec::new();
                for level in levels {
                    let mut names = level.clone();
                    crate::routing::dns::shuffle(&mut names);
                    hosts.extend(names.into_iter().map(|n| (n, None)));
                }
                self.look_up(&domain, hosts, *port, true).await
            }
            _ => Err(Unreachable::Temporary(
                "4.3.5 no SMTP delivery for this next hop".into(),
            )),
        }
    }

    /// A literal address, or every address of a bracketed host (RFC 5321
    /// §5.1: no MX lookup). Names are resolved by hickory, never by a
    /// blocking getaddrinfo.
    async fn configured_targets(&self, host: &str, port: u16) -> Result<Targets, Unreachable> {
        let at = |ip: IpAddr| (host.to_string(), SocketAddr::new(ip, port));
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![at(ip)]);
        }
        let addrs = self
            .dns
            .host_addresses(host)
            .await
            .map_err(|e| Unreachable::Temporary(e.to_string()))?;
        Ok(addrs.into_iter().map(at).collect())
    }

    /// Looks up `hosts` in order (best first) until it has
    /// `mx_address_limit` addresses; screens them when `screen` (each
    /// refused one still counts). Nothing left: the lookup's error, or
    /// `5.4.6 … loops back to myself` if addresses were refused.
    async fn look_up(
        &self,
        domain: &str,
        hosts: Vec<Host>,
        port: u16,
        screen: bool,
    ) -> Result<Targets, Unreachable> {
        let limit = match self.config.delivery.mx_address_limit {
            0 => usize::MAX,
            n => n,
        };
        let total = hosts.len();
        let (mut addrs_seen, mut looked_up, mut cut) = (0, 0, false);
        let (mut targets, mut failed) = (Vec::new(), None);
        for (name, known) in hosts {
            if addrs_seen >= limit {
                break;
            }
            looked_up += 1;
            let addrs = match known {
                Some(addrs) => addrs,
                None => match self.dns.mx_host_addresses(&name).await {
                    Ok(addrs) => addrs,
                    Err(e) => {
                        failed = Some(e);
                        continue;
                    }
                },
            };
            let room = limit - addrs_seen;
            addrs_seen += addrs.len().min(room);
            cut |= addrs.len() > room;
            let at = |ip: IpAddr| (name.clone(), SocketAddr::new(ip, port));
            targets.extend(addrs.into_iter().take(room).map(at));
        }
        if cut || looked_up < total {
            self.logger.emit(&Event::MxTruncated {
                domain: domain.into(),
                hosts: total as u64,
                limit: limit as u64,
            });
        }
        if screen && !targets.is_empty() {
            return self.screen(domain, targets);
        }
        match (targets.is_empty(), failed) {
            (false, _) => Ok(targets),
            (true, Some(e)) => Err(Unreachable::Temporary(
                DnsError::Temporary(domain.into(), e.to_string()).to_string(),
            )),
            (true, None) => Err(Unreachable::Temporary(
                DnsError::Temporary(domain.into(), "no MX host has an address".into()).to_string(),
            )),
        }
    }

    /// Drops the addresses a next hop from DNS may not have; none left:
    /// `5.4.6 mail for <domain> loops back to myself` (as Postfix).
    fn screen(&self, domain: &str, targets: Targets) -> Result<Targets, Unreachable> {
        let own = self.own.get();
        let allowed = &self.config.delivery.allow_mx_networks;
        let mut refused = None;
        let mut kept = Vec::with_capacity(targets.len());
        for (name, addr) in targets {
            match guard::check(addr, &own, allowed) {
                Ok(()) => kept.push((name, addr)),
                Err(why) => {
                    self.logger.emit(&Event::MxRefused {
                        domain: domain.into(),
                        host: name.as_str().into(),
                        ip: addr.ip(),
                        port: addr.port(),
                        error: why.to_string().into(),
                    });
                    refused = Some((name, addr, why));
                }
            }
        }
        match (kept.is_empty(), refused) {
            (true, Some((name, addr, why))) => Err(Unreachable::Permanent(format!(
                "5.4.6 mail for {domain} loops back to myself (MX host {name}[{}]: {why})",
                addr.ip()
            ))),
            _ => Ok(kept),
        }
    }

    /// Applies `domain`'s MTA-STS policy to its mail hosts: `enforce`
    /// keeps the matching ones (none: 4.7.5) and requires verified TLS;
    /// `testing` logs the hosts that would be refused.
    fn apply_sts(
        &mut self,
        domain: &str,
        hosts: Vec<Host>,
        policy: Option<&Policy>,
    ) -> Result<Vec<Host>, NoHostAllowed> {
        self.sts_enforce = false;
        let Some(p) = policy else {
            return Ok(hosts);
        };
        let (ok, bad): (Vec<Host>, Vec<Host>) = hosts.into_iter().partition(|(n, _)| p.allows(n));
        match p.mode {
            Mode::Enforce if ok.is_empty() => Err(NoHostAllowed(domain.to_string())),
            Mode::Enforce => {
                self.sts_enforce = true;
                Ok(ok)
            }
            Mode::Testing | Mode::None => {
                if p.mode == Mode::Testing && !bad.is_empty() {
                    let names: Vec<&str> = bad.iter().map(|(n, _)| n.as_str()).collect();
                    self.logger.emit(&Event::MtaStsTesting {
                        domain: domain.into(),
                        hosts: names.iter().map(|&n| n.into()).collect(),
                    });
                }
                Ok(ok.into_iter().chain(bad).collect())
            }
        }
    }
}
