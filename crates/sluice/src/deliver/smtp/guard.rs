//! Where a next hop found in DNS may not lead: back to Sluice itself, or
//! into the machine's or the site's own networks.
//!
//! Whoever owns a domain chooses its MX records. Without this check a
//! domain whose MX is 127.0.0.1 makes Sluice deliver to its own listener,
//! where the mail arrives from a trusted address (relay, DKIM signing)
//! and loops (security review H2). Postfix answers such mail with
//! `5.4.6 mail for <domain> loops back to myself`; so do we.
//!
//! Trust: DNS answers are the zone owner's; the listening addresses and
//! `delivery.allow_mx_networks` are the administrator's. Invariants: an
//! address from DNS is never one of our own listening addresses (the
//! port too; a wildcard listener covers every local address on its
//! port) nor unspecified, whatever the settings; loopback, link-local,
//! private (RFC 1918, unique local), shared (100.64/10), multicast and
//! broadcast addresses are refused unless `allow_mx_networks` names them.
//! Configured next hops (relayhost, transport) are never checked: the
//! administrator may point them anywhere.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};

use crate::config::hop::Cidr;

/// Our own listening addresses, as bound (updated after a start or a
/// reload; the configured ones before that).
#[derive(Debug, Default)]
pub struct OwnAddrs(RwLock<Arc<Vec<SocketAddr>>>);

impl OwnAddrs {
    pub fn new(addrs: Vec<SocketAddr>) -> OwnAddrs {
        OwnAddrs(RwLock::new(Arc::new(addrs)))
    }

    pub fn set(&self, addrs: Vec<SocketAddr>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(addrs);
    }

    pub fn get(&self) -> Arc<Vec<SocketAddr>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Why an address from DNS is not connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("it is one of our own listening addresses")]
    Ourselves,
    #[error("it is unspecified")]
    Unspecified,
    #[error("it is a {0} address (delivery.allow_mx_networks may allow it)")]
    Internal(&'static str),
}

/// Whether a next hop found in DNS may be `addr`.
pub fn check(addr: SocketAddr, own: &[SocketAddr], allowed: &[Cidr]) -> Result<(), Refused> {
    let ip = canonical(addr.ip());
    if ip.is_unspecified() {
        return Err(Refused::Unspecified);
    }
    let ours = own.iter().any(|o| {
        let o_ip = canonical(o.ip());
        o.port() == addr.port() && (o_ip == ip || (o_ip.is_unspecified() && is_local(ip)))
    });
    if ours {
        return Err(Refused::Ourselves);
    }
    match internal(ip) {
        Some(kind) if !allowed.iter().any(|n| n.contains(ip)) => Err(Refused::Internal(kind)),
        _ => Ok(()),
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// An address of this machine as far as a wildcard listener goes:
/// loopback, or one of its interfaces' addresses.
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || crate::routing::interfaces::interface_addrs().contains(&ip)
}

/// The kind of an address that is not on the public Internet.
fn internal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_link_local() {
                Some("link-local")
            } else if v4.is_private() {
                Some("private")
            } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
                Some("shared (carrier-grade NAT)")
            } else if v4.is_multicast() || v4.is_broadcast() || o[0] == 0 || o[0] >= 240 {
                Some("reserved")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if (first & 0xffc0) == 0xfe80 {
                Some("link-local")
            } else if (first & 0xfe00) == 0xfc00 {
                Some("private (unique local)")
            } else if v6.is_multicast() {
                Some("reserved")
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_from_dns_never_lead_back_or_inside() {
        let own = [at("127.0.0.1:2525"), at("0.0.0.0:25")];
        let none: &[Cidr] = &[];
        assert_eq!(
            check(at("127.0.0.1:2525"), &own, none),
            Err(Refused::Ourselves)
        );
        assert_eq!(
            check(at("127.0.0.5:25"), &own, none),
            Err(Refused::Ourselves)
        );
        assert_eq!(
            check(at("[::ffff:127.0.0.1]:2525"), &own, none),
            Err(Refused::Ourselves)
        );
        assert_eq!(
            check(at("0.0.0.0:2525"), &own, none),
            Err(Refused::Unspecified)
        );
        assert_eq!(check(at("[::]:25"), &[], none), Err(Refused::Unspecified));
        for (addr, kind) in [
            ("127.0.0.2:2526", "loopback"),
            ("[::1]:25", "loopback"),
            ("169.254.1.1:25", "link-local"),
            ("[fe80::1]:25", "link-local"),
            ("10.1.2.3:25", "private"),
            ("192.168.1.1:25", "private"),
            ("[fd00::1]:25", "private (unique local)"),
            ("100.64.0.1:25", "shared (carrier-grade NAT)"),
            ("255.255.255.255:25", "reserved"),
        ] {
            assert_eq!(
                check(at(addr), &[], none),
                Err(Refused::Internal(kind)),
                "{addr}"
            );
        }
        assert_eq!(check(at("192.0.2.1:25"), &own, none), Ok(()), "public");
        assert_eq!(check(at("[2001:db8::1]:25"), &own, none), Ok(()));
        // Allowed networks open internal addresses, never our own.
        let lo = [Cidr::parse("127.0.0.0/8").unwrap()];
        assert_eq!(check(at("127.0.0.2:2526"), &own, &lo), Ok(()));
        assert_eq!(
            check(at("127.0.0.1:2525"), &own, &lo),
            Err(Refused::Ourselves)
        );
        assert_eq!(
            check(at("127.0.0.9:25"), &own, &lo),
            Err(Refused::Ourselves)
        );
    }
}
