//! DNS block- and allowlists at connect, scored like Postfix's postscreen:
//! the client's address is looked up in every list of
//! `smtpd.dnsbl_sites` at once; each list that lists it adds its weight
//! (negative for an allowlist); a score at or over `dnsbl_threshold` is
//! refused with `554 5.7.1` naming the list that weighed most.
//!
//! Trust: the lists' answers are data from servers the operator chose;
//! only `A` answers that match a site's filter count (by default 127/8
//! outside 127.255.255/24, the lists' error codes). The client controls
//! only its address, which becomes a query name of digits or hex nibbles.
//! Invariants: the greeting waits at most `dnsbl_timeout_ms` for the lists
//! (a list that is slow or failing counts as not listing, and that verdict
//! is not cached); verdicts are kept in a bounded cache (moka) for
//! `dnsbl_cache_secs`, so a flood of connections from one address costs
//! one lookup per list, and a flood from many addresses cannot grow memory
//! past the cache's bound.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::dnsbl::DnsblSite;
use crate::config::smtpd::SmtpdConfig;
use crate::routing::dns::Dns;

/// Verdicts kept at most (one per client address).
const CACHE_ENTRIES: u64 = 100_000;

/// What the lists said about one client.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// The sum of the weights of the lists that listed the client.
    pub score: i32,
    /// The zones that listed it, in configuration order.
    pub listed_by: Vec<String>,
    /// The zones that did not answer in time, or failed.
    pub unanswered: Vec<String>,
    /// The zone named in the refusal: the listing one that weighs most.
    pub blocked_by: Option<String>,
}

/// The configured lists, a resolver and the verdict cache.
pub struct Dnsbl {
    sites: Arc<Vec<DnsblSite>>,
    threshold: i32,
    timeout: Duration,
    dns: Arc<Dns>,
    cache: moka::sync::Cache<IpAddr, Arc<Verdict>>,
}

impl Dnsbl {
    /// None when no list is configured.
    pub fn from_config(smtpd: &SmtpdConfig, dns: Arc<Dns>) -> Option<Dnsbl> {
        if smtpd.dnsbl_sites.is_empty() {
            return None;
        }
        let cache = moka::sync::Cache::builder()
            .max_capacity(CACHE_ENTRIES)
            .time_to_live(Duration::from_secs(smtpd.dnsbl_cache_secs.max(1)))
            .build();
        Some(Dnsbl {
            sites: Arc::new(smtpd.dnsbl_sites.clone()),
            threshold: smtpd.dnsbl_threshold,
            timeout: Duration::from_millis(smtpd.dnsbl_timeout_ms.max(1)),
            dns,
            cache,
        })
    }

    /// The lists' verdict on `ip`, from the cache or asked now (every list
    /// at once, within the timeout).
    pub async fn check(&self, ip: IpAddr) -> Arc<Verdict> {
        if let Some(v) = self.cache.get(&ip) {
            return v;
        }
        let mut lookups = tokio::task::JoinSet::new();
        for (i, site) in self.sites.iter().enumerate() {
            let (dns, name) = (self.dns.clone(), query_name(ip, &site.zone));
            let within = self.timeout;
            lookups.spawn(async move { (i, tokio::time::timeout(within, dns.ipv4(&name)).await) });
        }
        let mut answers = vec![None; self.sites.len()];
        while let Some(done) = lookups.join_next().await {
            if let Ok((i, Ok(Ok(addrs)))) = done {
                answers[i] = Some(addrs);
            }
        }
        let verdict = Arc::new(self.score(&answers));
        if verdict.unanswered.is_empty() {
            self.cache.insert(ip, verdict.clone());
        }
        verdict
    }

    /// Whether `verdict` refuses the client.
    pub fn refuses(&self, verdict: &Verdict) -> bool {
        verdict.score >= self.threshold && verdict.blocked_by.is_some()
    }

    /// Adds up the answers (None: no answer from that list).
    fn score(&self, answers: &[Option<Vec<std::net::Ipv4Addr>>]) -> Verdict {
        let mut v = Verdict::default();
        let mut heaviest = 0;
        for (site, answer) in self.sites.iter().zip(answers) {
            let Some(addrs) = answer else {
                v.unanswered.push(site.zone.to_string());
                continue;
            };
            if !addrs.iter().any(|a| site.counts(*a)) {
                continue;
            }
            v.score = v.score.saturating_add(site.weight);
            v.listed_by.push(site.zone.to_string());
            if site.weight > heaviest {
                heaviest = site.weight;
                v.blocked_by = Some(site.zone.to_string());
            }
        }
        v
    }
}

/// `4.3.2.1.zone` for 1.2.3.4; for IPv6 the 32 nibbles, last first.
pub fn query_name(ip: IpAddr, zone: &str) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.{zone}")
        }
        IpAddr::V6(v6) => {
            let mut name = String::with_capacity(64 + zone.len());
            for byte in v6.octets().iter().rev() {
                name.push_str(&format!("{:x}.{:x}.", byte & 0xf, byte >> 4));
            }
            name.push_str(zone);
            name
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_names() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(query_name(v4, "bl.example"), "1.2.0.192.bl.example");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(
            query_name(v6, "bl.example"),
            "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.bl.example"
        );
    }

    fn dnsbl(sites: &[&str], threshold: i32) -> Dnsbl {
        let smtpd = SmtpdConfig {
            dnsbl_sites: sites.iter().map(|s| s.parse().unwrap()).collect(),
            dnsbl_threshold: threshold,
            ..SmtpdConfig::default()
        };
        let dns = Arc::new(Dns::new(&crate::config::DnsConfig::default()).unwrap());
        Dnsbl::from_config(&smtpd, dns).unwrap()
    }

    #[tokio::test]
    async fn weights_add_up_and_allowlists_subtract() {
        let d = dnsbl(&["a.bl*2", "b.bl=127.0.0.4*1", "wl.test*-2"], 2);
        let listed = Some(vec!["127.0.0.2".parse().unwrap()]);
        let none = Some(vec![]);
        let v = d.score(&[listed.clone(), none.clone(), none.clone()]);
        assert_eq!((v.score, v.blocked_by.as_deref()), (2, Some("a.bl")));
        assert!(d.refuses(&v));
        // b.bl's filter wants 127.0.0.4: .2 does not count there.
        let v = d.score(&[none.clone(), listed.clone(), none.clone()]);
        assert_eq!(v.score, 0);
        // Allowlisted too: 2 - 2.
        let v = d.score(&[listed.clone(), none.clone(), listed.clone()]);
        assert_eq!(v.score, 0);
        assert!(!d.refuses(&v));
        // An allowlist alone never refuses, whatever the threshold.
        let low = dnsbl(&["wl.test*-2"], -5);
        assert!(!low.refuses(&low.score(std::slice::from_ref(&listed))));
        // No answer: not listed, and said so.
        let v = d.score(&[None, none.clone(), none]);
        assert_eq!(
            (v.score, v.unanswered.clone()),
            (0, vec!["a.bl".to_string()])
        );
    }
}
