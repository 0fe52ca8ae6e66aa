//! Routing: which next hop a recipient goes to.
//!
//! Lookup order for a recipient domain, like Postfix's transport(5): a
//! local (virtual mailbox) domain goes to the Maildir agent; then the
//! static transport table; then `[transport]`: exact domain, `.parent`
//! entries for each parent domain, `*`; then the sender's default
//! transport (`sender_dependent_default_transport_maps`); then the
//! sender's relayhost (`sender_dependent_relayhost_maps`), then
//! `delivery.relayhost`; then the domain's own mail hosts from DNS (MX,
//! `smtp:domain:25` not bracketed; an address literal goes to that
//! address). A route with a transport and no next hop (`smtp:`, `out2:`)
//! goes to the recipient domain's mail hosts when a transport table gives
//! it, and to the next hop the later steps would choose (the sender's
//! relayhost, `relayhost`, the domain) when the sender's default
//! transport does: Postfix's trivial-rewrite, held to it by
//! `tests/it/sender_routes.rs`.
//!
//! Routing does no I/O: the tables it consults are static and in memory.

pub mod dns;
pub mod domains;
pub mod forward;
pub mod interfaces;
pub mod mailboxes;
pub mod policy;
pub mod senders;
pub mod system;

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
    /// Routes chosen by the envelope sender.
    senders: Arc<senders::SenderRoutes>,
    /// The names `[transports]` defines: a route naming another (a typo
    /// in a table) is deferred, as Postfix defers mail for a transport
    /// master.cf does not have.
    transports: Arc<std::collections::HashSet<String>>,
    /// Those of them that are pipes (`service = "pipe"`): a route naming
    /// one becomes [`NextHop::Pipe`] with the next hop it resolved to.
    pipes: Arc<std::collections::HashSet<String>>,
}

