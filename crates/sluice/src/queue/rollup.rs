//! MX rollup: domains whose mail hosts are the same share one
//! destination, so the many domains one provider hosts share one
//! concurrency window, one rate limit and one set of connections (a
//! connection to the provider carries mail for any of them), instead of
//! each opening its own.
//!
//! The first job for an MX-routed domain waits while its mail hosts are
//! looked up (by the driver, `lookup` below: the core asks with
//! `Action::Resolve` and the answer comes back as `Input::Resolved`); the domain is then mapped to its group for `ROLLUP_TTL`. A
//! lookup that fails leaves the domain on its own, and its worker meets
//! the failure (bounce or deferral) as before.
//!
//! Trust: MX answers are the zone owner's, so a group is the whole host
//! set and nothing else (security review H1): its key is every MX host by
//! preference level and the port, and its next hop is that host set
//! ([`NextHop::MxSet`]), never a member domain. A worker of the group
//! connects only to those hosts, so no member's later DNS answer (a new
//! MX, a null MX) changes where another member's mail goes or what
//! happens to it. Only domains with no policy of their own are grouped:
//! not configured next hops, bracketed hops and literals, domains with
//! their own `tls_policy`, concurrency or rate entry, domains publishing
//! MTA-STS, and (with DANE on) domains whose MX RRset is DNSSEC-signed;
//! so every member's effective policy is the group's default one.
//!
//! Invariants: a destination with `resolving` set starts no worker; every
//! lookup asked for ends in exactly one `Input::Resolved`; at most
//! `MAX_ALIASES` mappings are kept; a lookup resolves at most
//! `MAX_GROUP_HOSTS` MX hosts (a domain with more stays on its own).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::core::Alias;
use super::dispatch::QueueCore;
use super::job::Job;
use super::step::Action;
use crate::config::hop::NextHop;
use crate::routing::dns::{Dns, DnsError, Exchangers, MailHost};

/// Whether a domain's MX RRset is DNSSEC-secure (DANE applies to it);
/// an error counts as secure (the domain is then kept on its own).
pub type SecureMx = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// How long a domain stays mapped to its group before it is looked up again.
pub const ROLLUP_TTL: Duration = Duration::from_secs(300);
/// Domains remembered at most (then the map starts over).
pub const MAX_ALIASES: usize = 100_000;
/// A domain with more MX hosts stays on its own (its worker looks up only
/// the hosts it tries, `delivery.mx_address_limit`), so a hostile zone
/// never makes the rollup look up hundreds of names.
pub const MAX_GROUP_HOSTS: usize = 16;

/// The group hop for a domain's mail hosts: every host, by preference
/// level, names lowercased and sorted within a level (stable, although
/// equal preferences are shuffled), with the port.
pub fn group_hop(hosts: &[(u16, &str)], port: u16) -> Option<NextHop> {
    let mut sorted: Vec<(u16, String)> = hosts
        .iter()
        .map(|(p, n)| (*p, n.trim_end_matches('.').to_ascii_lowercase()))
        .collect();
    sorted.sort();
    sorted.dedup();
    let mut levels: Vec<(u16, Vec<String>)> = Vec::new();
    for (p, name) in sorted {
        match levels.last_mut() {
            Some((lp, names)) if *lp == p => names.push(name),
            _ => levels.push((p, vec![name])),
        }
    }
    (!levels.is_empty()).then(|| NextHop::MxSet {
        levels: levels.into_iter().map(|(_, l)| l).collect(),
        port,
    })
}

impl QueueCore {
    /// Whether `hop` (keyed `key`) is grouped by its MX host.
    fn rolls_up(&self, hop: &NextHop, key: &str) -> bool {
        let d = &self.config.delivery;
        let NextHop::Smtp {
            host,
            bracketed,
            screened,
            transport,
            ..
        } = hop
        else {
            return false;
        };
        // A named transport has its own egress: its mail is not pooled
        // with the provider's other mail.
        d.mx_rollup
            && transport.is_none()
            && self.rollup.resolves
            && *screened
            && !*bracketed
            && host.parse::<std::net::IpAddr>().is_err()
            && !d.tls_policy.contains_key(key)
            && !d.destination_concurrency.contains_key(key)
            && !d.destination_rate_limit.contains_key(key)
    }

