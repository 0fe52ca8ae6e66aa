//! `sluice address ADDRESS` (and `sendmail -bv`): where an address goes,
//! without sending mail, as Postfix's `sendmail -bv` and `postmap -q`
//! together answer it: its canonical form, whether RCPT takes it and
//! from whom (or refuses it, with the reply and the table that decides),
//! the alias members it expands to, and each one's next hop: a Maildir,
//! an LMTP server, a configured relay or the domain's MX hosts, with the
//! outbound TLS level. `sluice lookup TABLE KEY` is `postmap -q`.
//!
//! It builds the tables and routes as `serve` does (`daemon::routing`)
//! and asks them the questions a session would. What depends on the
//! client (DNSBLs, policy services, milters, rate limits) is not
//! evaluated, and the report says so. Trust: the configuration and the
//! address are the operator's; tables are read, never written; an LDAP
//! table is queried once, as the daemon would.

use std::path::PathBuf;

use serde::Serialize;

use crate::config::hop::NextHop;
use crate::config::Config;
use crate::daemon::BuildError;
use crate::routing::mailboxes::{Resolution, VirtualMailboxes};
use crate::routing::policy::RelayPolicy;
use crate::routing::Router;
use crate::tables::{LookupError, Table};

/// Where one address goes.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The address as given.
    pub address: String,
    /// What RCPT TO answers, and to whom.
    pub rcpt: Rcpt,
    /// Each address the mail is delivered to (the address itself, or
    /// its alias members), with its route.
    pub deliveries: Vec<Delivery>,
    /// What this report does not evaluate.
    pub not_evaluated: &'static str,
}

/// RCPT's answer for the address.
#[derive(Debug, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Rcpt {
    /// A local domain's mailbox or alias: accepted from any client.
    Local { domain: String, aliased: bool },
    /// Accepted and thrown away (an alias to `discard`).
    Discarded,
    /// A `relay_domains` domain: accepted from any client.
    RelayDomain { domain: String },
    /// Any other domain: relayed for mynetworks and authenticated
    /// clients; `refused` is what others get.
    RelayOnly { refused: String },
    /// Refused from everyone.
    Refused { reply: String, by: String },
    /// A table could not answer: the client is asked to retry.
    TryLater { reply: String, error: String },
}

/// One delivery: the address and where it goes.
#[derive(Debug, Serialize)]
pub struct Delivery {
    pub to: String,
    /// The next hop's key (`maildir`, `smtp:[host]:port`, `lmtp:…`).
    pub next_hop: String,
    /// In words: `Maildir /var/mail/…`, `MX hosts of example.com`, …
    pub via: String,
    /// The Maildir, for a local mailbox.
    pub mailbox: Option<PathBuf>,
    /// The outbound TLS level (`delivery.tls_security_level`,
    /// `[delivery.tls_policy]`), for SMTP.
    pub tls: Option<String>,
}

const NOT_EVALUATED: &str = "client-dependent checks (DNSBLs, policy services, milters, \
                             rate limits) and MTA-STS/DANE, which are looked up at delivery";

/// Answers for `address` under `config`.
pub async fn explain(config: &Config, address: &str) -> Result<Report, BuildError> {
    let (mailboxes, router) = crate::daemon::routing(config)?;
    let policy = RelayPolicy::new(config.mynetworks(), &config.smtpd.relay_domains)
        .with_parent_matches(config.restrictions.parent_domain_matches_subdomains);
    let address = canonical(address);
    let (rcpt, targets) = decide(&mailboxes, &policy, &address).await;
    let mut deliveries = Vec::new();
    for to in targets {
        deliveries.push(route(config, &mailboxes, &router, &to).await);
    }
    Ok(Report {
        address,
        rcpt,
        deliveries,
        not_evaluated: NOT_EVALUATED,
    })
}

