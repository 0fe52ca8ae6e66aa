//! The SMTP delivery agent: one worker per outbound connection.
//!
//! Each worker keeps its connection between jobs (the queue's worker loop
//! feeds it jobs for the same next hop), so busy destinations reuse
//! connections: no new TCP and EHLO handshake per message. A cached
//! connection the peer has closed is detected on first use and replaced
//! once.

use std::sync::Arc;
use std::time::Duration;

use sluice_spool::Spool;

use super::conn::{SmtpConn, TxError};
use super::dead::DeadHosts;
use super::tls::{ClientTls, Level};
use crate::config::hop::NextHop;
use crate::config::Config;
use crate::log::Logger;
use crate::message::body;
use crate::queue::{
    bounce_all, defer_all, run_worker, Attempt, DeliveryAgent, Job, WorkerSession, WorkerStart,
};
use crate::routing::dns::Dns;
use std::net::{IpAddr, SocketAddr};

pub struct SmtpAgent {
    pub config: Arc<Config>,
    pub spool: Spool,
    pub logger: Logger,
    pub tls: Arc<ClientTls>,
    pub dns: Arc<Dns>,
    pub dead: Arc<DeadHosts>,
}

impl DeliveryAgent for SmtpAgent {
    fn spawn(&self, start: WorkerStart) {
        let d = &self.config.delivery;
        let idle = Duration::from_secs(d.connection_idle_secs.max(1));
        let limit = d.messages_per_connection;
        let worker = SmtpWorker {
            hop: start.hop.clone(),
            config: self.config.clone(),
            spool: self.spool.clone(),
            logger: self.logger.clone(),
            tls: self.tls.clone(),
            dns: self.dns.clone(),
            dead: self.dead.clone(),
            conn: None,
        };
        tokio::spawn(run_worker(worker, start, idle, limit));
    }
}

struct SmtpWorker {
    hop: Arc<NextHop>,
    config: Arc<Config>,
    spool: Spool,
    logger: Logger,
    tls: Arc<ClientTls>,
    dns: Arc<Dns>,
    dead: Arc<DeadHosts>,
    conn: Option<SmtpConn>,
}

impl WorkerSession for SmtpWorker {
    async fn attempt(&mut self, job: &Job) -> Attempt {
        let (results, connect_failed) = self.deliver(job).await;
        Attempt {
            results,
            connect_failed,
        }
    }

    async fn close(mut self) {
        if let Some(conn) = self.conn.take() {
            conn.quit().await;
        }
    }
}

/// Why no connection could be made.
enum Unreachable {
    Temporary(String),
    /// A definite DNS answer (no such domain, null MX): bounce.
    Permanent(String),
}

impl SmtpWorker {
    /// Connects to the first host that answers: a literal address; a
    /// bracketed host's addresses; otherwise the domain's MX hosts, best
    /// first, each address in turn (RFC 5321 §5.1), so a dead or refusing
    /// host fails over to the next. Names are resolved by hickory, never
    /// by a blocking getaddrinfo.
    async fn connect_any(
        &self,
        host: &str,
        port: u16,
        bracketed: bool,
    ) -> Result<SmtpConn, Unreachable> {
        let targets: Vec<(String, IpAddr)> = if let Ok(ip) = host.parse::<IpAddr>() {
            vec![(host.to_string(), ip)]
        } else if bracketed {
            let addrs = self
                .dns
                .host_addresses(host)
                .await
                .map_err(|e| Unreachable::Temporary(e.to_string()))?;
            addrs.into_iter().map(|a| (host.to_string(), a)).collect()
        } else {
            match self.dns.mail_hosts(host).await {
                Ok(hosts) => hosts
                    .into_iter()
                    .flat_map(|h| h.addrs.into_iter().map(move |a| (h.name.clone(), a)))
                    .collect(),
                Err(e) if e.is_permanent() => return Err(Unreachable::Permanent(e.to_string())),
                Err(e) => return Err(Unreachable::Temporary(e.to_string())),
            }
        };
        let mut why = String::from("4.4.1 no address to connect to");
        let mut tried = 0;
        for (name, ip) in &targets {
            let addr = SocketAddr::new(*ip, port);
            if self.dead.is_dead(addr) {
                continue;
            }
            tried += 1;
            match self.connect(name, addr).await {
                Ok(conn) => {
                    self.dead.alive(addr);
                    return Ok(conn);
                }
                Err(e) => {
                    crate::log!(self.logger, "smtp", "connect to {name}[{ip}]:{port}: {e}");
                    // Could not connect, or no usable greeting: the host is down.
                    if e.starts_with("4.4.1") || e.starts_with("4.4.0") || e.contains("no greeting")
                    {
                        self.dead.mark(addr);
                    }
                    why = e;
                }
            }
        }
        if tried == 0 && !targets.is_empty() {
            why = format!(
                "4.4.1 all addresses of {host} failed within the last {} s (dead-host cache)",
                self.dead.ttl().as_secs()
            );
        }
        Err(Unreachable::Temporary(why))
    }

