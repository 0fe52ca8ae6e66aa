//! Routing and relay policy: which next hop a recipient goes to, and who
//! may send to whom.
//!
//! Lookup order for a recipient domain, like Postfix's transport(5):
//! exact domain, then `.parent` entries for each parent domain, then `*`,
//! then `delivery.relayhost`. No match means no route: the recipient is
//! deferred with that reason (MX routing is a later feature).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Where a recipient's mail goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NextHop {
    /// SMTP to `host:port`; `bracketed` mirrors Postfix's `[host]` (no MX lookup).
    Smtp {
        host: String,
        port: u16,
        bracketed: bool,
    },
    /// Accept and drop (logged as delivered).
    Discard,
    /// Local delivery into virtual mailboxes.
    Maildir,
}

impl NextHop {
    /// Parses `smtp:[host]:port`, `smtp:host:port`, `smtp:host`, `discard`.
    pub fn parse(text: &str) -> Option<NextHop> {
        let text = text.trim();
        if text == "discard" || text.starts_with("discard:") {
            return Some(NextHop::Discard);
        }
        if text == "maildir" || text == "local" {
            return Some(NextHop::Maildir);
        }
        let rest = text.strip_prefix("smtp:")?;
        let (host, port, bracketed) = if let Some(inner) = rest.strip_prefix('[') {
            let close = inner.find(']')?;
            let host = &inner[..close];
            let port = match &inner[close + 1..] {
                "" => 25,
                p => p.strip_prefix(':')?.parse().ok()?,
            };
            (host, port, true)
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().ok()?, false),
                None => (rest, 25, false),
            }
        };
        if host.is_empty() || host.contains(char::is_whitespace) {
            return None;
        }
        Some(NextHop::Smtp {
            host: host.to_string(),
            port,
            bracketed,
        })
    }

    /// Canonical name: the destination key for queues and concurrency limits.
    pub fn key(&self) -> String {
        match self {
            NextHop::Smtp {
                host,
                port,
                bracketed: true,
            } => format!("smtp:[{host}]:{port}"),
            NextHop::Smtp { host, port, .. } => format!("smtp:{host}:{port}"),
            NextHop::Discard => "discard".into(),
            NextHop::Maildir => "maildir".into(),
        }
    }
}

/// The routing table, built once from the configuration.
#[derive(Clone)]
pub struct Router {
    /// Local (virtual mailbox) domains, and the static transport table.
    local: Option<Arc<crate::local::Local>>,
    /// Shared by every local recipient, so routing allocates nothing.
    maildir: Arc<NextHop>,
    table: BTreeMap<String, Arc<NextHop>>,
    wildcard: Option<Arc<NextHop>>,
    relayhost: Option<Arc<NextHop>>,
}

impl Router {
    pub fn new(transport: &BTreeMap<String, String>, relayhost: Option<&str>) -> Router {
        Router::with_local(transport, relayhost, None)
    }

    pub fn with_local(
        transport: &BTreeMap<String, String>,
        relayhost: Option<&str>,
        local: Option<Arc<crate::local::Local>>,
    ) -> Router {
        let mut table = BTreeMap::new();
        let mut wildcard = None;
        for (domain, hop) in transport {
            let Some(hop) = NextHop::parse(hop) else {
                continue;
            };
            if domain == "*" {
                wildcard = Some(Arc::new(hop));
            } else {
                table.insert(domain.to_ascii_lowercase(), Arc::new(hop));
            }
        }
        Router {
            local,
            maildir: Arc::new(NextHop::Maildir),
            table,
            wildcard,
            relayhost: relayhost.and_then(NextHop::parse).map(Arc::new),
        }
    }

