//! Value types for names in the configuration: host and domain names,
//! domain patterns and mail addresses.
//!
//! Each is checked and put in canonical form (lowercase, no trailing dot)
//! when the file is read, so a typo fails `check-config` with its line and
//! the daemon compares them as they are, never parsing or lowercasing
//! again. Trust: the file is the operator's; these checks catch mistakes,
//! not attacks.

use std::fmt;
use std::ops::Deref;

use sluice_proto::address::{parse_domain, parse_mailbox};

/// A name that is not a domain, or a text that is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadName {
    #[error("bad domain name {0:?} ({1})")]
    Domain(String, &'static str),
    #[error("bad mail address {0:?} ({1})")]
    Address(String, &'static str),
}

/// A domain or host name (RFC 5321 syntax; U-labels allowed), lowercase,
/// without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Domain(String);

impl Domain {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Domain {
    type Error = BadName;
    fn try_from(text: String) -> Result<Domain, BadName> {
        text.parse()
    }
}

impl std::str::FromStr for Domain {
    type Err = BadName;
    fn from_str(text: &str) -> Result<Domain, BadName> {
        parse_domain(text)
            .map(Domain)
            .map_err(|why| BadName::Domain(text.to_string(), why.text()))
    }
}

impl Deref for Domain {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An entry of `relay_domains`: `example.com` is that domain only;
/// `.example.com` is every domain under it, and itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct DomainPattern {
    pub domain: Domain,
    pub subdomains: bool,
}

impl DomainPattern {
    /// True if `domain` (already lowercase, no trailing dot) matches.
    pub fn matches(&self, domain: &str) -> bool {
        let own = self.domain.as_str();
        if domain == own {
            return true;
        }
        self.subdomains
            && domain
                .strip_suffix(own)
                .is_some_and(|head| head.ends_with('.'))
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.subdomains {
            f.write_str(".")?;
        }
        write!(f, "{}", self.domain)
    }
}

super::as_text!(Domain, DomainPattern, MailAddress);

impl TryFrom<String> for DomainPattern {
    type Error = BadName;
    fn try_from(text: String) -> Result<DomainPattern, BadName> {
        text.parse()
    }
}

impl std::str::FromStr for DomainPattern {
    type Err = BadName;
    fn from_str(text: &str) -> Result<DomainPattern, BadName> {
        let (rest, subdomains) = match text.strip_prefix('.') {
            Some(rest) => (rest, true),
            None => (text, false),
        };
        let domain = rest
            .parse()
            .map_err(|_| BadName::Domain(text.to_string(), "syntax"))?;
        Ok(DomainPattern { domain, subdomains })
    }
}

/// A whole mail address `local@domain`, in canonical form.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct MailAddress(String);

impl MailAddress {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for MailAddress {
    type Error = BadName;
    fn try_from(text: String) -> Result<MailAddress, BadName> {
        text.parse()
    }
}

impl std::str::FromStr for MailAddress {
    type Err = BadName;
    fn from_str(text: &str) -> Result<MailAddress, BadName> {
        parse_mailbox(text)
            .map(|m| MailAddress(m.address()))
            .map_err(|why| BadName::Address(text.to_string(), why.text()))
    }
}

impl fmt::Display for MailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_are_canonical_and_checked() {
        let d: Domain = "Mail.Example.COM.".parse().unwrap();
        assert_eq!(d.as_str(), "mail.example.com");
        for bad in ["", "a b.example", "-a.example", "a..example", "a@b"] {
            assert!(bad.parse::<Domain>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn patterns_match_themselves_and_with_a_dot_their_subdomains() {
        let exact: DomainPattern = "Ours.Test".parse().unwrap();
        assert!(exact.matches("ours.test"));
        assert!(!exact.matches("a.ours.test"));
        let tree: DomainPattern = ".ours.test".parse().unwrap();
        assert!(tree.matches("ours.test"));
        assert!(tree.matches("a.b.ours.test"));
        assert!(!tree.matches("notours.test"), "a suffix is not a subdomain");
        assert!(".".parse::<DomainPattern>().is_err());
        assert!("..ours.test".parse::<DomainPattern>().is_err());
    }

    #[test]
    fn addresses_are_checked() {
        let a: MailAddress = "Hostmaster@Example.COM".parse().unwrap();
        assert_eq!(a.as_str(), "Hostmaster@example.com");
        for bad in ["nobody", "a@", "<a@b.example>", "a b@c.example"] {
            assert!(bad.parse::<MailAddress>().is_err(), "{bad:?}");
        }
    }
}
