//! Value types parsed from the configuration: next hops and networks.
//!
//! They sit with the configuration (the bottom of the tree) so that
//! config, routing and the queue share one parser and nothing is parsed
//! twice. Invariant: a `NextHop`'s `key()` is its canonical text, used as
//! the destination key for queues and concurrency limits.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::services::ServiceAddr;

/// Where a recipient's mail goes. In the configuration (`transport`,
/// `delivery.relayhost`) it is parsed when the file is read: a bad one
/// fails `check-config` with its line, and nothing parses it again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum NextHop {
    /// SMTP to `host:port`; `bracketed` mirrors Postfix's `[host]` (no MX lookup).
    Smtp {
        host: String,
        port: u16,
        bracketed: bool,
        /// From the recipient's domain (its MX hosts, or an address
        /// literal), not from the configuration: every address it leads
        /// to is screened (`smtp/client/guard.rs`). Configured hops are
        /// the administrator's and may point anywhere.
        screened: bool,
        /// A named transport of `[transports]` (`out2:[host]:port`, as
        /// master.cf's `smtp` services with `-o` overrides): its egress
        /// address, HELO name and certificate. None: the default `smtp`.
        transport: Option<Arc<str>>,
    },
    /// A transport with no next hop (`smtp:`, `out2:`): the next hop
    /// routing would choose without it (relayhost, else the recipient
    /// domain's MX hosts), delivered through that transport, as an empty
    /// nexthop in Postfix's transport(5). Resolved by the router; never a
    /// queue's destination.
    Inherit { transport: Option<Arc<str>> },
    /// MX rollup: the mail hosts several domains share, by preference
    /// level (best first), each level's names sorted. Always screened.
    MxSet { levels: Vec<Vec<String>>, port: u16 },
    /// A pipe transport of `[transports]` (`service = "pipe"`, Postfix's
    /// pipe(8)) and its next hop (`${nexthop}`: the text after `NAME:`,
    /// else the recipient domain). Made by the router from a route
    /// naming that transport; a queue per transport and next hop.
    Pipe {
        transport: Arc<str>,
        nexthop: String,
    },
    /// Accept and drop (logged as delivered).
    Discard,
    /// Local delivery into virtual mailboxes.
    Maildir,
    /// Local delivery to system accounts (`[system]`, Postfix's local(8)):
    /// aliases, `.forward`, mailboxes. Routed for `mydestination` only.
    System,
    /// LMTP (RFC 2033) to a mailbox server, e.g. Dovecot: `lmtp:unix:/path`
    /// or `lmtp:[host]:port`. Configured only, never from DNS.
    Lmtp(ServiceAddr),
}

/// A next hop that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad next hop {0:?} (want smtp:[host]:port, smtp:host[:port], smtp:, NAME:[host]:port or NAME: for a transport of [transports], lmtp:unix:/path, lmtp:[host]:port, discard or maildir)")]
pub struct BadHop(pub String);

impl std::fmt::Display for NextHop {
    /// The canonical text (`key()`), which parses back to the same hop.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.key())
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

super::as_text!(NextHop, Cidr);

impl TryFrom<String> for NextHop {
    type Error = BadHop;
    fn try_from(text: String) -> Result<NextHop, BadHop> {
        NextHop::parse(&text).ok_or(BadHop(text))
    }
}

impl std::str::FromStr for NextHop {
    type Err = BadHop;
    fn from_str(text: &str) -> Result<NextHop, BadHop> {
        NextHop::parse(text).ok_or_else(|| BadHop(text.to_string()))
    }
}

impl NextHop {
    /// `smtp:[ip]:port`: SMTP to that address, no MX lookup.
    pub fn to_addr(addr: SocketAddr) -> NextHop {
        NextHop::Smtp {
            host: addr.ip().to_string(),
            port: addr.port(),
            bracketed: true,
            screened: false,
            transport: None,
        }
    }

    /// Parses `smtp:[host]:port`, `smtp:host:port`, `smtp:host`,
    /// `lmtp:unix:/path`, `lmtp:[host]:port`, `discard`, `maildir`.
    pub fn parse(text: &str) -> Option<NextHop> {
        let text = text.trim();
        if text == "discard" || text.starts_with("discard:") {
            return Some(NextHop::Discard);
        }
        if text == "maildir" || text == "local" {
            return Some(NextHop::Maildir);
        }
        if text == "system" {
            return Some(NextHop::System);
        }
        if let Some(service) = text.strip_prefix("lmtp:") {
            return service.parse().ok().map(NextHop::Lmtp);
        }
        let (name, rest) = text.split_once(':')?;
        let transport = match name {
            "smtp" => None,
            _ if is_transport_name(name) => Some(Arc::<str>::from(name)),
            _ => return None,
        };
        if rest.is_empty() {
            return Some(NextHop::Inherit { transport });
        }
        let (host, port, bracketed) = if let Some(inner) = rest.strip_prefix('[') {
            let close = inner.find(']')?;
            let host = &inner[..close];
            // A colon inside the brackets is an IPv6 address or a mistake
            // (`[127.0.0.1:2626]`, the port put inside): refused here, not
            // found out at the first delivery.
            if host.contains(':') && host.parse::<std::net::Ipv6Addr>().is_err() {
                return None;
            }
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
            screened: false,
            transport,
        })
    }

    /// The named transport this hop is delivered through, if any.
    pub fn transport(&self) -> Option<&Arc<str>> {
        match self {
            NextHop::Smtp { transport, .. } | NextHop::Inherit { transport } => transport.as_ref(),
            NextHop::Pipe { transport, .. } => Some(transport),
            _ => None,
        }
    }

