//! An address probe (Postfix's verify(8) probe message, without the
//! message): reach the next hop exactly as a delivery would (the same
//! targets, MX order, screen, dead-host cache, DANE, MTA-STS and TLS
//! level, [`Reach`]), then `EHLO`, `MAIL FROM:<sender>`, `RCPT
//! TO:<address>` and `QUIT`. `DATA` is never sent, so nothing is
//! delivered.
//!
//! Trust: the address is the SMTP client's (an attacker's); the next hop's
//! replies are a remote server's. Invariants: the address is put on the
//! wire only if it holds no control character, space or angle bracket (it
//! cannot add a command of its own); what the next hop says is returned
//! typed ([`ProbeOutcome`]), never interpreted from its words; a 5XX to
//! `MAIL` or `RCPT` is the only "undeliverable", a 2XX to `RCPT` the only
//! "deliverable"; everything else (no connection, a 4XX, a broken
//! session) is a temporary failure. The caller bounds the probe's time.

use std::sync::Arc;

use super::{NoConnection, Reach, Unreachable};
use crate::config::hop::NextHop;
use crate::config::Config;
use crate::deliver::smtp::conn::SmtpConn;
use crate::deliver::smtp::dane::Dane;
use crate::deliver::smtp::dead::DeadHosts;
use crate::deliver::smtp::guard::OwnAddrs;
use crate::deliver::smtp::mta_sts::MtaSts;
use crate::deliver::smtp::tls::ClientTls;
use crate::deliver::smtp::SmtpAgent;
use crate::log::{io_text, Logger};
use crate::message::reply::{Enhanced, Reply};
use crate::routing::dns::Dns;

/// What a probe needs: the SMTP agent's parts, shared with it (its
/// dead-host cache, policies and resolver), without the spool.
#[derive(Clone)]
pub struct Prober {
    pub config: Arc<Config>,
    pub logger: Logger,
    pub tls: Arc<ClientTls>,
    pub dns: Arc<Dns>,
    pub dead: Arc<DeadHosts>,
    pub sts: Option<Arc<MtaSts>>,
    pub dane: Option<Arc<Dane>>,
    pub own: Arc<OwnAddrs>,
    /// SMTP AUTH to the next hop (None: off).
    pub sasl: Option<Arc<crate::deliver::smtp::auth::SaslClient>>,
    /// Source addresses and HELO names (a probe leaves as mail would).
    pub egress: Arc<crate::deliver::smtp::egress::Egresses>,
}

/// The SMTP command a reply answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Command {
    Mail,
    Rcpt,
}

impl Command {
    /// As Postfix says it: `(in reply to RCPT TO command)`.
    pub fn name(self) -> &'static str {
        match self {
            Command::Mail => "MAIL FROM",
            Command::Rcpt => "RCPT TO",
        }
    }
}

/// How a probe ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The next hop accepted `RCPT TO` (or the hop discards).
    Accepted { relay: String },
    /// A permanent refusal: the next hop's 5XX to `MAIL` or `RCPT`
    /// (`command` set), or our own (a domain with no mail host, a loop).
    Refused {
        relay: Option<String>,
        command: Option<Command>,
        reply: Reply,
    },
    /// Nothing definite: no connection, a 4XX, a broken session.
    Failed {
        relay: Option<String>,
        command: Option<Command>,
        reply: Reply,
    },
}

impl SmtpAgent {
    /// A prober sharing this agent's parts.
    pub fn prober(&self) -> Prober {
        Prober {
            config: self.config.clone(),
            logger: self.logger.clone(),
            tls: self.tls.clone(),
            dns: self.dns.clone(),
            dead: self.dead.clone(),
            sts: self.sts.clone(),
            dane: self.dane.clone(),
            own: self.own.clone(),
            sasl: self.sasl.clone(),
            egress: self.egress.clone(),
        }
    }
}

/// Whether `address` may go on the wire in `RCPT TO:<…>` or `MAIL
/// FROM:<…>`: no control character, space or angle bracket.
pub fn wire_safe(address: &str) -> bool {
    !address
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || c == '<' || c == '>')
}

impl Prober {
    /// A prober with parts of its own, built from `config` as the daemon
    /// builds the SMTP agent's (no MTA-STS; DANE if configured).
    pub fn standalone(config: Arc<Config>, logger: Logger) -> Result<Prober, ProberError> {
        let d = &config.delivery;
        let dane = match d.dane {
            true => Some(Arc::new(Dane::new(
                &config.dns,
                config.dns.trust_anchor_file.as_deref(),
            )?)),
            false => None,
        };
        let own = config.all_listeners().iter().map(|l| l.listen).collect();
        Ok(Prober {
            tls: Arc::new(ClientTls::build(d)?),
            dns: Arc::new(Dns::new(&config.dns)?),
            dead: Arc::new(DeadHosts::new(
                std::time::Duration::from_secs(d.dead_host_secs),
                None,
            )),
            sts: None,
            dane,
            own: Arc::new(OwnAddrs::new(own)),
            sasl: None,
            egress: Arc::new(crate::deliver::smtp::egress::Egresses::new(&config)?),
            logger,
            config,
        })
    }

