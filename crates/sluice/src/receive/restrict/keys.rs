//! The keys an access table is asked, in Postfix's order (access(5),
//! "EMAIL ADDRESS PATTERNS", "HOST NAME/ADDRESS PATTERNS"):
//! - an address: `user+ext@domain`, `user@domain`, the domain and its
//!   parents, `user+ext@`, `user@`;
//! - a host name: the name and its parents;
//! - a client address: the address, then its networks (`1.2.3`, `1.2`,
//!   `1`; IPv6 by `:`-separated parts).
//!
//! Only the first key is asked of a pattern table (regexp, pcre, cidr,
//! socketmap, tcp): the rest are partial keys for fixed tables. Parent
//! domains are `example.com` or `.example.com` as
//! `parent_domain_matches_subdomains` says (`tables::search::domain_keys`).
//! Pure: no I/O.

use std::net::IpAddr;

use crate::tables::search::{domain_keys, split_extension, Rules};

/// One key, and whether only fixed tables take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessKey {
    pub text: String,
    pub partial: bool,
}

fn key(text: impl Into<String>, partial: bool) -> AccessKey {
    AccessKey {
        text: text.into(),
        partial,
    }
}

/// The keys of a host name: itself, then its parent domains.
pub fn host_keys(name: &str, parent_matches: bool) -> Vec<AccessKey> {
    let name = name.strip_suffix('.').unwrap_or(name);
    domain_keys(name, parent_matches)
        .into_iter()
        .enumerate()
        .map(|(i, k)| key(k, i > 0))
        .collect()
}

/// The keys of an address (the null sender is `null_key`).
pub fn address_keys(
    address: &str,
    delimiters: &str,
    parent_matches: bool,
    null_key: &str,
) -> Vec<AccessKey> {
    if address.is_empty() {
        return vec![key(null_key, false)];
    }
    let (local, domain) = match address.rsplit_once('@') {
        Some((l, d)) => (l, Some(d)),
        None => (address, None),
    };
    let rules = Rules {
        delimiters,
        local: false,
        owner_request_special: true,
    };
    let bare = split_extension(local, &rules).map(|(user, _)| user);
    let mut keys = vec![key(address, false)];
    if let (Some(user), Some(domain)) = (bare, domain) {
        keys.push(key(format!("{user}@{domain}"), true));
    }
    if let Some(domain) = domain {
        keys.extend(host_keys(domain, parent_matches).into_iter().map(|mut k| {
            k.partial = true;
            k
        }));
        keys.push(key(format!("{local}@"), true));
        if let Some(user) = bare {
            keys.push(key(format!("{user}@"), true));
        }
    }
    keys
}

/// The keys of a client address: the address, then its networks.
pub fn client_address_keys(ip: IpAddr) -> Vec<AccessKey> {
    let full = ip.to_string();
    let mut keys = vec![key(full.clone(), false)];
    let sep = if ip.is_ipv4() { '.' } else { ':' };
    let mut rest = full.as_str();
    while let Some((head, _)) = rest.rsplit_once(sep) {
        let head = head.trim_end_matches(sep);
        if head.is_empty() {
            break;
        }
        keys.push(key(head, true));
        rest = head;
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(keys: Vec<AccessKey>) -> Vec<String> {
        keys.into_iter().map(|k| k.text).collect()
    }

    #[test]
    fn addresses_in_postfix_order() {
        assert_eq!(
            texts(address_keys("u+x@a.example.com", "+", true, "<>")),
            [
                "u+x@a.example.com",
                "u@a.example.com",
                "a.example.com",
                "example.com",
                "com",
                "u+x@",
                "u@"
            ]
        );
        assert_eq!(
            texts(address_keys("u@a.b", "", false, "<>")),
            ["u@a.b", "a.b", ".b", "u@"]
        );
        assert_eq!(texts(address_keys("", "+", true, "<>")), ["<>"]);
        assert!(!address_keys("u@a.b", "", true, "<>")[0].partial);
        assert!(address_keys("u@a.b", "", true, "<>")[1].partial);
    }

    #[test]
    fn client_networks() {
        assert_eq!(
            texts(client_address_keys("192.0.2.7".parse().unwrap())),
            ["192.0.2.7", "192.0.2", "192.0", "192"]
        );
        assert_eq!(
            texts(client_address_keys("2001:db8::1".parse().unwrap())),
            ["2001:db8::1", "2001:db8", "2001"]
        );
    }
}
