//! How a worker or a probe gets a connection to a next hop
//! ([`Reach`]'s second part; `targets.rs` finds where to connect): the
//! TLS a host requires (DANE, MTA-STS, the policy table), the connection
//! itself from the transport's source, EHLO, STARTTLS and AUTH, and
//! whether a cached connection still serves the job's sender.
//!
//! Trust: as the agent's (the peer's replies and certificates are
//! checked by `conn.rs` and `tls.rs`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::super::conn::{ConnectError, SmtpConn};
use super::super::dane::{host_name, DaneError, HostDane};
use super::super::mta_sts::Policy;
use super::super::tls::{Level, TlsChoice};
use super::{NoConnection, Reach, Targets, Unreachable};
use crate::log::{ConnectFailed, Event};

impl Reach {
    /// DANE for one MX host: only when the domain's MX RRset was secure.
    pub(super) async fn dane_host(&self, host: &str, port: u16) -> Result<HostDane, DaneError> {
        match (&self.dane, self.dane_secure) {
            (Some(dane), true) => dane.host(host, port, self.tls.identity()).await,
            _ => Ok(HostDane::None),
        }
    }

    /// `domain`'s validated MX host names when DANE applies to them (its
    /// MX RRset is DNSSEC-secure); an error when the lookup was bogus or
    /// failed.
    pub(super) async fn dane_domain(
        &self,
        domain: &str,
        bracketed: bool,
    ) -> Result<Option<Vec<String>>, DaneError> {
        let Some(dane) = &self.dane else {
            return Ok(None);
        };
        if bracketed || domain.parse::<IpAddr>().is_ok() {
            return Ok(None);
        }
        let hosts = dane.secure_mx_hosts(domain).await?;
        if hosts.is_none() {
            self.logger.emit(&Event::DaneUnvalidated {
                domain: domain.into(),
            });
        }
        Ok(hosts)
    }

    /// Keeps the targets named in `domain`'s validated MX RRset (the
    /// routing lookup does not validate: a forged answer could name a
    /// host without TLSA records); none left: 4.7.5.
    pub(super) fn keep_validated<T>(
        &self,
        domain: &str,
        hosts: Vec<(String, T)>,
        validated: &[String],
    ) -> Result<Vec<(String, T)>, Unreachable> {
        let (kept, dropped): (Vec<_>, Vec<_>) = hosts
            .into_iter()
            .partition(|(name, _)| validated.contains(&host_name(name)));
        if !dropped.is_empty() {
            let names: Vec<&str> = dropped.iter().map(|(n, _)| n.as_str()).collect();
            self.logger.emit(&Event::DaneExcluded {
                domain: domain.into(),
                hosts: names.iter().map(|&n| n.into()).collect(),
            });
        }
        if kept.is_empty() {
            return Err(Unreachable::Temporary(format!(
                "4.7.5 MX hosts of {domain} are not in its DNSSEC-validated MX RRset"
            )));
        }
        Ok(kept)
    }

    /// The MTA-STS policy of an MX-routed domain, if it has one.
    pub(super) async fn sts_policy(&self, host: &str, bracketed: bool) -> Option<Arc<Policy>> {
        let sts = self.sts.as_ref()?;
        if bracketed || host.parse::<IpAddr>().is_ok() {
            return None;
        }
        sts.policy(host).await
    }

    /// Connects to the first of `targets` that answers, so a dead or
    /// refusing host fails over to the next; returns the connection and
    /// the targets after it (for failover on a deferred transaction).
    pub(super) async fn connect_first(
        &self,
        targets: &[(String, SocketAddr)],
    ) -> Result<(SmtpConn, Targets), NoConnection> {
        let mut why = NoConnection::NoAddress;
        let mut tried = 0;
        for (i, (name, addr)) in targets.iter().enumerate() {
            if self.dead.is_dead(*addr) {
                continue;
            }
            tried += 1;
            let dane = match self.dane_host(name, addr.port()).await {
                Ok(d) => d,
                Err(e) => {
                    self.logger.emit(&Event::DaneUnusable {
                        line: e.to_string().into(),
                    });
                    why = NoConnection::Dane(e);
                    continue;
                }
            };
            match self.connect(name, *addr, &dane).await {
                Ok(conn) => {
                    self.dead.alive(*addr);
                    return Ok((conn, targets[i + 1..].to_vec()));
                }
                Err(e) => {
                    self.logger.emit(&Event::ConnectFailed(ConnectFailed::Host {
                        host: name.as_str().into(),
                        ip: addr.ip(),
                        port: addr.port(),
                        down: e.host_is_down(),
                        tls: e.tls_failed(),
                        error: e.to_string().into(),
                        line: e.logged().into(),
                    }));
                    // Could not connect, or no usable greeting: the host is down.
                    if e.host_is_down() {
                        self.dead.mark(*addr);
                    }
                    why = NoConnection::Connect(e);
                }
            }
        }
        if tried == 0 && !targets.is_empty() {
            why = NoConnection::AllDead(self.dead.ttl().as_secs());
        }
        Err(why)
    }

    /// Connects at the hop's TLS level (DANE, then MTA-STS, then the
    /// configured level); with `may`, a failed handshake is retried once
    /// in plain text (as Postfix does).
    pub(super) async fn connect(
        &self,
        host: &str,
        addr: SocketAddr,
        dane: &HostDane,
    ) -> Result<SmtpConn, ConnectError> {
        let choice = match dane {
            HostDane::Authenticated(connector) => TlsChoice {
                level: Level::Verify,
                connector,
            },
            HostDane::Unusable => self.tls.choice(Level::Encrypt),
            HostDane::None if self.sts_enforce => self.tls.choice(Level::Verify),
            HostDane::None => self.tls.choice(self.tls.level(&self.hop.key())),
        };
        let source = self.egress.pick().clone();
        let from = (&source, self.egress.enforce);
        let (mut conn, bound) =
            match SmtpConn::connect(host, addr, &self.config, choice, from).await {
                Err(why) if choice.level == Level::May && why.tls_failed() => {
                    self.logger.emit(&Event::TlsFallback {
                        host: host.into(),
                        ip: addr.ip(),
                        port: addr.port(),
                        error: why.to_string().into(),
                    });
                    let plain = self.tls.choice(Level::None);
                    SmtpConn::connect(host, addr, &self.config, plain, from).await?
                }
                other => other?,
            };
        super::super::egress::log(&self.logger, &self.egress, &conn.relay, &source, bound);
        if let Some((text, verified)) = &conn.tls {
            let _trust = if *verified { "Verified" } else { "Untrusted" };
            self.logger.emit(&Event::TlsOut {
                relay: conn.relay.as_str().into(),
                verified: *verified,
                detail: text.as_str().into(),
            });
        }
        if let Some(sasl) = &self.sasl {
            let sender = self.sasl_sender.clone();
            let logger = &self.logger;
            if let Err(e) = sasl.login(&mut conn, &self.hop, host, sender, logger).await {
                conn.quit().await;
                return Err(ConnectError::Auth(e));
            }
        }
        Ok(conn)
    }
}
