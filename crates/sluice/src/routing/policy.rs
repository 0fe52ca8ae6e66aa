//! Relay policy: who may send mail to which domains.
//!
//! Clients in `mynetworks` may relay anywhere; everyone else only to
//! `relay_domains` (and to local domains, which are decided before this).
//! Trust: the client address is the TCP peer (no PROXY protocol yet).

use std::net::IpAddr;

use crate::config::hop::Cidr;
use crate::config::names::DomainPattern;
use crate::message::address::domain_of;

/// Relay policy: mynetworks may send anywhere; others only to relay_domains.
#[derive(Debug, Clone)]
pub struct RelayPolicy {
    mynetworks: Vec<Cidr>,
    relay_domains: Vec<DomainPattern>,
    /// Postfix's parent_domain_matches_subdomains for relay_domains:
    /// `example.com` also matches `sub.example.com`.
    parent_matches: bool,
}

impl RelayPolicy {
    pub fn new(mynetworks: Vec<Cidr>, relay_domains: &[DomainPattern]) -> RelayPolicy {
        RelayPolicy {
            mynetworks,
            relay_domains: relay_domains.to_vec(),
            parent_matches: false,
        }
    }

    /// As Postfix's parent_domain_matches_subdomains (with relay_domains
    /// in it, its default): a domain's parents match it too.
    pub fn with_parent_matches(mut self, on: bool) -> RelayPolicy {
        self.parent_matches = on;
        self
    }

    pub fn is_trusted(&self, client: IpAddr) -> bool {
        self.mynetworks.iter().any(|n| n.contains(client))
    }

    /// True if `client` may send mail to `recipient`.
    pub fn allows(&self, trusted_client: bool, recipient: &str) -> bool {
        trusted_client || self.is_relay_domain(recipient)
    }

    /// True if `recipient` is in `relay_domains`.
    pub fn is_relay_domain(&self, recipient: &str) -> bool {
        let domain = domain_of(recipient).to_ascii_lowercase();
        let domain = domain.strip_suffix('.').unwrap_or(&domain);
        let listed = |d: &str| self.relay_domains.iter().any(|p| p.matches(d));
        if listed(domain) {
            return true;
        }
        self.parent_matches
            && domain
                .match_indices('.')
                .any(|(at, _)| listed(&domain[at + 1..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_policy() {
        let lo = Cidr::parse("127.0.0.0/8").unwrap();
        let policy = RelayPolicy::new(vec![lo], &["ours.example".parse().unwrap()]);
        assert!(policy.is_trusted("127.0.0.2".parse().unwrap()));
        assert!(policy.allows(true, "x@anywhere.example"));
        assert!(policy.allows(false, "x@OURS.example"));
        assert!(!policy.allows(false, "x@anywhere.example"));
        assert!(!policy.allows(false, "x@sub.ours.example"));
        let policy = policy.with_parent_matches(true);
        assert!(policy.allows(false, "x@sub.ours.example"));
        assert!(!policy.allows(false, "x@notours.example"));
    }
}
