//! DNS lists as Postfix's restrictions ask them: an address list
//! (`reject_rbl_client`, `permit_dnswl_client`: the client's address
//! reversed under the zone) or a domain list (`reject_rhsbl_*`: the
//! domain under the zone), listed when the name has an A record (that
//! matches the list's `=d.d.d.d` pattern, when it has one); the refusal
//! names the list and carries its TXT text.
//!
//! Trust: the list's answers are data; the domains looked up are the
//! client's (HELO, sender, PTR). Invariants: a domain is looked up only if
//! it is a valid host name not ending in a numeric label (Postfix's rule,
//! so no address is ever sent to a domain list); the TXT text in a reply
//! is printable ASCII (anything else a space), at most 500 bytes.

use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use super::lookup::{Fact, Lookups, Query};
use super::names::valid_hostname;

/// One list: `zone` or `zone=pattern` (Postfix's ip_match syntax: four
/// octets, each a number or `[n;n..m;…]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsList {
    /// The zone, as written (and as the reply names it).
    pub zone: String,
    /// The A records that count; None: any.
    pub pattern: Option<[Vec<(u8, u8)>; 4]>,
}

/// Why a list's name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsListError {
    #[error("DNS list {0:?}: the zone is not a valid domain name")]
    Zone(String),
    #[error("DNS list {0:?}: the reply pattern is not d.d.d.d (octets as n or [n;n..m])")]
    Pattern(String),
}

impl FromStr for DnsList {
    type Err = DnsListError;

    fn from_str(text: &str) -> Result<DnsList, DnsListError> {
        let (zone, pattern) = match text.split_once('=') {
            Some((z, p)) => (z, Some(p)),
            None => (text, None),
        };
        if !valid_hostname(zone) {
            return Err(DnsListError::Zone(text.into()));
        }
        let pattern = match pattern {
            Some(p) => Some(parse_pattern(p).ok_or_else(|| DnsListError::Pattern(text.into()))?),
            None => None,
        };
        Ok(DnsList {
            zone: zone.to_string(),
            pattern,
        })
    }
}

/// `d.d.d.d` with each octet `n` or `[n;n..m;…]`.
fn parse_pattern(text: &str) -> Option<[Vec<(u8, u8)>; 4]> {
    let octet = |part: &str| -> Option<Vec<(u8, u8)>> {
        let items = match part.strip_prefix('[') {
            Some(rest) => rest.strip_suffix(']')?,
            None => part,
        };
        items
            .split(';')
            .map(|item| match item.split_once("..") {
                Some((lo, hi)) => {
                    let (lo, hi) = (lo.parse().ok()?, hi.parse().ok()?);
                    (lo <= hi).then_some((lo, hi))
                }
                None => item.parse().ok().map(|n| (n, n)),
            })
            .collect()
    };
    // Octets split at the dots outside brackets ("[0..1]" is one).
    let mut parts = Vec::new();
    let (mut start, mut inside) = (0, false);
    for (i, c) in text.char_indices() {
        match c {
            '[' => inside = true,
            ']' => inside = false,
            '.' if !inside => {
                parts.push(octet(&text[start..i])?);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(octet(&text[start..])?);
    parts.try_into().ok()
}

impl DnsList {
    /// Whether `a` is an answer that lists.
    fn counts(&self, a: Ipv4Addr) -> bool {
        match &self.pattern {
            None => true,
            Some(octets) => a
                .octets()
                .iter()
                .zip(octets)
                .all(|(b, ranges)| ranges.iter().any(|(lo, hi)| (lo..=hi).contains(&b))),
        }
    }
}

/// What a list said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// Not listed, or nothing to look up.
    No,
    /// The list did not answer (the name may be listed).
    Unknown,
    /// Listed; the list's TXT text (joined, cleaned), maybe empty.
    Yes(String),
}

/// The client's address in an address list.
pub async fn address_listing(lookups: &Lookups, list: &DnsList, ip: IpAddr) -> Listing {
    let name = crate::receive::dnsbl::query_name(ip.to_canonical(), &list.zone);
    listing(lookups, list, name).await
}

/// A domain (or an address's domain) in a domain list: nothing is looked
/// up for an address literal, a name ending in a numeric label, or one
/// that is not a valid host name.
pub async fn domain_listing(lookups: &Lookups, list: &DnsList, what: &str) -> Listing {
    let domain = match what.rsplit_once('@') {
        Some((_, d)) => d,
        None => what,
    };
    if domain.starts_with('[') {
        return Listing::No;
    }
    let last = domain.rsplit('.').next().unwrap_or("");
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Listing::No;
    }
    let domain = match domain.is_ascii() {
        true => domain.to_string(),
        false => match crate::routing::dns::ascii_name(domain) {
            Ok(ascii) => ascii,
            Err(_) => domain.to_string(),
        },
    };
    if !valid_hostname(&domain) {
        return Listing::No;
    }
    listing(lookups, list, format!("{domain}.{}", list.zone)).await
}

async fn listing(lookups: &Lookups, list: &DnsList, name: String) -> Listing {
    match &*lookups.fact(Query::A(name.clone())).await {
        Fact::V4(addrs) if addrs.iter().any(|a| list.counts(*a)) => {}
        Fact::Failed(_) => return Listing::Unknown,
        _ => return Listing::No,
    }
    Listing::Yes(match &*lookups.fact(Query::Txt(name)).await {
        Fact::Txt(strings) => join_txt(strings),
        _ => String::new(),
    })
}

/// Postfix's rbl_pagein(): each record's text (non-printable bytes as
/// spaces), joined by " / ", within 500 bytes.
fn join_txt(strings: &[Vec<u8>]) -> String {
    const LIMIT: usize = super::lookup::TXT_LIMIT;
    let mut text = String::new();
    for (i, s) in strings.iter().enumerate() {
        let space = LIMIT.saturating_sub(text.len());
        if space == 0 {
            break;
        }
        text.extend(s.iter().take(space).map(|&b| match b {
            0x20..=0x7e => b as char,
            _ => ' ',
        }));
        if i + 1 < strings.len() && LIMIT - text.len() > 3 {
            text.push_str(" / ");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_patterns() {
        let plain: DnsList = "bl.test".parse().unwrap();
        assert!(plain.counts(Ipv4Addr::new(10, 0, 0, 1)));
        let one: DnsList = "bl.test=127.0.0.2".parse().unwrap();
        assert!(one.counts(Ipv4Addr::new(127, 0, 0, 2)));
        assert!(!one.counts(Ipv4Addr::new(127, 0, 0, 3)));
        let ranges: DnsList = "bl.test=127.0.[0..1].[2;4..6]".parse().unwrap();
        assert!(ranges.counts(Ipv4Addr::new(127, 0, 1, 5)));
        assert!(!ranges.counts(Ipv4Addr::new(127, 0, 1, 3)));
        assert!(!ranges.counts(Ipv4Addr::new(127, 0, 2, 2)));
        for bad in [
            "bl.test=127.0.0",
            "bl.test=127.0.0.256",
            "-bl.test",
            "bl.test=[2..1].0.0.1",
        ] {
            assert!(bad.parse::<DnsList>().is_err(), "{bad}");
        }
    }

    #[test]
    fn txt_is_joined_cleaned_and_bounded() {
        assert_eq!(join_txt(&[b"a\r\nb".to_vec(), b"c".to_vec()]), "a  b / c");
        let long = join_txt(&[vec![b'x'; 400], vec![b'y'; 400]]);
        assert_eq!(long.len(), 500);
        assert!(long.contains(" / "));
        assert_eq!(join_txt(&["ü".as_bytes().to_vec()]), "  ");
    }
}
