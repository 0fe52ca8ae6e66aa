//! The canonical maps and masquerading on the message's header (Postfix
//! cleanup's header rewriting): each address of a sender field through
//! `sender_canonical_maps` then `canonical_maps` then masquerading, each
//! of a recipient field through `recipient_canonical_maps` then
//! `canonical_maps` then masquerading, each step only when its
//! `*_classes` name the field's class (`header_sender`,
//! `header_recipient`); the same lookups as on the envelope
//! (`canonical.rs`).
//!
//! Whose headers: as Postfix, a local submission's, and an SMTP client's
//! that `local_header_rewrite_clients` admits (its address one of this
//! machine's, in `mynetworks`, authenticated, or in a listed block);
//! another client's only when `remote_header_rewrite_domain` is set, and
//! then an address without a domain gets that one.
//!
//! Trust: the header is the sender's; the tables the administrator's.
//! Invariants: only addr-specs change (`headers::apply`); nothing is
//! read or allocated when no step applies to either side; a table that
//! cannot answer defers the message (`451 4.3.0`).

use std::net::IpAddr;

use super::address_list::external;
use super::headers::{self, Side};
use super::{canonical, Classes, RewriteMaps, HDR_RECIPIENT, HDR_SENDER};
use crate::config::hop::Cidr;
use crate::config::rewrite::RewriteConfig;
use crate::intake::{Intake, Origin, Refusal, Submission};

/// `local_header_rewrite_clients`, read.
#[derive(Debug, Clone, Default)]
pub struct HeaderClients {
    inet_interfaces: bool,
    mynetworks: bool,
    authenticated: bool,
    nets: Vec<Cidr>,
    /// This machine's addresses (for `permit_inet_interfaces`), read
    /// when the configuration is built.
    own: Vec<IpAddr>,
}

impl HeaderClients {
    pub fn new(config: &RewriteConfig) -> HeaderClients {
        let has = |w: &str| config.local_header_rewrite_clients.iter().any(|e| e == w);
        let inet_interfaces = has("permit_inet_interfaces");
        HeaderClients {
            inet_interfaces,
            mynetworks: has("permit_mynetworks"),
            authenticated: has("permit_sasl_authenticated"),
            nets: config
                .local_header_rewrite_clients
                .iter()
                .filter_map(|e| Cidr::parse(e))
                .collect(),
            own: match inet_interfaces {
                true => crate::routing::interfaces::interface_addrs(),
                false => Vec::new(),
            },
        }
    }

    /// Whether `origin`'s headers are rewritten as a local client's.
    fn local(&self, origin: &Origin) -> bool {
        let Origin::Smtp(c) = origin else {
            return true;
        };
        let ip = c.peer.ip();
        (self.inet_interfaces && (is_own_loopback(ip) || self.own.contains(&ip)))
            || (self.mynetworks && c.trusted)
            || (self.authenticated && c.authenticated)
            || self.nets.iter().any(|n| n.contains(ip))
    }
}

/// 127.0.0.1 and ::1 (an interface's address; 127.0.0.2 is not, as for
/// Postfix's inet_interfaces).
fn is_own_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.octets() == [127, 0, 0, 1],
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v| v.octets() == [127, 0, 0, 1])
        }
    }
}

/// Rewrites the header of `sub`, when its origin and the classes say so.
pub(super) async fn run(
    intake: &Intake,
    maps: &RewriteMaps,
    sub: &mut Submission,
) -> Result<(), Refusal> {
    let rw = &intake.config.rewrite;
    let wants = |side: Side| {
        let class = match side {
            Side::Sender => HDR_SENDER,
            Side::Recipient => HDR_RECIPIENT,
        };
        !chain(maps, side).iter().all(|(t, _)| t.is_empty())
            || (maps.classes.masquerade & class != 0 && !maps.masquerade.is_empty())
    };
    let remote = match maps.header_clients.local(&sub.origin) {
        true => None,
        false if rw.remote_header_rewrite_domain.is_empty() => return Ok(()),
        false => Some(rw.remote_header_rewrite_domain.as_str()),
    };
    if remote.is_none() && !wants(Side::Sender) && !wants(Side::Recipient) {
        return Ok(());
    }
    let found = headers::addresses(&sub.body, |s| remote.is_some() || wants(s));
    let mut edits = Vec::new();
    for a in found {
        let given = external(&a.address);
        let mut address = given.clone();
        if let Some(domain) = remote.filter(|_| !a.address.contains('@')) {
            address = format!("{address}@{domain}");
        }
        let now = rewrite(intake, maps, sub.id, a.side, address).await?;
        if now != given {
            edits.push((a.span, now));
        }
    }
    if !edits.is_empty() {
        sub.body = headers::apply(&sub.body, &edits);
    }
    Ok(())
}