/// The address with its domain in lower case (local parts keep their
/// case, as SMTP says; tables fold it).
fn canonical(address: &str) -> String {
    let address = address.trim().trim_start_matches('<').trim_end_matches('>');
    match address.rsplit_once('@') {
        Some((local, domain)) => format!("{local}@{}", domain.to_ascii_lowercase()),
        None => address.to_string(),
    }
}

/// RCPT's decision and the addresses delivered to, as a session decides
/// them (`receive/smtp/commands.rs`, `recipient`).
async fn decide(
    mailboxes: &VirtualMailboxes,
    policy: &RelayPolicy,
    address: &str,
) -> (Rcpt, Vec<String>) {
    let domain = crate::message::address::domain_of(address).to_string();
    let later = |error: LookupError| {
        let reply = format!("451 4.3.0 <{address}>: Temporary lookup failure");
        (
            Rcpt::TryLater {
                reply,
                error: error.to_string(),
            },
            Vec::new(),
        )
    };
    let unknown = |table: &str| {
        let reply =
            format!("550 5.1.1 <{address}>: Recipient address rejected: User unknown in {table}");
        let by = format!("{table} ({})", which_table(table));
        (Rcpt::Refused { reply, by }, Vec::new())
    };
    match mailboxes.resolve(address).await {
        Err(e) => later(e),
        Ok(Resolution::Unknown) => unknown("virtual mailbox table"),
        Ok(Resolution::Discard) => (Rcpt::Discarded, Vec::new()),
        Ok(Resolution::Accept(targets)) => {
            let aliased = targets.len() != 1 || !targets[0].eq_ignore_ascii_case(address);
            (Rcpt::Local { domain, aliased }, targets)
        }
        Ok(Resolution::NotLocal) if policy.is_relay_domain(address) => {
            match mailboxes.relay_recipient_known(address).await {
                Err(e) => later(e),
                Ok(false) => unknown("relay recipient table"),
                Ok(true) => (Rcpt::RelayDomain { domain }, vec![address.to_string()]),
            }
        }
        Ok(Resolution::NotLocal) => {
            let refused = format!("554 5.7.1 <{address}>: Relay access denied");
            (Rcpt::RelayOnly { refused }, vec![address.to_string()])
        }
    }
}

fn which_table(table: &str) -> &'static str {
    match table {
        "relay recipient table" => "smtpd.relay_recipient_table",
        _ => "local.mailbox_table",
    }
}

/// The route of one delivered address.
async fn route(
    config: &Config,
    mailboxes: &VirtualMailboxes,
    router: &Router,
    to: &str,
) -> Delivery {
    // The null sender: `sluice address` asks where mail to an address
    // goes, and sender-dependent routes answer for `<>`.
    let hop = router.route("", to);
    let next_hop = hop
        .as_deref()
        .map(NextHop::key)
        .unwrap_or_else(|| "none".into());
    let mut delivery = Delivery {
        to: to.to_string(),
        next_hop,
        via: String::new(),
        mailbox: None,
        tls: None,
    };
    let Some(hop) = hop else {
        delivery.via = "no route (an empty domain)".into();
        return delivery;
    };
    delivery.via = match &*hop {
        NextHop::Maildir => match mailboxes.maildir_of(to).await {
            Ok(Some(dir)) => {
                let via = format!("Maildir {}", dir.display());
                delivery.mailbox = Some(dir);
                via
            }
            Ok(None) => "Maildir: no such mailbox".into(),
            Err(e) => format!("Maildir: table lookup failed ({e})"),
        },
        NextHop::System => "local(8) delivery to a system user ([system] mydestination)".into(),
        NextHop::Lmtp(service) => format!("LMTP to {service} (local.transport)"),
        NextHop::Discard => "discarded (a discard route)".into(),
        NextHop::Pipe { transport, nexthop } => {
            format!("a command: pipe transport {transport} (next hop {nexthop})")
        }
        NextHop::Smtp {
            screened: true,
            bracketed: false,
            host,
            port,
            ..
        } => {
            format!("SMTP to the MX hosts of {host} (DNS), port {port}")
        }
        NextHop::Smtp {
            screened: true,
            host,
            port,
            ..
        } => {
            format!("SMTP to the address literal [{host}]:{port}")
        }
        NextHop::Smtp {
            bracketed: true,
            host,
            port,
            ..
        } => {
            format!("SMTP to {host} port {port}, no MX lookup (configured route)")
        }
        NextHop::Smtp { host, port, .. } => {
            format!("SMTP to the MX hosts of {host}, port {port} (configured route)")
        }
        NextHop::MxSet { .. } => "SMTP to a shared set of MX hosts".into(),
        // The router resolves these; never a route it returns.
        NextHop::Inherit { .. } => "the default route".into(),
    };
    if let Some(t) = hop.transport() {
        delivery.via = format!("{}, through transport {t}", delivery.via);
    }
    if matches!(&*hop, NextHop::Smtp { .. } | NextHop::MxSet { .. }) {
        let level = config
            .delivery
            .tls_policy
            .get(&hop.key())
            .copied()
            .unwrap_or(config.delivery.tls_security_level);
        delivery.tls = serde_json::to_value(level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string));
    }
    delivery
}

