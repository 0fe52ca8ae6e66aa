//! The SMTP delivery agent: one worker per outbound connection. It also
//! speaks LMTP to a configured `lmtp:` next hop (e.g. Dovecot): the same
//! session and transaction with LHLO and a reply per recipient, and none
//! of the MX, DANE and MTA-STS steps.
//!
//! Each worker keeps its connection between jobs (the queue's worker loop
//! feeds it jobs for the same next hop), so busy destinations reuse
//! connections: no new TCP and EHLO handshake per message. A cached
//! connection the peer has closed is detected on first use and replaced
//! once.

use std::sync::Arc;
use std::time::Duration;

use sluice_spool::Spool;

use super::auth::{Credentials, SaslClient};
use super::conn::{ConnectError, SmtpConn, TxError};
use super::dane::{Dane, DaneError};
use super::dead::DeadHosts;
use super::guard::OwnAddrs;
use super::mta_sts::MtaSts;
use super::tls::ClientTls;
use crate::config::hop::NextHop;
use crate::config::Config;

mod connect;
pub(super) mod probe;
mod targets;
use crate::log::Logger;
use crate::log::{ConnectFailed, Event, Qid};
use crate::message::body;
use crate::message::status::{Enhanced, Outcome, Relay, Reply};
use crate::queue::{
    bounce_all, defer_all, run_worker, Attempt, DeliveryAgent, Feedback, Job, WorkerSession,
    WorkerStart,
};
use crate::routing::dns::Dns;
use crate::routing::forward::Forwarding;
use std::net::SocketAddr;

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
    /// SRS for forwarded mail (`srs.rs`; None: off).
    pub forwarding: Option<Arc<Forwarding>>,
    /// `smtp_generic_maps` (None: none configured).
    pub generic: Option<Arc<super::generic::Generic>>,
    /// SMTP AUTH to the next hop (None: off).
    pub sasl: Option<Arc<SaslClient>>,
    /// Source addresses and HELO names, per transport.
    pub egress: Arc<super::egress::Egresses>,
}

impl DeliveryAgent for SmtpAgent {
    fn spawn(&self, start: WorkerStart) {
        let d = &self.config.delivery;
        let idle = Duration::from_secs(d.connection_idle_secs.max(1));
        let limit = d.messages_per_connection;
        let worker = SmtpWorker {
            reach: Reach {
                hop: start.hop.clone(),
                config: self.config.clone(),
                logger: self.logger.clone(),
                tls: self
                    .egress
                    .tls(&start.hop)
                    .unwrap_or_else(|| self.tls.clone()),
                dns: self.dns.clone(),
                dead: self.dead.clone(),
                sts: self.sts.clone(),
                sts_enforce: false,
                dane: self.dane.clone(),
                dane_secure: false,
                own: self.own.clone(),
                sasl: self.sasl.clone(),
                sasl_sender: None,
                egress: self.egress.of(&start.hop),
            },
            spool: self.spool.clone(),
            conn: None,
            forwarding: self.forwarding.clone(),
            generic: self.generic.clone(),
        };
        tokio::spawn(run_worker(worker, start, idle, limit));
    }

    fn flushed(&self) {
        self.dead.clear();
    }
}

/// Where and how a next hop is reached: its targets (MX, DANE,
/// MTA-STS, the screen) and connections to them. A delivery worker and an
/// address probe (`probe.rs`) reach a hop the same way.
struct Reach {
    hop: Arc<NextHop>,
    config: Arc<Config>,
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
    sasl: Option<Arc<SaslClient>>,
    /// The job's sender's credentials (sender-dependent AUTH), if any.
    sasl_sender: Option<Arc<Credentials>>,
    /// The hop's transport's sources (`egress.rs`).
    egress: Arc<super::egress::Egress>,
}