    /// This hop delivered through `transport` (SMTP hops only; the others
    /// are returned as they are).
    pub fn via(self, transport: Option<Arc<str>>) -> NextHop {
        match self {
            NextHop::Smtp {
                host,
                port,
                bracketed,
                screened,
                ..
            } if transport.is_some() => NextHop::Smtp {
                host,
                port,
                bracketed,
                screened,
                transport,
            },
            other => other,
        }
    }

    /// This hop, through the pipe transport `transport`: its next hop is
    /// the host as written (`[host]` when bracketed, `:port` when not 25),
    /// as Postfix passes the text after `NAME:` to pipe(8).
    pub fn piped(&self, transport: Arc<str>) -> NextHop {
        let nexthop = match self {
            NextHop::Smtp {
                host,
                port,
                bracketed,
                ..
            } => {
                let host = match bracketed {
                    true => format!("[{host}]"),
                    false => host.clone(),
                };
                match port {
                    25 => host,
                    p => format!("{host}:{p}"),
                }
            }
            other => other.key(),
        };
        NextHop::Pipe { transport, nexthop }
    }

    /// Canonical name: the destination key for queues and concurrency limits.
    pub fn key(&self) -> String {
        match self {
            NextHop::Smtp {
                host,
                port,
                bracketed: true,
                screened: true,
                transport: None,
            } => format!("literal:[{host}]:{port}"),
            NextHop::Smtp {
                host,
                port,
                bracketed: true,
                transport,
                ..
            } => format!("{}:[{host}]:{port}", transport.as_deref().unwrap_or("smtp")),
            NextHop::Smtp {
                host,
                port,
                transport,
                ..
            } => format!("{}:{host}:{port}", transport.as_deref().unwrap_or("smtp")),
            NextHop::Inherit { transport } => {
                format!("{}:", transport.as_deref().unwrap_or("smtp"))
            }
            NextHop::MxSet { levels, port } => {
                let levels: Vec<String> = levels.iter().map(|l| l.join(",")).collect();
                format!("mx:{}:{port}", levels.join(";"))
            }
            NextHop::Pipe { transport, nexthop } => format!("{transport}:{nexthop}"),
            NextHop::Discard => "discard".into(),
            NextHop::Maildir => "maildir".into(),
            NextHop::System => "system".into(),
            NextHop::Lmtp(service) => format!("lmtp:{service}"),
        }
    }
}

/// A name `[transports]` may define: a lower-case word of letters,
/// digits, `-` and `_`, other than the built-in transports.
pub fn is_transport_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && ![
            "smtp", "lmtp", "discard", "maildir", "local", "literal", "mx", "system",
        ]
        .contains(&name)
}

/// An IPv4 or IPv6 network in CIDR notation (an address alone is a
/// network of one); parsed when the configuration is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// A network that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad network {0:?} (want address/prefix)")]
pub struct BadNetwork(pub String);

impl TryFrom<String> for Cidr {
    type Error = BadNetwork;
    fn try_from(text: String) -> Result<Cidr, BadNetwork> {
        Cidr::parse(&text).ok_or(BadNetwork(text))
    }
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
                bracketed: true,
                screened: false,
                transport: None,
            })
        );
        assert_eq!(
            NextHop::parse("smtp:mx.example:2525"),
            Some(NextHop::Smtp {
                host: "mx.example".into(),
                port: 2525,
                bracketed: false,
                screened: false,
                transport: None,
            })
        );
        assert_eq!(
            NextHop::parse("smtp:[::1]").map(|h| h.key()),
            Some("smtp:[::1]:25".into())
        );
        assert_eq!(NextHop::parse("discard"), Some(NextHop::Discard));
        let lmtp = |t: &str| NextHop::parse(t).map(|h| h.key());
        assert_eq!(
            lmtp("lmtp:unix:/run/dovecot/lmtp"),
            Some("lmtp:unix:/run/dovecot/lmtp".into())
        );
        assert_eq!(
            lmtp("lmtp:[127.0.0.1]:24"),
            Some("lmtp:inet:127.0.0.1:24".into())
        );
        assert_eq!(
            lmtp("lmtp:inet:mail.test:24"),
            Some("lmtp:inet:mail.test:24".into())
        );
        let key = |t: &str| NextHop::parse(t).map(|h| h.key());
        assert_eq!(
            key("out2:[10.0.0.1]:587"),
            Some("out2:[10.0.0.1]:587".into())
        );
        assert_eq!(key("out2:mx.example"), Some("out2:mx.example:25".into()));
        assert_eq!(key("out2:"), Some("out2:".into()));
        assert_eq!(key("smtp:"), Some("smtp:".into()));
        assert_eq!(
            NextHop::parse("out2:")
                .unwrap()
                .transport()
                .map(|t| t.to_string()),
            Some("out2".into())
        );
        for bad in ["lmtp:", "lmtp:unix:relative", "lmtp:[127.0.0.1]"] {
            assert_eq!(NextHop::parse(bad), None, "{bad}");
        }
        for bad in [
            "",
            "smtp:[x",
            "Out2:[x]",
            "smtp",
            "smtp:[x]:port",
            "lmtp:x",
            "smtp:a b",
            "smtp:[127.0.0.1:2626]",
            "smtp:[mx.example:25]:25",
        ] {
            assert_eq!(NextHop::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn cidrs_contain_their_addresses() {
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
    }
}
