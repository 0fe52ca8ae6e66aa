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
}

impl RelayPolicy {
    pub fn new(mynetworks: Vec<Cidr>, relay_domains: &[DomainPattern]) -> RelayPolicy {
        RelayPolicy {
            mynetworks,
            relay_domains: relay_domains.to_vec(),
        }
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
        self.relay_domains.iter().any(|d| d.matches(domain))
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
    }
}