struct SmtpWorker {
    reach: Reach,
    spool: Spool,
    conn: Option<SmtpConn>,
    forwarding: Option<Arc<Forwarding>>,
    generic: Option<Arc<super::generic::Generic>>,
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

/// Why no connection was had for a job: the last reason met (each is
/// the deferral text, enhanced status first).
#[derive(Debug, thiserror::Error)]
enum NoConnection {
    #[error("4.4.1 no address to connect to")]
    NoAddress,
    #[error("4.4.1 all addresses failed within the last {0} s (dead-host cache)")]
    AllDead(u64),
    #[error("{0}")]
    Dane(DaneError),
    #[error("{0}")]
    Connect(ConnectError),
    /// Where to connect could not be found (a temporary DNS or policy
    /// failure: its text).
    #[error("{0}")]
    Route(String),
}

impl NoConnection {
    /// The deferral it causes: our own 451 with the status its text
    /// leads with.
    fn reply(&self) -> Reply {
        let status = |d| Enhanced::new(4, 4, d);
        match self {
            NoConnection::NoAddress => Reply::own(451, status(1), "no address to connect to"),
            NoConnection::AllDead(secs) => {
                let text =
                    format!("all addresses failed within the last {secs} s (dead-host cache)");
                Reply::own(451, status(1), text)
            }
            NoConnection::Connect(e) => e.reply(),
            // Texts of DNS, DANE and policy errors, made here, leading
            // with their status: taken apart once, where they become a
            // reply.
            NoConnection::Dane(e) => Reply::parse(&e.to_string(), 451),
            NoConnection::Route(why) => Reply::parse(why, 451),
        }
    }
}

/// Host name and address, in the order to try them.
type Targets = Vec<(String, SocketAddr)>;

/// The job's first recipient's address.
fn first_rcpt(job: &Job) -> Option<&str> {
    job.rcpts
        .first()
        .and_then(|&i| job.envelope.recipients.get(usize::from(i)))
        .map(String::as_str)
}

impl SmtpWorker {
    /// One delivery attempt: outcomes, and how the next hop took it.
    async fn deliver(&mut self, job: &Job) -> (Vec<(u16, Outcome)>, Feedback) {
        let rewritten = match &self.forwarding {
            None => None,
            Some(f) => super::srs::rewrite(f, job, &self.reach.logger),
        };
        let job = rewritten.as_ref().unwrap_or(job);
        let body = match body::load(&self.spool, &job.body, job.body_ref).await {
            Ok(b) => b,
            Err(e) => {
                let text = format!("cannot read queue file: {e}");
                let reply = Reply::own(451, Enhanced::new(4, 3, 0), text);
                return (defer_all(job, &Relay::None, &reply), Feedback::Ok);
            }
        };
        let (mapped, body) = match self.outgoing(job, body).await {
            Ok(out) => out,
            Err(reply) => return (defer_all(job, &Relay::None, &reply), Feedback::Ok),
        };
        let out = mapped.as_ref().unwrap_or(job);
        if let Err(reply) = self.sender_credentials(job).await {
            return (defer_all(job, &Relay::None, &reply), Feedback::Ok);
        }
        let mut rest: Targets = Vec::new();
        let mut sessions = 0;
        let mut retried_stale = false;
        loop {
            let reused = self.conn.is_some();
            if !reused {
                if let Err(failed) = self.open(job, sessions == 0, &mut rest).await {
                    return failed;
                }
            }
            let conn = self.conn.as_mut().expect("connected above");
            let fitted = super::fit::fit(out, &body, &conn.peer, conn.eightbit, conn.smtputf8);
            let sub = match &fitted.narrowed {
                Some(narrowed) => narrowed,
                None if fitted.refused.is_empty() => out,
                None => return (fitted.refused, Feedback::Ok),
            };
            match conn.transaction(sub, &fitted.body).await {
                Ok(mut results) => {
                    sessions += 1;
                    if conn.dsn {
                        for (_, o) in results.iter_mut() {
                            if let Outcome::Delivered { notified, .. } = o {
                                *notified = true;
                            }
                        }
                    }
                    results.extend(fitted.refused);
                    let feedback = match std::mem::take(&mut conn.throttled) {
                        true => Feedback::Throttled,
                        false => Feedback::Ok,
                    };
                    let all_deferred = results
                        .iter()
                        .all(|(_, o)| matches!(o, Outcome::Deferred { .. }));
                    let peer = conn.relay.clone();
                    if !conn.usable {
                        self.conn = None;
                    }
                    if all_deferred
                        && !rest.is_empty()
                        && self.fail_over(job, &peer, sessions).await
                    {
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
                    let relay = conn.peer.clone();
                    self.conn = None;
                    let text = "lost connection before any reply";
                    let why = Reply::own(451, Enhanced::new(4, 4, 2), text);
                    return (defer_all(job, &relay, &why), Feedback::Ok);
                }
                Err(TxError::Broken(why)) => {
                    let relay = conn.peer.clone();
                    self.conn = None;
                    return (defer_all(job, &relay, &why), Feedback::Ok);
                }
            }
        }
    }

    /// Sender-dependent AUTH: the job's sender's credentials for the next
    /// connection; a kept connection authenticated with other ones is
    /// closed (a reused connection is keyed by them). `Err`: the table's
    /// deferral.
    async fn sender_credentials(&mut self, job: &Job) -> Result<(), Reply> {
        let Some(sasl) = &self.reach.sasl else {
            return Ok(());
        };
        let creds = sasl
            .for_sender(&job.envelope.sender)
            .await
            .map_err(|e| e.0)?;
        if self.conn.as_ref().is_some_and(|c| c.sasl_sender != creds) {
            if let Some(conn) = self.conn.take() {
                conn.quit().await;
            }
        }
        self.reach.sasl_sender = creds;
        Ok(())
    }

    /// The job and body as they go out: through `smtp_generic_maps` when
    /// configured, not to an LMTP hop (no copy, no lookup otherwise);
    /// `Err`: the deferral of a table that could not answer.
    async fn outgoing(
        &self,
        job: &Job,
        body: Arc<Vec<u8>>,
    ) -> Result<(Option<Job>, Arc<Vec<u8>>), Reply> {
        match &self.generic {
            Some(g) if !matches!(*self.reach.hop, NextHop::Lmtp(_)) => {
                let m = g.apply(job, &body).await?;
                Ok((m.job, m.body.unwrap_or(body)))
            }
            _ => Ok((None, body)),
        }
    }

    /// Opens a connection for `job`: to the hop's first target that
    /// answers, or (not `first`) to the next of `rest`, the targets after
    /// the host that deferred the transaction. Leaves the targets after
    /// the new connection's in `rest`; on failure, the attempt's outcome.
    async fn open(
        &mut self,
        job: &Job,
        first: bool,
        rest: &mut Targets,
    ) -> Result<(), (Vec<(u16, Outcome)>, Feedback)> {
        let next = if let NextHop::Lmtp(service) = &*self.reach.hop {
            // A configured LMTP server: one address, no MX, no TLS.
            match SmtpConn::connect_lmtp(service, &self.reach.config).await {
                Ok(conn) => Ok((conn, Vec::new())),
                Err(e) => Err(NoConnection::Connect(e)),
            }
        } else if first {
            match self.reach.first_targets(first_rcpt(job)).await {
                Ok(t) => self.reach.connect_first(&t).await,
                Err(Unreachable::Permanent(why)) => {
                    // Our own text, leading with its status: taken apart
                    // once, here, where it becomes a reply.
                    let reply = Reply::parse(&why, 550);
                    return Err((bounce_all(job, &Relay::None, &reply), Feedback::Ok));
                }
                Err(Unreachable::Temporary(why)) => Err(NoConnection::Route(why)),
            }
        } else {
            self.reach.connect_first(rest).await
        };
        match next {
            Ok((conn, after)) => {
                self.conn = Some(conn);
                *rest = after;
                Ok(())
            }
            Err(why) => {
                let relay = Relay::Hop(match &*self.reach.hop {
                    NextHop::Smtp { host, port, .. } => format!("{host}:{port}"),
                    other => other.key(),
                });
                // A host that refused was logged as it was tried (one
                // line per attempt); the others say so here.
                if !matches!(why, NoConnection::Connect(_) | NoConnection::Dane(_))
                    || matches!(*self.reach.hop, NextHop::Lmtp(_))
                {
                    self.reach
                        .logger
                        .emit(&Event::ConnectFailed(ConnectFailed::Job {
                            queue_id: Qid(job.msg),
                            relay: relay.to_string().into(),
                            error: why.to_string().into(),
                        }));
                }
                Err((
                    defer_all(job, &relay, &why.reply()),
                    Feedback::ConnectFailed,
                ))
            }
        }
    }

    /// A 4xx to the whole transaction over session number `sessions`: the
    /// next MX host may take it (RFC 5321 §5.1), unless the attempt has
    /// used `delivery.mx_session_limit` sessions (Postfix's
    /// smtp_mx_session_limit); then what is known stands. Says whether to
    /// try the next host (the connection is then closed).
    async fn fail_over(&mut self, job: &Job, peer: &str, sessions: usize) -> bool {
        let limit = match self.reach.config.delivery.mx_session_limit {
            0 => usize::MAX,
            n => n,
        };
        let qid = Qid(job.msg);
        if sessions >= limit {
            self.reach.logger.emit(&Event::Failover {
                queue_id: qid,
                peer: peer.into(),
                sessions: sessions as u64,
                next: false,
            });
            return false;
        }
        self.reach.logger.emit(&Event::Failover {
            queue_id: qid,
            peer: peer.into(),
            sessions: sessions as u64,
            next: true,
        });
        if let Some(conn) = self.conn.take() {
            conn.quit().await;
        }
        true
    }
}
