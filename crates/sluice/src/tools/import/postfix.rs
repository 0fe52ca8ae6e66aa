//! A Postfix configuration as `postconf` sees it: the file's settings
//! over Postfix 3.7's defaults (`postfix-3.7-defaults.txt`, made with
//! Debian 12's `postconf -d`), and the defaults Postfix computes from the
//! machine: `myhostname` (the name given, else this machine's), `mydomain`
//! (`myhostname` without its first label, or `localdomain`) and
//! `mynetworks` (for `mynetworks_style = host`: the loopback networks,
//! which is what this importer can know without the interfaces of the
//! machine Postfix ran on).
//!
//! Trust: as main.cf's (see `maincf.rs`); the defaults are ours.

use super::maincf::{expand, ExpandError, Lookup, MainCf};

const DEFAULTS: &[u8] = include_bytes!("postfix-3.7-defaults.txt");

pub struct Postfix {
    pub main: MainCf,
    defaults: MainCf,
    hostname: String,
}

impl Postfix {
    /// `main` over the defaults; `hostname` stands for this machine's
    /// name where `myhostname` is unset.
    pub fn new(main: MainCf, hostname: &str) -> Postfix {
        // Ours, checked by a unit test: it parses.
        let defaults = MainCf::parse(DEFAULTS).unwrap_or_default();
        Postfix {
            main,
            defaults,
            hostname: hostname.to_string(),
        }
    }

    /// The expanded value in force (set, computed or default).
    pub fn get(&self, name: &str) -> Result<String, ExpandError> {
        match self.value(name) {
            Some(v) => expand(&v, self),
            None => Ok(String::new()),
        }
    }

    /// Whether Postfix 3.7 has a parameter of that name (or it is one of
    /// the computed ones, or a per-class or per-service form of one).
    pub fn known(&self, name: &str) -> bool {
        self.defaults.raw(name).is_some()
            || matches!(name, "myhostname" | "mydomain" | "mynetworks")
    }

    /// Whether `value` (expanded) is `name`'s default.
    pub fn is_default(&self, name: &str, value: &str) -> bool {
        let default = self.defaults.raw(name).map(|v| expand(v, self));
        matches!(default, Some(Ok(d)) if words(&d) == words(value))
    }
}

/// The words of parameter `name`'s value in force.
pub fn list_of(pf: &Postfix, name: &str) -> Vec<String> {
    words(&pf.get(name).unwrap_or_default())
}

/// A value as a list of words (commas and blanks separate).
pub fn words(value: &str) -> Vec<String> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

impl Lookup for Postfix {
    fn value(&self, name: &str) -> Option<String> {
        if let Some(v) = self.main.raw(name) {
            return Some(v.to_string());
        }
        match name {
            "myhostname" => Some(self.hostname.clone()),
            "mydomain" => {
                let host = self.get("myhostname").unwrap_or_default();
                Some(match host.split_once('.') {
                    Some((_, domain)) if !domain.is_empty() => domain.to_string(),
                    _ => "localdomain".into(),
                })
            }
            "mynetworks" => Some("127.0.0.0/8 [::1]/128".into()),
            _ => self.defaults.raw(name).map(str::to_string),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf(text: &str) -> Postfix {
        Postfix::new(MainCf::parse(text.as_bytes()).unwrap(), "mx.example.com")
    }

    #[test]
    fn defaults_and_computed_values_as_postconf() {
        let p = pf("");
        assert!(p.defaults.params.len() > 900);
        assert_eq!(p.get("mydomain").unwrap(), "example.com");
        assert_eq!(
            p.get("mydestination").unwrap(),
            "mx.example.com, localhost.example.com, localhost"
        );
        assert_eq!(
            p.get("smtpd_banner").unwrap(),
            "mx.example.com ESMTP Postfix"
        );
        // compatibility_level 0 (unset): the old relay_domains default.
        assert_eq!(
            p.get("relay_domains").unwrap(),
            p.get("mydestination").unwrap()
        );
        let new = pf("compatibility_level = 3.6\nmyhostname = host.sub.example.org\n");
        assert_eq!(new.get("relay_domains").unwrap(), "");
        assert_eq!(new.get("mydomain").unwrap(), "sub.example.org");
        assert_eq!(
            new.get("smtpd_relay_restrictions").unwrap(),
            "permit_mynetworks, permit_sasl_authenticated, defer_unauth_destination"
        );
        assert!(new.known("smtpd_relay_restrictions") && !new.known("smtpd_relay_restriction"));
        assert!(new.is_default("mail_name", "Postfix") && !new.is_default("mail_name", "x"));
    }
}
