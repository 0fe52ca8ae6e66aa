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
use super::dane::{host_name, Dane, HostDane};
use super::dead::DeadHosts;
use super::guard::{self, OwnAddrs};
use super::mta_sts::{Mode, MtaSts, Policy};
use super::tls::{ClientTls, Level, TlsChoice};
use crate::config::hop::NextHop;
use crate::config::Config;
use crate::log::Logger;
use crate::message::body;
use crate::message::status::Outcome;
use crate::queue::{
    bounce_all, defer_all, run_worker, Attempt, DeliveryAgent, Feedback, Job, WorkerSession,
    WorkerStart,
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
    /// MTA-STS policies (None: off, or no trust anchors to verify with).
    pub sts: Option<Arc<MtaSts>>,
    /// DANE (None: off).
    pub dane: Option<Arc<Dane>>,
    /// Our listening addresses: a next hop from DNS never leads there.
    pub own: Arc<OwnAddrs>,
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
            sts: self.sts.clone(),
            sts_enforce: false,
            dane: self.dane.clone(),
            dane_secure: false,
            own: self.own.clone(),
            conn: None,
        };
        tokio::spawn(run_worker(worker, start, idle, limit));
    }

    fn flushed(&self) {
        self.dead.clear();
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
    sts: Option<Arc<MtaSts>>,
    /// The hop's MTA-STS policy says enforce: verified TLS only.
    sts_enforce: bool,
    dane: Option<Arc<Dane>>,
    /// The domain's MX RRset is DNSSEC-secure: TLSA records apply.
    dane_secure: bool,
    own: Arc<OwnAddrs>,
    conn: Option<SmtpConn>,
}

impl WorkerSession for SmtpWorker {
    async fn attempt(&mut self, job: &Job) -> Attempt {
        let (results, feedback) = self.deliver(job).await;
        Attempt { results, feedback }
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

/// Hosts tried for one message at most: the first plus this many more
/// after a whole transaction was deferred (Postfix's smtp_mx_address_limit
/// is 5 in all).
const MAX_FAILOVER: usize = 4;

/// Host name and address, in the order to try them.
type Targets = Vec<(String, SocketAddr)>;

impl SmtpWorker {
    /// Where to connect: a literal address; a bracketed host's addresses;
    /// otherwise the domain's MX hosts, best first, each address in turn
    /// (RFC 5321 §5.1). Names are resolved by hickory, never by a blocking
    /// getaddrinfo.
    async fn targets(
        &self,
        host: &str,
        port: u16,
        bracketed: bool,
    ) -> Result<Targets, Unreachable> {
        let at = |ip: IpAddr| SocketAddr::new(ip, port);
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![(host.to_string(), at(ip))]);
        }
        if bracketed {
            let addrs = self
                .dns
                .host_addresses(host)
                .await
                .map_err(|e| Unreachable::Temporary(e.to_string()))?;
            return Ok(addrs
                .into_iter()
                .map(|a| (host.to_string(), at(a)))
                .collect());
        }
        match self.dns.mail_hosts(host).await {
            Ok(hosts) => Ok(hosts
                .into_iter()
                .flat_map(|h| h.addrs.into_iter().map(move |a| (h.name.clone(), at(a))))
                .collect()),
            Err(e) if e.is_permanent() => Err(Unreachable::Permanent(e.to_string())),
            Err(e) => Err(Unreachable::Temporary(e.to_string())),
        }
    }

    /// DANE for one MX host: only when the domain's MX RRset was secure.
    async fn dane_host(&self, host: &str, port: u16) -> Result<HostDane, String> {
        match (&self.dane, self.dane_secure) {
            (Some(dane), true) => dane.host(host, port).await,
            _ => Ok(HostDane::None),
        }
    }

    /// `domain`'s validated MX host names when DANE applies to them (its
    /// MX RRset is DNSSEC-secure); an error when the lookup was bogus or
    /// failed.
    async fn dane_domain(
        &self,
        domain: &str,
        bracketed: bool,
    ) -> Result<Option<Vec<String>>, String> {
        let Some(dane) = &self.dane else {
            return Ok(None);
        };
        if bracketed || domain.parse::<IpAddr>().is_ok() {
            return Ok(None);
        }
        let hosts = dane.secure_mx_hosts(domain).await?;
        if hosts.is_none() {
            crate::log!(
                self.logger,
                "smtp",
                "DANE: MX RRset of {domain} is not DNSSEC-validated: opportunistic TLS"
            );
        }
        Ok(hosts)
    }