    /// The next hop for a recipient address, or `None` if unroutable.
    pub fn route(&self, address: &str) -> Option<Arc<NextHop>> {
        let domain = domain_of(address).to_ascii_lowercase();
        if let Some(local) = &self.local {
            if local.is_local_domain(&domain) {
                return Some(self.maildir.clone());
            }
            let routed = local
                .transport_table
                .as_ref()
                .and_then(|t| t.lookup_now(&domain))
                .flatten();
            if let Some(hop) = routed.and_then(|v| v.first().and_then(|h| NextHop::parse(h))) {
                return Some(Arc::new(hop));
            }
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
        self.wildcard.clone().or_else(|| self.relayhost.clone())
    }
}

/// The domain part of an address (empty if there is none).
pub fn domain_of(address: &str) -> &str {
    address.rsplit_once('@').map(|(_, d)| d).unwrap_or("")
}

/// An IPv4 or IPv6 network in CIDR notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, p.parse::<u8>().ok()?),
            None => {
                let a = text.parse::<IpAddr>().ok()?;
                (a, if a.is_ipv4() { 32 } else { 128 })
            }
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Relay policy: mynetworks may send anywhere; others only to relay_domains.
#[derive(Debug, Clone)]
pub struct RelayPolicy {
    mynetworks: Vec<Cidr>,
    relay_domains: Vec<String>,
}

impl RelayPolicy {
    pub fn new(mynetworks: Vec<Cidr>, relay_domains: &[String]) -> RelayPolicy {
        RelayPolicy {
            mynetworks,
            relay_domains: relay_domains
                .iter()
                .map(|d| d.to_ascii_lowercase())
                .collect(),
        }
    }

    pub fn is_trusted(&self, client: IpAddr) -> bool {
        self.mynetworks.iter().any(|n| n.contains(client))
    }

    /// True if `client` may send mail to `recipient`.
    pub fn allows(&self, trusted_client: bool, recipient: &str) -> bool {
        if trusted_client {
            return true;
        }
        let domain = domain_of(recipient).to_ascii_lowercase();
        self.relay_domains
            .iter()
            .any(|d| match d.strip_prefix('.') {
                Some(parent) => domain.ends_with(d.as_str()) || domain == parent,
                None => *d == domain,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_hops_parse() {
        assert_eq!(
            NextHop::parse("smtp:[127.0.0.1]:55225"),
            Some(NextHop::Smtp {
                host: "127.0.0.1".into(),
                port: 55225,
                bracketed: true
            })
        );
        assert_eq!(
            NextHop::parse("smtp:mx.example:2525"),
            Some(NextHop::Smtp {
                host: "mx.example".into(),
                port: 2525,
                bracketed: false
            })
        );
        assert_eq!(
            NextHop::parse("smtp:[::1]").map(|h| h.key()),
            Some("smtp:[::1]:25".into())
        );
        assert_eq!(NextHop::parse("discard"), Some(NextHop::Discard));
        for bad in [
            "",
            "smtp:",
            "smtp:[x",
            "smtp:[x]:port",
            "lmtp:x",
            "smtp:a b",
        ] {
            assert_eq!(NextHop::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn routing_order() {
        let mut t = BTreeMap::new();
        t.insert("a.example".to_string(), "smtp:[10.0.0.1]:25".to_string());
        t.insert(".b.example".to_string(), "discard".to_string());
        let r = Router::new(&t, Some("smtp:[10.0.0.9]:25"));
        assert_eq!(r.route("x@A.example").unwrap().key(), "smtp:[10.0.0.1]:25");
        assert_eq!(r.route("x@deep.sub.b.example").unwrap().key(), "discard");
        assert_eq!(r.route("x@c.example").unwrap().key(), "smtp:[10.0.0.9]:25");
        let none = Router::new(&BTreeMap::new(), None);
        assert!(none.route("x@c.example").is_none());
    }

    #[test]
    fn cidr_and_relay_policy() {
        let lo = Cidr::parse("127.0.0.0/8").unwrap();
        assert!(lo.contains("127.1.2.3".parse().unwrap()));
        assert!(lo.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!lo.contains("10.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        let policy = RelayPolicy::new(vec![lo], &["ours.example".into()]);
        assert!(policy.allows(true, "x@anywhere.example"));
        assert!(policy.allows(false, "x@OURS.example"));
        assert!(!policy.allows(false, "x@anywhere.example"));
    }
}