    /// The destination key a job for `hop` goes to: its group's, or its
    /// own; `None` when the job was queued on its own destination to
    /// wait while the domain's mail hosts are looked up.
    pub(super) fn route_rollup(&mut self, hop: &Arc<NextHop>, job: Job) -> Option<(Arc<str>, Job)> {
        let key: Arc<str> = hop.key().into();
        if !self.rolls_up(hop, &key) {
            return Some((key, job));
        }
        let now = self.clock.at;
        match self.rollup.aliases.get(&key) {
            Some(a) if now.duration_since(a.at) < ROLLUP_TTL => {
                return Some((a.group.clone().unwrap_or(key), job));
            }
            _ => {}
        }
        let own = self.destination_for(&key, hop);
        let dest = self.dests.get_mut(&own).expect("destination just made");
        dest.queue.push_back(job);
        if !dest.resolving {
            dest.resolving = true;
            self.spawn_lookup(key, hop);
        }
        None
    }

    fn spawn_lookup(&mut self, key: Arc<str>, hop: &NextHop) {
        if let NextHop::Smtp { host, port, .. } = hop {
            let (host, port) = (host.clone(), *port);
            self.out.push(Action::Resolve {
                dest: key,
                host,
                port,
            });
        }
    }

    /// A domain's mail hosts are known: map it, move its waiting jobs.
    pub(super) fn resolved(&mut self, key: Arc<str>, group: Option<Arc<NextHop>>) {
        if self.rollup.aliases.len() >= MAX_ALIASES {
            self.rollup.aliases.clear();
        }
        let group_key: Option<Arc<str>> = group.as_ref().map(|g| g.key().into());
        self.rollup.aliases.insert(
            key.clone(),
            Alias {
                group: group_key.clone(),
                at: self.clock.at,
            },
        );
        let Some(dest) = self.dests.get_mut(&key) else {
            return;
        };
        dest.resolving = false;
        let (Some(group), Some(group_key)) = (group, group_key) else {
            self.pump(&key);
            return;
        };
        let waiting: Vec<Job> = dest.queue.drain(..).collect();
        let target = self.destination_for(&group_key, &group);
        if let Some(g) = self.dests.get_mut(&target) {
            g.queue.extend(waiting);
        }
        self.pump(&target);
    }
}

/// The driver's side of a rollup lookup: the group hop of `host`'s mail
/// hosts, or `None` when the domain stays on its own (a domain with an
/// MTA-STS record or a signed MX RRset keeps its own destination: its
/// policy is its own, not its provider's; a failed lookup likewise).
pub async fn lookup(
    dns: &Dns,
    secure_mx: Option<&SecureMx>,
    sts: bool,
    host: &str,
    port: u16,
) -> Option<Arc<NextHop>> {
    match group_hosts(dns, host).await {
        Ok(_) if sts && has_sts_record(dns, host).await => None,
        Ok(_) if dane_applies(secure_mx, host).await => None,
        Ok(hosts) => {
            let names: Vec<(u16, &str)> = hosts
                .iter()
                .map(|h| (h.preference, h.name.as_str()))
                .collect();
            group_hop(&names, port).map(Arc::new)
        }
        Err(_) => None,
    }
}

/// Whether DANE is on and `domain`'s MX RRset is signed (or its status
/// unknown).
async fn dane_applies(secure_mx: Option<&SecureMx>, domain: &str) -> bool {
    match secure_mx {
        Some(check) => check(domain.to_string()).await,
        None => false,
    }
}

/// `domain`'s mail hosts, every one looked up, for its group's key; an
/// error (the domain stays on its own) for more than [`MAX_GROUP_HOSTS`]
/// MX hosts, which are not looked up.
async fn group_hosts(dns: &Dns, domain: &str) -> Result<Vec<MailHost>, DnsError> {
    match dns.exchangers(domain).await? {
        Exchangers::Mx(mx) if mx.len() > MAX_GROUP_HOSTS => Err(DnsError::Temporary(
            domain.into(),
            format!("{} MX hosts, too many to group", mx.len()),
        )),
        Exchangers::Mx(_) => dns.mail_hosts(domain).await,
        Exchangers::Implicit(host) => Ok(vec![host]),
    }
}

/// Whether `domain` publishes an MTA-STS record (`_mta-sts` TXT, v=STSv1).
async fn has_sts_record(dns: &Dns, domain: &str) -> bool {
    dns.txt(&format!("_mta-sts.{domain}"))
        .await
        .is_ok_and(|records| records.iter().any(|r| r.starts_with("v=STSv1")))
}