/// The report in lines for people.
pub fn text(r: &Report) -> String {
    let mut out = format!("address: {}\n", r.address);
    let line = match &r.rcpt {
        Rcpt::Local {
            domain,
            aliased: false,
        } => {
            format!("rcpt: accepted from any client (local domain {domain})")
        }
        Rcpt::Local {
            domain,
            aliased: true,
        } => format!(
            "rcpt: accepted from any client (local domain {domain}); an alias of {} address(es)",
            r.deliveries.len()
        ),
        Rcpt::Discarded => "rcpt: accepted from any client and discarded (alias)".into(),
        Rcpt::RelayDomain { domain } => {
            format!("rcpt: accepted from any client (relay domain {domain})")
        }
        Rcpt::RelayOnly { refused } => {
            format!("rcpt: relayed for mynetworks and authenticated clients; others get: {refused}")
        }
        Rcpt::Refused { reply, by } => format!("rcpt: refused: {reply} (by {by})"),
        Rcpt::TryLater { reply, error } => format!("rcpt: try later: {reply} ({error})"),
    };
    out.push_str(&line);
    out.push('\n');
    for d in &r.deliveries {
        out.push_str(&format!("deliver: <{}> via {}", d.to, d.via));
        if let Some(tls) = &d.tls {
            out.push_str(&format!(", TLS {tls}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("not evaluated: {}\n", r.not_evaluated));
    out
}

/// Why `sluice lookup` found nothing.
#[derive(Debug, thiserror::Error)]
pub enum LookupCliError {
    #[error("no table named {0:?} in [tables]")]
    NoTable(String),
    #[error(transparent)]
    Build(#[from] crate::tables::TableError),
    #[error(transparent)]
    Spec(#[from] crate::tables::spec::SpecError),
    #[error("{0}")]
    TryLater(LookupError),
}

/// `sluice lookup TABLE KEY`: the answer (Postfix's string, as `postmap
/// -q` prints it), or None when the key is absent. TABLE is a `[tables]`
/// name or a Postfix `type:name` (`pcre:/etc/postfix/checks.pcre`), so a
/// file can be asked without a configuration naming it.
pub async fn lookup(
    config: &Config,
    table: &str,
    key: &str,
) -> Result<Option<String>, LookupCliError> {
    let settings = match config.tables.get(table) {
        Some(settings) => settings.clone(),
        None if table.contains(':') => crate::tables::spec::parse(table)?,
        None => return Err(LookupCliError::NoTable(table.to_string())),
    };
    let logger = crate::log::Logger::disabled();
    let built = Table::build_in(table, &settings, &config.tables, &logger)?;
    let found = built.lookup(key).await.map_err(LookupCliError::TryLater)?;
    Ok(found.map(|answer| answer.raw().to_string()))
}