    /// Keeps the targets named in `domain`'s validated MX RRset (the
    /// routing lookup does not validate: a forged answer could name a
    /// host without TLSA records); none left: 4.7.5.
    fn keep_validated(
        &self,
        domain: &str,
        targets: Targets,
        validated: &[String],
    ) -> Result<Targets, Unreachable> {
        let (kept, dropped): (Targets, Targets) = targets
            .into_iter()
            .partition(|(name, _)| validated.contains(&host_name(name)));
        if !dropped.is_empty() {
            let names: Vec<&str> = dropped.iter().map(|(n, _)| n.as_str()).collect();
            crate::log!(
                self.logger,
                "smtp",
                "DANE: {} not in its DNSSEC-validated MX RRset of {domain}: not used",
                names.join(", ")
            );
        }
        if kept.is_empty() {
            return Err(Unreachable::Temporary(format!(
                "4.7.5 MX hosts of {domain} are not in its DNSSEC-validated MX RRset"
            )));
        }
        Ok(kept)
    }

    /// The MTA-STS policy of an MX-routed domain, if it has one.
    async fn sts_policy(&self, host: &str, bracketed: bool) -> Option<Arc<Policy>> {
        let sts = self.sts.as_ref()?;
        if bracketed || host.parse::<IpAddr>().is_ok() {
            return None;
        }
        sts.policy(host).await
    }

    /// Applies `domain`'s MTA-STS policy to its targets: `enforce` keeps
    /// the matching MX hosts (none: 4.7.5) and requires verified TLS;
    /// `testing` logs the hosts that would be refused.
    fn apply_sts(
        &mut self,
        domain: &str,
        targets: Targets,
        policy: Option<&Policy>,
    ) -> Result<Targets, String> {
        self.sts_enforce = false;
        let Some(p) = policy else {
            return Ok(targets);
        };
        let (ok, bad): (Targets, Targets) = targets.into_iter().partition(|(n, _)| p.allows(n));
        match p.mode {
            Mode::Enforce if ok.is_empty() => Err(format!(
                "4.7.5 MTA-STS policy of {domain}: no MX host matches its mx patterns"
            )),
            Mode::Enforce => {
                self.sts_enforce = true;
                Ok(ok)
            }
            Mode::Testing | Mode::None => {
                if p.mode == Mode::Testing && !bad.is_empty() {
                    let names: Vec<&str> = bad.iter().map(|(n, _)| n.as_str()).collect();
                    crate::log!(
                        self.logger,
                        "smtp",
                        "MTA-STS testing policy of {domain}: {} would be refused",
                        names.join(", ")
                    );
                }
                Ok(ok.into_iter().chain(bad).collect())
            }
        }
    }

    /// Where to connect for this worker's hop, best first, with its
    /// domain's DANE and MTA-STS policy applied and, for a hop from DNS,
    /// every address screened (`guard.rs`).
    async fn first_targets(&mut self, job: &Job) -> Result<Targets, Unreachable> {
        let hop = self.hop.clone();
        match &*hop {
            NextHop::Smtp {
                host,
                port,
                bracketed,
                screened,
            } => {
                let validated = self.dane_domain(host, *bracketed).await.map_err(|why| {
                    crate::log!(self.logger, "smtp", "{why}");
                    Unreachable::Temporary(why)
                })?;
                self.dane_secure = validated.is_some();
                let policy = self.sts_policy(host, *bracketed).await;
                let mut targets = self.targets(host, *port, *bracketed).await?;
                if let Some(validated) = &validated {
                    targets = self.keep_validated(host, targets, validated)?;
                }
                if *screened {
                    targets = self.screen(host, targets)?;
                }
                self.apply_sts(host, targets, policy.as_deref())
                    .map_err(Unreachable::Temporary)
            }
            NextHop::MxSet { levels, port } => {
                // Rolled-up domains have no DANE or MTA-STS policy of
                // their own (rollup.rs keeps those apart).
                self.dane_secure = false;
                self.sts_enforce = false;
                let targets = self.set_targets(levels, *port).await?;
                let domain = job
                    .rcpts
                    .first()
                    .and_then(|&i| job.envelope.recipients.get(usize::from(i)))
                    .and_then(|r| r.rsplit_once('@'))
                    .map_or("this domain", |(_, d)| d)
                    .to_string();
                self.screen(&domain, targets)
            }
            _ => Err(Unreachable::Temporary(
                "4.3.5 no SMTP delivery for this next hop".into(),
            )),
        }
    }

