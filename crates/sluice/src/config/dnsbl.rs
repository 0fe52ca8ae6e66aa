//! `smtpd.dnsbl_sites` entries, as Postfix's postscreen_dnsbl_sites writes
//! them: `zone[=filter][*weight]`, e.g. `zen.example*3`,
//! `bl.example=127.0.0.[2..11]*2`, `wl.example=127.0.[0..255].[1..3]*-2`.
//! Parsed when the file is read, so a bad entry fails `check-config` with
//! its line and nothing parses it again.
//!
//! Trust: the entries are the administrator's. Invariant: a zone is a
//! syntactically valid domain name, a weight fits an i32, and a filter
//! has four octet patterns, each a value, a range or a list of them.

use std::net::Ipv4Addr;

use super::names::Domain;

/// One list: where to look a client up, which answers count, and how much.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct DnsblSite {
    /// The list's DNS zone (`bl.example`): a client 192.0.2.1 is looked up
    /// as `1.2.0.192.bl.example`.
    pub zone: Domain,
    /// Which `A` answers mean "listed"; None: any in 127.0.0.0/8 except
    /// 127.255.255.0/24, which lists use for "query refused" errors.
    pub filter: Option<[Octet; 4]>,
    /// Added to the client's score when listed; negative for an allowlist.
    pub weight: i32,
}

/// One octet of a filter: values and ranges, `2`, `[2..11]`, `[1;3;5..7]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Octet(Vec<(u8, u8)>);

impl Octet {
    fn matches(&self, value: u8) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&value))
    }

    fn parse(text: &str) -> Option<Octet> {
        let inner = match text.strip_prefix('[') {
            Some(rest) => rest.strip_suffix(']')?,
            None => text,
        };
        let mut ranges = Vec::new();
        for item in inner.split(';') {
            let (lo, hi) = item.split_once("..").unwrap_or((item, item));
            let (lo, hi) = (lo.parse::<u8>().ok()?, hi.parse::<u8>().ok()?);
            if lo > hi {
                return None;
            }
            ranges.push((lo, hi));
        }
        Some(Octet(ranges))
    }
}

impl std::fmt::Display for Octet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let items: Vec<String> = self
            .0
            .iter()
            .map(|&(lo, hi)| match lo == hi {
                true => lo.to_string(),
                false => format!("{lo}..{hi}"),
            })
            .collect();
        match self.0.as_slice() {
            [(lo, hi)] if lo == hi => write!(f, "{lo}"),
            _ => write!(f, "[{}]", items.join(";")),
        }
    }
}

impl std::fmt::Display for DnsblSite {
    /// `zone[=filter][*weight]`, which parses back to the same site.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.zone)?;
        if let Some(octets) = &self.filter {
            let octets: Vec<String> = octets.iter().map(Octet::to_string).collect();
            write!(f, "={}", octets.join("."))?;
        }
        match self.weight {
            1 => Ok(()),
            w => write!(f, "*{w}"),
        }
    }
}

super::as_text!(DnsblSite);

/// A `dnsbl_sites` entry that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad DNSBL site {0:?} (want zone[=filter][*weight], e.g. bl.example=127.0.0.[2..11]*2)")]
pub struct BadSite(pub String);

impl TryFrom<String> for DnsblSite {
    type Error = BadSite;
    fn try_from(text: String) -> Result<Self, BadSite> {
        text.parse()
    }
}

impl std::str::FromStr for DnsblSite {
    type Err = BadSite;
    fn from_str(text: &str) -> Result<Self, BadSite> {
        let bad = || BadSite(text.to_string());
        let (rest, weight) = match text.rsplit_once('*') {
            Some((rest, w)) => (rest, w.trim().parse::<i32>().map_err(|_| bad())?),
            None => (text, 1),
        };
        let (zone, filter) = match rest.split_once('=') {
            Some((zone, f)) => {
                let octets: Vec<Octet> = octets_of(f)
                    .into_iter()
                    .map(Octet::parse)
                    .collect::<Option<_>>()
                    .ok_or_else(bad)?;
                let octets: [Octet; 4] = octets.try_into().map_err(|_| bad())?;
                (zone, Some(octets))
            }
            None => (rest, None),
        };
        let zone: Domain = zone.trim().parse().map_err(|_| bad())?;
        Ok(DnsblSite {
            zone,
            filter,
            weight,
        })
    }
}

/// A filter's octets: split at the dots outside brackets (`[2..11]`
/// holds dots of its own).
fn octets_of(filter: &str) -> Vec<&str> {
    let (mut parts, mut start, mut depth) = (Vec::new(), 0, 0);
    for (i, c) in filter.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            '.' if depth == 0 => {
                parts.push(&filter[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&filter[start..]);
    parts
}

impl DnsblSite {
    /// Whether the answer `addr` means "listed" for this site.
    pub fn counts(&self, addr: Ipv4Addr) -> bool {
        let o = addr.octets();
        match &self.filter {
            Some(filter) => filter.iter().zip(o).all(|(f, v)| f.matches(v)),
            None => o[0] == 127 && !(o[1] == 255 && o[2] == 255),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(text: &str) -> DnsblSite {
        text.parse().unwrap()
    }

    #[test]
    fn postscreen_syntax() {
        let s = site("zen.example*3");
        assert_eq!(
            (s.zone.as_str(), s.weight, s.filter),
            ("zen.example", 3, None)
        );
        assert_eq!(site("wl.example*-2").weight, -2);
        assert_eq!(site("bl.example").weight, 1);
        let s = site("bl.example=127.0.0.[2..11]*2");
        assert!(s.counts(Ipv4Addr::new(127, 0, 0, 2)));
        assert!(s.counts(Ipv4Addr::new(127, 0, 0, 11)));
        assert!(!s.counts(Ipv4Addr::new(127, 0, 0, 12)));
        assert!(!s.counts(Ipv4Addr::new(127, 0, 1, 2)));
        let s = site("wl.example=127.0.[0..255].[1;3]*-2");
        assert!(s.counts(Ipv4Addr::new(127, 0, 9, 3)));
        assert!(!s.counts(Ipv4Addr::new(127, 0, 9, 2)));
        for bad in [
            "",
            "*2",
            "bl.example*x",
            "bl.example=127.0.0",
            "bl.example=127.0.0.[9..2]",
            "bl.example=127.0.0.256",
            "bad zone*2",
        ] {
            assert!(bad.parse::<DnsblSite>().is_err(), "{bad}");
        }
    }

    #[test]
    fn without_a_filter_list_errors_do_not_count() {
        let s = site("zen.example");
        assert!(s.counts(Ipv4Addr::new(127, 0, 0, 2)));
        // Spamhaus-style "query refused" codes, and answers outside 127/8.
        assert!(!s.counts(Ipv4Addr::new(127, 255, 255, 254)));
        assert!(!s.counts(Ipv4Addr::new(10, 0, 0, 2)));
    }
}
