//! Routing: which next hop a recipient goes to.
//!
//! Lookup order for a recipient domain, like Postfix's transport(5): a
//! local (virtual mailbox) domain goes to the Maildir agent; then the
//! static transport table; then `[transport]`: exact domain, `.parent`
//! entries for each parent domain, `*`; then `delivery.relayhost`; then
//! the domain's own mail hosts from DNS (MX, `smtp:domain:25` not
//! bracketed; an address literal goes to that address).
//!
//! Routing does no I/O: the tables it consults are static and in memory.

pub mod dns;
pub mod domains;
pub mod forward;
pub mod interfaces;
pub mod mailboxes;
pub mod policy;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::hop::NextHop;
use crate::message::address::domain_of;
pub use domains::{LocalDomains, RoutingError};

/// The routing table, built once from the configuration.
#[derive(Clone)]
pub struct Router {
    /// Local (virtual mailbox) domains, and the static transport table.
    local: Arc<LocalDomains>,
    /// Shared by every local recipient, so routing allocates nothing.
    /// Where local domains' mail goes (`local.transport`).
    local_hop: Arc<NextHop>,
    table: BTreeMap<String, Arc<NextHop>>,
    wildcard: Option<Arc<NextHop>>,
    relayhost: Option<Arc<NextHop>>,
    /// The port of next hops from DNS (25; tests change it).
    mx_port: u16,
}

impl Router {
    /// Builds the router from the configuration's parsed hops; local
    /// domains go to Maildir until [`Router::with_local_transport`].
    pub fn new(
        transport: &BTreeMap<String, NextHop>,
        relayhost: Option<&NextHop>,
        local: Arc<LocalDomains>,
    ) -> Router {
        let mut table = BTreeMap::new();
        let mut wildcard = None;
        for (domain, hop) in transport {
            let hop = Arc::new(hop.clone());
            if domain == "*" {
                wildcard = Some(hop);
            } else {
                table.insert(domain.to_ascii_lowercase(), hop);
            }
        }
        Router {
            local,
            local_hop: Arc::new(NextHop::Maildir),
            table,
            wildcard,
            relayhost: relayhost.cloned().map(Arc::new),
            mx_port: 25,
        }
    }

    /// Local domains' mail goes to `hop` (`local.transport`).
    pub fn with_local_transport(mut self, hop: &NextHop) -> Router {
        self.local_hop = Arc::new(hop.clone());
        self
    }

    /// Next hops from DNS (MX hosts, address literals) on `port`
    /// (`delivery.mx_port`).
    pub fn with_mx_port(mut self, port: u16) -> Router {
        self.mx_port = port;
        self
    }

    /// The next hop for a recipient address, or `None` if unroutable.
    pub fn route(&self, address: &str) -> Option<Arc<NextHop>> {
        let domain = domain_of(address).to_ascii_lowercase();
        if self.local.is_local_domain(&domain) {
            return Some(self.local_hop.clone());
        }
        if let Some(hop) = self.local.transport_for(&domain) {
            return Some(hop);
        }
        if let Some(hop) = self.table.get(&domain) {
            return Some(hop.clone());
        }
        let mut rest = domain.as_str();
        while let Some(dot) = rest.find('.') {
            if let Some(hop) = self.table.get(&rest[dot..]) {
                return Some(hop.clone());
            }
            rest = &rest[dot + 1..];
        }
        self.wildcard
            .clone()
            .or_else(|| self.relayhost.clone())
            .or_else(|| mail_exchanger(&domain, self.mx_port))
    }
}

/// The DNS route: MX hosts of `domain`, or the address of a literal.
fn mail_exchanger(domain: &str, port: u16) -> Option<Arc<NextHop>> {
    if domain.is_empty() {
        return None;
    }
    let hop = match domain.strip_prefix('[').and_then(|d| d.strip_suffix(']')) {
        Some(literal) => NextHop::Smtp {
            // The domain was lower-cased: `[IPv6:…]` arrives as `[ipv6:…]`.
            host: match literal.get(..5) {
                Some(tag) if tag.eq_ignore_ascii_case("ipv6:") => &literal[5..],
                _ => literal,
            }
            .to_string(),
            port,
            bracketed: true,
            screened: true,
        },
        None => NextHop::Smtp {
            host: domain.to_string(),
            port,
            bracketed: false,
            screened: true,
        },
    };
    Some(Arc::new(hop))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_order() {
        let mut t = BTreeMap::new();
        t.insert(
            "a.example".to_string(),
            "smtp:[10.0.0.1]:25".parse().unwrap(),
        );
        t.insert(".b.example".to_string(), NextHop::Discard);
        let relayhost = "smtp:[10.0.0.9]:25".parse().unwrap();
        let r = Router::new(&t, Some(&relayhost), LocalDomains::none());
        assert_eq!(r.route("x@A.example").unwrap().key(), "smtp:[10.0.0.1]:25");
        assert_eq!(r.route("x@deep.sub.b.example").unwrap().key(), "discard");
        assert_eq!(r.route("x@c.example").unwrap().key(), "smtp:[10.0.0.9]:25");
        let dns = Router::new(&BTreeMap::new(), None, LocalDomains::none());
        assert_eq!(dns.route("x@c.example").unwrap().key(), "smtp:c.example:25");
        assert_eq!(
            dns.route("x@[192.0.2.1]").unwrap().key(),
            "literal:[192.0.2.1]:25"
        );
        assert_eq!(
            dns.route("x@[IPv6:2001:DB8::1]").unwrap().key(),
            "literal:[2001:db8::1]:25"
        );
    }
}