    /// Connects at the hop's TLS level; with `may`, a failed handshake is
    /// retried once in plain text (as Postfix does).
    async fn connect(&self, host: &str, addr: SocketAddr) -> Result<SmtpConn, String> {
        let level = self.tls.level(&self.hop.key());
        let conn = match SmtpConn::connect(host, addr, &self.config, &self.tls, level).await {
            Err(why) if level == Level::May && why.starts_with("4.7.5") => {
                crate::log!(self.logger, "smtp", "{why}; trying again without TLS");
                SmtpConn::connect(host, addr, &self.config, &self.tls, Level::None).await?
            }
            other => other?,
        };
        if let Some((text, verified)) = &conn.tls {
            let trust = if *verified { "Verified" } else { "Untrusted" };
            crate::log!(
                self.logger,
                "smtp",
                "{trust} TLS connection established to {}: {text}",
                conn.relay
            );
        }
        Ok(conn)
    }

    /// One delivery attempt; outcomes, and whether connecting failed.
    async fn deliver(&mut self, job: &Job) -> (Vec<(u16, crate::message::status::Outcome)>, bool) {
        let body = match body::load(&self.spool, &job.body, job.body_ref).await {
            Ok(b) => b,
            Err(e) => {
                let why = format!("4.3.0 cannot read queue file: {e}");
                return (defer_all(job, "none", &why), false);
            }
        };
        let hop = self.hop.clone();
        let NextHop::Smtp {
            host,
            port,
            bracketed,
        } = &*hop
        else {
            let why = "4.3.5 no SMTP delivery for this next hop";
            return (defer_all(job, "none", why), false);
        };
        // A cached connection may have been closed by the peer: one retry on a fresh one.
        for _ in 0..2 {
            let reused = self.conn.is_some();
            if self.conn.is_none() {
                match self.connect_any(host, *port, *bracketed).await {
                    Ok(conn) => self.conn = Some(conn),
                    Err(Unreachable::Temporary(why)) => {
                        let relay = format!("{host}:{port}");
                        crate::log!(self.logger, "smtp", "connect to {relay}: {why}");
                        return (defer_all(job, &relay, &why), true);
                    }
                    Err(Unreachable::Permanent(why)) => {
                        return (bounce_all(job, "none", &why), false);
                    }
                }
            }
            let conn = self.conn.as_mut().expect("connected above");
            match conn.transaction(job, &body).await {
                Ok(results) => {
                    if !conn.usable {
                        self.conn = None;
                    }
                    return (results, false);
                }
                Err(TxError::Stale) if reused => {
                    self.conn = None;
                    continue;
                }
                Err(TxError::Stale) => {
                    let relay = conn.relay.clone();
                    self.conn = None;
                    let why = "4.4.2 lost connection before any reply";
                    return (defer_all(job, &relay, why), false);
                }
                Err(TxError::Broken(why)) => {
                    let relay = conn.relay.clone();
                    self.conn = None;
                    return (defer_all(job, &relay, &why), false);
                }
            }
        }
        let why = "4.4.2 connection failed twice";
        (defer_all(job, "none", why), false)
    }
}