/// The canonical tables that apply to a field of `side`, in order.
fn chain(
    maps: &RewriteMaps,
    side: Side,
) -> [(&[std::sync::Arc<crate::tables::Table>], &'static str); 2] {
    let c: &Classes = &maps.classes;
    let when = |bits: u8, class: u8, t: &'static str| (bits & class != 0, t);
    let none: &[_] = &[];
    let pick = |(on, name): (bool, &'static str), tables| (if on { tables } else { none }, name);
    match side {
        Side::Sender => [
            pick(
                when(c.sender, HDR_SENDER, "sender_canonical_maps"),
                &maps.sender_canonical[..],
            ),
            pick(
                when(c.canonical, HDR_SENDER, "canonical_maps"),
                &maps.canonical[..],
            ),
        ],
        Side::Recipient => [
            pick(
                when(c.recipient, HDR_RECIPIENT, "recipient_canonical_maps"),
                &maps.recipient_canonical[..],
            ),
            pick(
                when(c.canonical, HDR_RECIPIENT, "canonical_maps"),
                &maps.canonical[..],
            ),
        ],
    }
}

/// One header address through its side's canonical tables, then
/// masquerading.
async fn rewrite(
    intake: &Intake,
    maps: &RewriteMaps,
    id: u64,
    side: Side,
    address: String,
) -> Result<String, Refusal> {
    let chain = chain(maps, side);
    let mut now = match chain.iter().all(|(t, _)| t.is_empty()) {
        true => address,
        false => canonical::rewrite(intake, id, &chain, &address).await?,
    };
    let class = match side {
        Side::Sender => HDR_SENDER,
        Side::Recipient => HDR_RECIPIENT,
    };
    if maps.classes.masquerade & class != 0 {
        if let Some(m) = maps.masquerade.apply(&now) {
            now = m;
        }
    }
    Ok(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::SmtpClient;

    fn smtp(ip: &str, trusted: bool, authenticated: bool) -> Origin {
        Origin::Smtp(SmtpClient {
            peer: std::net::SocketAddr::new(ip.parse().unwrap(), 1025),
            listener: "127.0.0.1:25".parse().unwrap(),
            helo: "c.test".into(),
            trusted,
            authenticated,
            auth_user: None,
            sender_auth: false,
            dmarc_reject: false,
        })
    }

    fn clients(list: &[&str]) -> HeaderClients {
        let config = RewriteConfig {
            local_header_rewrite_clients: list.iter().map(|s| s.to_string()).collect(),
            ..RewriteConfig::default()
        };
        HeaderClients::new(&config)
    }

    #[test]
    fn clients_admitted_by_local_header_rewrite_clients() {
        let default = HeaderClients::new(&RewriteConfig::default());
        assert!(default.local(&smtp("127.0.0.1", false, false)));
        assert!(default.local(&smtp("::1", false, false)));
        assert!(!default.local(&smtp("127.0.0.2", true, true)));
        assert!(!default.local(&smtp("192.0.2.7", true, false)));
        let local = Origin::Local {
            uid: Some(1000),
            full_name: None,
            user: crate::intake::LocalUser::Trusted,
        };
        assert!(clients(&[]).local(&local));
        assert!(!clients(&[]).local(&smtp("127.0.0.1", true, true)));
        let wide = clients(&[
            "permit_mynetworks",
            "permit_sasl_authenticated",
            "198.51.100.0/24",
        ]);
        assert!(wide.local(&smtp("192.0.2.7", true, false)));
        assert!(wide.local(&smtp("192.0.2.7", false, true)));
        assert!(wide.local(&smtp("198.51.100.9", false, false)));
        assert!(!wide.local(&smtp("192.0.2.7", false, false)));
        assert!(!wide.local(&smtp("127.0.0.1", false, false)));
    }
}