    /// Probes `address` at `hop` with `MAIL FROM:<sender>` (empty: the
    /// null sender). Not for local delivery (answered from the tables).
    pub async fn probe(&self, hop: Arc<NextHop>, sender: &str, address: &str) -> ProbeOutcome {
        let failed = |text: &str| ProbeOutcome::Failed {
            relay: None,
            command: None,
            reply: Reply::own(451, Enhanced::new(4, 3, 5), text),
        };
        if !wire_safe(address) || !wire_safe(sender) {
            return ProbeOutcome::Refused {
                relay: None,
                command: None,
                reply: Reply::own(553, Enhanced::new(5, 1, 3), "bad address syntax"),
            };
        }
        let conn = match &*hop {
            NextHop::Discard => {
                let relay = "discard".to_string();
                return ProbeOutcome::Accepted { relay };
            }
            NextHop::Maildir | NextHop::System => return failed("local delivery is not probed"),
            // Postfix's pipe(8) answers a probe without running the
            // command: deliverable.
            NextHop::Pipe { transport, .. } => {
                let relay = transport.to_string();
                return ProbeOutcome::Accepted { relay };
            }
            // The router resolves it: never a route it returns.
            NextHop::Inherit { .. } => return failed("no next hop"),
            NextHop::Lmtp(service) => SmtpConn::connect_lmtp(service, &self.config)
                .await
                .map_err(|e| NoConnection::Connect(e).into()),
            NextHop::Smtp { .. } | NextHop::MxSet { .. } => self.connect(hop, address).await,
        };
        match conn {
            Ok(conn) => session(conn, sender, address).await,
            Err(Unreached::Permanent(why)) => ProbeOutcome::Refused {
                relay: None,
                command: None,
                reply: Reply::parse(&why, 550),
            },
            Err(Unreached::Temporary(why)) => ProbeOutcome::Failed {
                relay: None,
                command: None,
                reply: why.reply(),
            },
        }
    }

    /// Connects to the hop's first target that answers, as a delivery
    /// worker does.
    async fn connect(&self, hop: Arc<NextHop>, address: &str) -> Result<SmtpConn, Unreached> {
        let mut reach = Reach {
            egress: self.egress.of(&hop),
            tls: self.egress.tls(&hop).unwrap_or_else(|| self.tls.clone()),
            hop,
            config: self.config.clone(),
            logger: self.logger.clone(),
            dns: self.dns.clone(),
            dead: self.dead.clone(),
            sts: self.sts.clone(),
            sts_enforce: false,
            dane: self.dane.clone(),
            dane_secure: false,
            own: self.own.clone(),
            sasl: self.sasl.clone(),
            sasl_sender: None,
        };
        match reach.first_targets(Some(address)).await {
            Ok(targets) => Ok(reach.connect_first(&targets).await?.0),
            Err(Unreachable::Permanent(why)) => Err(Unreached::Permanent(why)),
            Err(Unreachable::Temporary(why)) => Err(NoConnection::Route(why).into()),
        }
    }
}

/// Why no session was had.
enum Unreached {
    /// Our own text, leading with its status (a definite DNS answer, a loop).
    Permanent(String),
    Temporary(NoConnection),
}

impl From<NoConnection> for Unreached {
    fn from(why: NoConnection) -> Unreached {
        Unreached::Temporary(why)
    }
}

/// Why a standalone prober could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ProberError {
    #[error(transparent)]
    Tls(#[from] crate::pki::TlsError),
    #[error(transparent)]
    Resolver(#[from] crate::routing::dns::ResolverError),
}

/// `MAIL`, `RCPT`, `QUIT` on an open connection.
async fn session(mut conn: SmtpConn, sender: &str, address: &str) -> ProbeOutcome {
    let relay = Some(conn.relay.clone());
    let utf8 = !address.is_ascii() || !sender.is_ascii();
    let param = if utf8 && conn.smtputf8 {
        " SMTPUTF8"
    } else {
        ""
    };
    let steps = [
        (Command::Mail, format!("MAIL FROM:<{sender}>{param}\r\n")),
        (Command::Rcpt, format!("RCPT TO:<{address}>\r\n")),
    ];
    for (command, line) in steps {
        let reply = match conn.send(line.as_bytes()).await {
            Ok(()) => conn.read_reply().await,
            Err(e) => Err(e),
        };
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                let text = format!("lost connection with {}: {}", conn.relay, io_text(&e));
                return ProbeOutcome::Failed {
                    relay,
                    command: Some(command),
                    reply: Reply::own(451, Enhanced::new(4, 4, 2), text),
                };
            }
        };
        let outcome = match reply.class() {
            2 => None,
            5 => Some(ProbeOutcome::Refused {
                relay: relay.clone(),
                command: Some(command),
                reply,
            }),
            _ => Some(ProbeOutcome::Failed {
                relay: relay.clone(),
                command: Some(command),
                reply,
            }),
        };
        if let Some(outcome) = outcome {
            conn.quit().await;
            return outcome;
        }
    }
    let relay = conn.relay.clone();
    conn.quit().await;
    ProbeOutcome::Accepted { relay }
}

#[cfg(test)]
mod tests {
    use super::wire_safe;

    #[test]
    fn only_plain_addresses_go_on_the_wire() {
        assert!(wire_safe("user@example.com"));
        assert!(wire_safe("üser@exämple.com"));
        assert!(wire_safe(""));
        for bad in ["a@b\r\nDATA", "a b@c", "a>@b", "<a@b", "a@b\t", "a\u{7f}@b"] {
            assert!(!wire_safe(bad), "{bad:?}");
        }
    }
}