/// Why a recipient has no next hop (it is deferred).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoRoute {
    #[error("no route to destination (an address without a domain)")]
    NoDomain,
    #[error("mail transport unavailable: transport {0:?} is not defined in [transports]")]
    UnknownTransport(String),
    #[error("routing table lookup failed (a sender-dependent table could not answer)")]
    TableFailed,
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
            senders: Default::default(),
            transports: Default::default(),
            pipes: Default::default(),
        }
    }

    /// The named transports (`[transports]`) routes may name.
    pub fn with_transports<'a>(mut self, names: impl Iterator<Item = &'a String>) -> Router {
        self.transports = Arc::new(names.cloned().collect());
        self
    }

    /// The named transports that are pipes.
    pub fn with_pipes<'a>(mut self, names: impl Iterator<Item = &'a String>) -> Router {
        self.pipes = Arc::new(names.cloned().collect());
        self
    }

    /// Routes by sender (`[delivery]`'s sender-dependent maps).
    pub fn with_senders(mut self, senders: senders::SenderRoutes) -> Router {
        self.senders = Arc::new(senders);
        self
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

    /// The next hop for `sender`'s mail to a recipient address, or `None`
    /// if unroutable ([`Router::route_why`] says why).
    pub fn route(&self, sender: &str, address: &str) -> Option<Arc<NextHop>> {
        self.route_why(sender, address).ok()
    }

    /// The next hop for `sender`'s mail to a recipient address, or why
    /// there is none (the recipient is deferred).
    pub fn route_why(&self, sender: &str, address: &str) -> Result<Arc<NextHop>, NoRoute> {
        let hop =
            self.resolve(sender, address)
                .ok_or_else(|| match domain_of(address).is_empty() {
                    true => NoRoute::NoDomain,
                    false => NoRoute::TableFailed,
                })?;
        self.checked(hop)
    }

    /// `hop` as it is sent: a transport it names must be defined (else
    /// the mail waits, as Postfix's for a service master.cf lacks), and a
    /// pipe transport's name gives a pipe hop. Also for the hops that do
    /// not come from routing (an after-queue content filter's).
    pub fn checked(&self, hop: Arc<NextHop>) -> Result<Arc<NextHop>, NoRoute> {
        match hop.transport() {
            Some(t) if !self.transports.contains(&**t) => {
                Err(NoRoute::UnknownTransport(t.to_string()))
            }
            Some(t) if self.pipes.contains(&**t) && !matches!(*hop, NextHop::Pipe { .. }) => {
                Ok(Arc::new(hop.piped(t.clone())))
            }
            _ => Ok(hop),
        }
    }

    fn resolve(&self, sender: &str, address: &str) -> Option<Arc<NextHop>> {
        let domain = domain_of(address).to_ascii_lowercase();
        if self.local.is_system_domain(&domain) {
            return Some(Arc::new(NextHop::System));
        }
        if self.local.is_local_domain(&domain) {
            return Some(self.local_hop.clone());
        }
        let configured = self
            .local
            .transport_for(&domain)
            .or_else(|| self.table_route(&domain));
        match configured {
            // An empty nexthop in the transport table is the recipient
            // domain (relayhost does not apply), as in Postfix.
            Some(hop) => match &*hop {
                NextHop::Inherit { transport } => {
                    let mx = mail_exchanger(&domain, self.mx_port)?;
                    Some(Arc::new((*mx).clone().via(transport.clone())))
                }
                _ => Some(hop),
            },
            None => self.default_route(sender, &domain),
        }
    }

    /// `[transport]`: the domain, its parents (`.parent`), `*`.
    fn table_route(&self, domain: &str) -> Option<Arc<NextHop>> {
        if let Some(hop) = self.table.get(domain) {
            return Some(hop.clone());
        }
        let mut rest = domain;
        while let Some(dot) = rest.find('.') {
            if let Some(hop) = self.table.get(&rest[dot..]) {
                return Some(hop.clone());
            }
            rest = &rest[dot + 1..];
        }
        self.wildcard.clone()
    }

    /// No transport table routes the domain: the sender's default
    /// transport, else `smtp` to the default next hop.
    fn default_route(&self, sender: &str, domain: &str) -> Option<Arc<NextHop>> {
        match self.senders.transport(sender) {
            senders::Lookup::Failed => None,
            senders::Lookup::Hop(NextHop::Inherit { transport }) => {
                self.nexthop(sender, domain, transport)
            }
            senders::Lookup::Hop(hop) => Some(Arc::new(hop)),
            senders::Lookup::Default => self.nexthop(sender, domain, None),
        }
    }

    /// The default next hop (the sender's relayhost, `relayhost`, the
    /// domain's MX hosts), through `transport` if one is named.
    fn nexthop(
        &self,
        sender: &str,
        domain: &str,
        transport: Option<Arc<str>>,
    ) -> Option<Arc<NextHop>> {
        let hop = match self.senders.relayhost(sender) {
            senders::Lookup::Failed => return None,
            senders::Lookup::Hop(hop) => Arc::new(hop),
            senders::Lookup::Default => self
                .relayhost
                .clone()
                .or_else(|| mail_exchanger(domain, self.mx_port))?,
        };
        Some(match transport {
            None => hop,
            via => Arc::new((*hop).clone().via(via)),
        })
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
            transport: None,
        },
        None => NextHop::Smtp {
            host: domain.to_string(),
            port,
            bracketed: false,
            screened: true,
            transport: None,
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
        assert_eq!(
            r.route("", "x@A.example").unwrap().key(),
            "smtp:[10.0.0.1]:25"
        );
        assert_eq!(
            r.route("", "x@deep.sub.b.example").unwrap().key(),
            "discard"
        );
        assert_eq!(
            r.route("", "x@c.example").unwrap().key(),
            "smtp:[10.0.0.9]:25"
        );
        // An empty nexthop in the table: the domain, never the relayhost.
        t.insert("d.example".to_string(), "smtp:".parse().unwrap());
        let r = Router::new(&t, Some(&relayhost), LocalDomains::none());
        assert_eq!(
            r.route("", "x@d.example").unwrap().key(),
            "smtp:d.example:25"
        );
        let dns = Router::new(&BTreeMap::new(), None, LocalDomains::none());
        assert_eq!(
            dns.route("", "x@c.example").unwrap().key(),
            "smtp:c.example:25"
        );
        assert_eq!(
            dns.route("", "x@[192.0.2.1]").unwrap().key(),
            "literal:[192.0.2.1]:25"
        );
        assert_eq!(
            dns.route("", "x@[IPv6:2001:DB8::1]").unwrap().key(),
            "literal:[2001:db8::1]:25"
        );
    }
}
