//! MX rollup: domains whose best MX host is the same share one
//! destination (`mx:<host>:<port>`), so the many domains one provider
//! hosts share one concurrency window, one rate limit and one set of
//! connections (a connection to the provider carries mail for any of
//! them), instead of each opening its own.
//!
//! The first job for an MX-routed domain waits while its mail hosts are
//! looked up (off the scheduler's task; the answer comes back as an
//! event); the domain is then mapped to its group for `ROLLUP_TTL`. A
//! lookup that fails leaves the domain on its own, and its worker meets
//! the failure (bounce or deferral) as before.
//!
//! Not rolled up: bracketed next hops and address literals (one host
//! already), domains with their own `tls_policy`, concurrency or rate
//! entry (the administrator named them), and domains that publish an
//! MTA-STS record (their TLS policy is theirs).
//!
//! Invariants: a destination with `resolving` set starts no worker; every
//! lookup spawned ends in exactly one `Event::Resolved`; at most
//! `MAX_ALIASES` mappings are kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::job::Job;
use super::scheduler::Scheduler;
use super::Event;
use crate::config::hop::NextHop;
use crate::routing::dns::Dns;

/// How long a domain stays mapped to its group before it is looked up again.
pub const ROLLUP_TTL: Duration = Duration::from_secs(3600);
/// Domains remembered at most (then the map starts over).
pub const MAX_ALIASES: usize = 100_000;

/// A domain's group, as of `at` (`None`: on its own).
pub(super) struct Alias {
    pub group: Option<Arc<str>>,
    pub at: Instant,
}

#[derive(Default)]
pub(super) struct Rollup {
    pub dns: Option<Arc<Dns>>,
    pub aliases: HashMap<Arc<str>, Alias>,
}

/// The group key for a domain's mail hosts: the alphabetically first of
/// its most preferred hosts (stable, although equal preferences are
/// shuffled), with the port.
pub fn group_key(best_hosts: &[&str], port: u16) -> Option<String> {
    let first = best_hosts.iter().min()?;
    Some(format!("mx:{}:{port}", first.to_ascii_lowercase()))
}

impl Scheduler {
    /// Lets the scheduler look up MX hosts for rollup.
    pub fn set_resolver(&mut self, dns: Arc<Dns>) {
        self.rollup.dns = Some(dns);
    }

    /// Whether `hop` (keyed `key`) is grouped by its MX host.
    fn rolls_up(&self, hop: &NextHop, key: &str) -> bool {
        let d = &self.config.delivery;
        let NextHop::Smtp {
            host, bracketed, ..
        } = hop
        else {
            return false;
        };
        d.mx_rollup
            && self.rollup.dns.is_some()
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
        let now = Instant::now();
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

    fn spawn_lookup(&self, key: Arc<str>, hop: &NextHop) {
        let (Some(dns), NextHop::Smtp { host, port, .. }) = (self.rollup.dns.clone(), hop) else {
            return;
        };
        let (host, port, events) = (host.clone(), *port, self.events.clone());
        let sts = self.config.delivery.mta_sts;
        tokio::spawn(async move {
            let group = match dns.mail_hosts(&host).await {
                // A domain with an MTA-STS record keeps its own
                // destination: its policy is its own, not its provider's.
                Ok(_) if sts && has_sts_record(&dns, &host).await => None,
                Ok(hosts) => {
                    let best = hosts.first().map(|h| h.preference);
                    let names: Vec<&str> = hosts
                        .iter()
                        .filter(|h| Some(h.preference) == best)
                        .map(|h| h.name.as_str())
                        .collect();
                    group_key(&names, port)
                }
                Err(_) => None,
            };
            let _ = events.send(Event::Resolved { dest: key, group }).await;
        });
    }

    /// A domain's mail hosts are known: map it, move its waiting jobs.
    pub(super) fn resolved(&mut self, key: Arc<str>, group: Option<String>) {
        if self.rollup.aliases.len() >= MAX_ALIASES {
            self.rollup.aliases.clear();
        }
        let group: Option<Arc<str>> = group.map(Into::into);
        self.rollup.aliases.insert(
            key.clone(),
            Alias {
                group: group.clone(),
                at: Instant::now(),
            },
        );
        let Some(dest) = self.dests.get_mut(&key) else {
            return;
        };
        dest.resolving = false;
        let Some(group) = group else {
            self.pump(&key);
            return;
        };
        let hop = dest.hop.clone();
        let waiting: Vec<Job> = dest.queue.drain(..).collect();
        let target = self.destination_for(&group, &hop);
        if let Some(g) = self.dests.get_mut(&target) {
            g.queue.extend(waiting);
        }
        self.pump(&target);
    }
}

/// Whether `domain` publishes an MTA-STS record (`_mta-sts` TXT, v=STSv1).
async fn has_sts_record(dns: &Dns, domain: &str) -> bool {
    dns.txt(&format!("_mta-sts.{domain}"))
        .await
        .is_ok_and(|records| records.iter().any(|r| r.starts_with("v=STSv1")))
}