    /// The addresses of an MX group's hosts, level by level (shuffled
    /// within a level); a host without addresses is skipped.
    async fn set_targets(&self, levels: &[Vec<String>], port: u16) -> Result<Targets, Unreachable> {
        let mut targets = Vec::new();
        let mut why = String::from("4.4.3 no MX host of the group has an address");
        for level in levels {
            let mut names = level.clone();
            crate::routing::dns::shuffle(&mut names);
            for name in names {
                match self.dns.host_addresses(&name).await {
                    Ok(addrs) => targets.extend(
                        addrs
                            .into_iter()
                            .map(|a| (name.clone(), SocketAddr::new(a, port))),
                    ),
                    Err(e) => why = e.to_string(),
                }
            }
        }
        match targets.is_empty() {
            true => Err(Unreachable::Temporary(why)),
            false => Ok(targets),
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
                    crate::log!(
                        self.logger,
                        "smtp",
                        "warning: mail for {domain}: not connecting to MX host {name}[{}]:{}: {why}",
                        addr.ip(),
                        addr.port()
                    );
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

    /// Connects to the first of `targets` that answers, so a dead or
    /// refusing host fails over to the next; returns the connection and
    /// the targets after it (for failover on a deferred transaction).
    async fn connect_first(
        &self,
        targets: &[(String, SocketAddr)],
    ) -> Result<(SmtpConn, Targets), String> {
        let mut why = String::from("4.4.1 no address to connect to");
        let mut tried = 0;
        for (i, (name, addr)) in targets.iter().enumerate() {
            if self.dead.is_dead(*addr) {
                continue;
            }
            tried += 1;
            let dane = match self.dane_host(name, addr.port()).await {
                Ok(d) => d,
                Err(e) => {
                    crate::log!(self.logger, "smtp", "{e}");
                    why = e;
                    continue;
                }
            };
            match self.connect(name, *addr, &dane).await {
                Ok(conn) => {
                    self.dead.alive(*addr);
                    return Ok((conn, targets[i + 1..].to_vec()));
                }
                Err(e) => {
                    crate::log!(
                        self.logger,
                        "smtp",
                        "connect to {name}[{}]:{}: {e}",
                        addr.ip(),
                        addr.port()
                    );
                    // Could not connect, or no usable greeting: the host is down.
                    if e.starts_with("4.4.1") || e.starts_with("4.4.0") || e.contains("no greeting")
                    {
                        self.dead.mark(*addr);
                    }
                    why = e;
                }
            }
        }
        if tried == 0 && !targets.is_empty() {
            why = format!(
                "4.4.1 all addresses failed within the last {} s (dead-host cache)",
                self.dead.ttl().as_secs()
            );
        }
        Err(why)
    }

    /// Connects at the hop's TLS level (DANE, then MTA-STS, then the
    /// configured level); with `may`, a failed handshake is retried once
    /// in plain text (as Postfix does).
    async fn connect(
        &self,
        host: &str,
        addr: SocketAddr,
        dane: &HostDane,
    ) -> Result<SmtpConn, String> {
        let choice = match dane {
            HostDane::Authenticated(connector) => TlsChoice {
                level: Level::Verify,
                connector,
            },
            HostDane::Unusable => self.tls.choice(Level::Encrypt),
            HostDane::None if self.sts_enforce => self.tls.choice(Level::Verify),
            HostDane::None => self.tls.choice(self.tls.level(&self.hop.key())),
        };
        let conn = match SmtpConn::connect(host, addr, &self.config, choice).await {
            Err(why) if choice.level == Level::May && why.starts_with("4.7.5") => {
                crate::log!(self.logger, "smtp", "{why}; trying again without TLS");
                let plain = self.tls.choice(Level::None);
                SmtpConn::connect(host, addr, &self.config, plain).await?
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

    /// One delivery attempt: outcomes, and how the next hop took it.
    async fn deliver(&mut self, job: &Job) -> (Vec<(u16, Outcome)>, Feedback) {
        let body = match body::load(&self.spool, &job.body, job.body_ref).await {
            Ok(b) => b,
            Err(e) => {
                let why = format!("4.3.0 cannot read queue file: {e}");
                return (defer_all(job, "none", &why), Feedback::Ok);
            }
        };
        let relay = match &*self.hop {
            NextHop::Smtp { host, port, .. } => format!("{host}:{port}"),
            other => other.key(),
        };
        let mut rest: Targets = Vec::new();
        let mut failovers = 0;
        let mut retried_stale = false;
        loop {
            let reused = self.conn.is_some();
            if self.conn.is_none() {
                let next = if failovers == 0 {
                    match self.first_targets(job).await {
                        Ok(t) => self.connect_first(&t).await,
                        Err(Unreachable::Permanent(why)) => {
                            return (bounce_all(job, "none", &why), Feedback::Ok)
                        }
                        Err(Unreachable::Temporary(why)) => Err(why),
                    }
                } else {
                    self.connect_first(&rest).await
                };
                match next {
                    Ok((conn, after)) => {
                        self.conn = Some(conn);
                        rest = after;
                    }
                    Err(why) => {
                        crate::log!(self.logger, "smtp", "connect to {relay}: {why}");
                        return (defer_all(job, &relay, &why), Feedback::ConnectFailed);
                    }
                }
            }
            let conn = self.conn.as_mut().expect("connected above");
            let fitted = super::fit::fit(job, &body, &conn.relay, conn.eightbit, conn.smtputf8);
            let sub = match &fitted.narrowed {
                Some(narrowed) => narrowed,
                None if fitted.refused.is_empty() => job,
                None => return (fitted.refused, Feedback::Ok),
            };
            match conn.transaction(sub, &fitted.body).await {
                Ok(mut results) => {
                    if conn.dsn {
                        for (_, o) in results.iter_mut() {
                            if let Outcome::Delivered { notified, .. } = o {
                                *notified = true;
                            }
                        }
                    }
                    results.extend(fitted.refused);
                    let throttled = std::mem::take(&mut conn.throttled);
                    let feedback = if throttled {
                        Feedback::Throttled
                    } else {
                        Feedback::Ok
                    };
                    let all_deferred = results
                        .iter()
                        .all(|(_, o)| matches!(o, Outcome::Deferred { .. }));
                    let peer = conn.relay.clone();
                    if !conn.usable {
                        self.conn = None;
                    }
                    // A 4xx to the whole transaction: the next MX host may
                    // take it (RFC 5321 §5.1); what is known otherwise stands.
                    if all_deferred && !rest.is_empty() && failovers < MAX_FAILOVER {
                        failovers += 1;
                        crate::log!(
                            self.logger,
                            "smtp",
                            "{}: every recipient deferred by {peer}; trying the next host",
                            crate::log::qid(job.msg)
                        );
                        if let Some(conn) = self.conn.take() {
                            conn.quit().await;
                        }
                        continue;
                    }
                    return (results, feedback);
                }
                Err(TxError::Stale) if reused && !retried_stale => {
                    // A cached connection the peer had closed: once more on a fresh one.
                    retried_stale = true;
                    self.conn = None;
                }
                Err(TxError::Stale) => {
                    let relay = conn.relay.clone();
                    self.conn = None;
                    let why = "4.4.2 lost connection before any reply";
                    return (defer_all(job, &relay, why), Feedback::Ok);
                }
                Err(TxError::Broken(why)) => {
                    let relay = conn.relay.clone();
                    self.conn = None;
                    return (defer_all(job, &relay, &why), Feedback::Ok);
                }
            }
        }
    }
}
