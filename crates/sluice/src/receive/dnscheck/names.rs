//! A client's names as Postfix's smtpd_peer.c finds them: the reverse
//! name is the first PTR name of its address (a valid host name, not
//! numeric, else "unknown"); the name is that one only if looking it up
//! gives back the client's address (forward-confirmed), else "unknown".
//! Each comes with a status: OK, TEMP (the DNS failed; try again later),
//! PERM (no name), and for the name FORGED (the name does not give back
//! the address).
//!
//! Trust: the PTR and the forward answer are whoever runs those zones'
//! (the client's own, often): a PTR naming someone else's host only
//! counts if that host's zone agrees. Host names are checked as Postfix's
//! valid_hostname() checks them before any is used or looked up.
//!
//! Unlike Postfix (libc: /etc/hosts, then DNS), the resolver answers for
//! 127.0.0.0/8 itself (RFC 6761): every such client's PTR is `localhost`,
//! confirmed for 127.0.0.1 only.

use std::net::IpAddr;

use super::lookup::{Fact, Lookups, Query};

/// Postfix's name for "no name".
pub const UNKNOWN: &str = "unknown";

/// How a name lookup ended (Postfix's SMTPD_PEER_CODE_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameStatus {
    Ok,
    /// The DNS failed: the name may exist.
    Temp,
    /// No name (no PTR, or an invalid or numeric one).
    Perm,
    /// A PTR name whose addresses do not include the client's.
    Forged,
}

/// A client's names and how they were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientNames {
    /// The forward-confirmed name, or "unknown".
    pub name: String,
    pub name_status: NameStatus,
    /// The PTR name, unconfirmed, or "unknown".
    pub reverse_name: String,
    pub reverse_name_status: NameStatus,
}

impl ClientNames {
    /// Both names "unknown" with `status` (no lookup, or it failed).
    pub fn unknown(status: NameStatus) -> ClientNames {
        ClientNames {
            name: UNKNOWN.into(),
            name_status: status,
            reverse_name: UNKNOWN.into(),
            reverse_name_status: status,
        }
    }
}

/// The names of the client at `ip` (an IPv4-mapped IPv6 address is its
/// IPv4 address).
pub async fn client_names(lookups: &Lookups, ip: IpAddr) -> ClientNames {
    let ip = ip.to_canonical();
    let reverse = match &*lookups.fact(Query::Ptr(ip)).await {
        Fact::Ptr(name) if valid_hostname(name) => name.clone(),
        Fact::Failed(_) => return ClientNames::unknown(NameStatus::Temp),
        _ => return ClientNames::unknown(NameStatus::Perm),
    };
    // Only the client's address family, as Postfix asks.
    let forward = match ip {
        IpAddr::V4(_) => Query::A(reverse.clone()),
        IpAddr::V6(_) => Query::Aaaa(reverse.clone()),
    };
    let name_status = match &*lookups.fact(forward).await {
        Fact::V4(addrs) if addrs.iter().any(|a| IpAddr::V4(*a) == ip) => NameStatus::Ok,
        Fact::V6(addrs) if addrs.iter().any(|a| IpAddr::V6(*a) == ip) => NameStatus::Ok,
        Fact::Failed(_) => NameStatus::Temp,
        _ => NameStatus::Forged,
    };
    ClientNames {
        name: match name_status {
            NameStatus::Ok => reverse.clone(),
            _ => UNKNOWN.into(),
        },
        name_status,
        reverse_name: reverse,
        reverse_name_status: NameStatus::Ok,
    }
}

/// Postfix's valid_hostname(): labels of letters, digits, `-` (not first
/// or last) and `_`, at most 63 bytes; at most 255 in all; not empty, no
/// empty label, no final dot; not all digits and dots (an address).
pub fn valid_hostname(name: &str) -> bool {
    hostname(name, false)
}

/// A name in an answer's data as Postfix's dns_lookup takes it (its
/// valid_rr_name()): an address passes (with a warning, in Postfix), a
/// host name may start with a `*` label.
pub fn valid_rr_name(name: &str) -> bool {
    name.parse::<std::net::IpAddr>().is_ok() || hostname(name, true)
}

fn hostname(name: &str, wildcard: bool) -> bool {
    if name.is_empty() || name.len() > 255 {
        return false;
    }
    let mut non_numeric = false;
    for (i, label) in name.split('.').enumerate() {
        if wildcard && i == 0 && label == "*" {
            non_numeric = true;
            continue;
        }
        let bytes = label.as_bytes();
        if bytes.is_empty() || bytes.len() > 63 {
            return false;
        }
        if bytes[0] == b'-' || bytes[bytes.len() - 1] == b'-' {
            return false;
        }
        for &b in bytes {
            match b {
                b'0'..=b'9' => {}
                b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'-' => non_numeric = true,
                _ => return false,
            }
        }
    }
    non_numeric
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_as_postfix_checks_them() {
        for good in [
            "a.test",
            "mail-1.example.com",
            "under_score.test",
            "x",
            "1a.2",
        ] {
            assert!(valid_hostname(good), "{good}");
        }
        let long_label = format!("{}.test", "a".repeat(64));
        let long_name = ["abcdefghi"; 26].join(".");
        for bad in [
            "",
            "1.2.3.4",
            "a..test",
            "a.test.",
            ".a.test",
            "-a.test",
            "a-.test",
            "a b.test",
            "a\\.b.test",
            "bücher.test",
            "::1",
            long_label.as_str(),
            long_name.as_str(),
        ] {
            assert!(!valid_hostname(bad), "{bad:?}");
        }
        assert!(valid_rr_name("1.2.3.4") && valid_rr_name("*.wild.test"));
        assert!(!valid_hostname("*.wild.test") && !valid_rr_name("a.*.test"));
    }
}
