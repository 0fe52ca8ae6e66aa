//! Postfix's `ldap_table(5)` files, read into an LDAP table's settings, so
//! a site's `ldap:/etc/postfix/ldap-users.cf` works as it is.
//!
//! Translated: `server_host` (hosts, `host:port` or LDAP URIs, in order
//! for fail-over), `server_port`, `search_base`, `query_filter` (`%s %u
//! %d`), `result_attribute`, `bind_dn`, `bind_pw`, `start_tls`,
//! `tls_ca_cert_file`, `timeout`, with Postfix's defaults for what is
//! unset. Accepted and without effect: `version` (Sluice speaks LDAPv3),
//! `bind = yes|no` (an empty `bind_dn` binds anonymously either way), the
//! client-side `cache*` settings (Sluice's cache is its own), `debuglevel`,
//! `chase_referrals`, `dereference = 0`, `tls_require_cert = yes`,
//! `result_format = %s`, `scope = sub`. Refused with the name of the
//! setting, never ignored: the settings that would change answers and
//! that Sluice does not do yet (`special_result_attribute`,
//! `terminal_result_attribute`, `leaf_result_attribute`, `domain`,
//! another `result_format` or `scope`, `bind = sasl`), and any name
//! ldap_table(5) does not have.
//!
//! Trust: the file is the operator's. Invariant: every parameter is
//! translated, accepted without effect, or refused.

use super::cf::{CfError, Params};
use crate::tables::config::TableConfig;

/// Names accepted without effect, with the only values that mean what
/// Sluice does (None: any value).
const NO_EFFECT: &[(&str, Option<&[&str]>)] = &[
    ("version", None),
    ("bind", Some(&["yes", "no"])),
    ("cache", None),
    ("cache_expiry", None),
    ("cache_size", None),
    ("debuglevel", None),
    ("chase_referrals", None),
    ("dereference", Some(&["0"])),
    ("tls_require_cert", Some(&["yes"])),
    ("result_format", Some(&["%s"])),
    ("scope", Some(&["sub"])),
    ("size_limit", None),
    ("expansion_limit", None),
    ("recursion_limit", None),
];

const TRANSLATED: &[&str] = &[
    "server_host",
    "server_port",
    "search_base",
    "query_filter",
    "result_attribute",
    "bind_dn",
    "bind_pw",
    "start_tls",
    "tls_ca_cert_file",
    "timeout",
];

/// An LDAP table's settings from a Postfix ldap_table file.
pub fn settings(params: &Params, mut config: TableConfig) -> Result<TableConfig, CfError> {
    for (name, value) in &params.values {
        if TRANSLATED.contains(&name.as_str()) {
            continue;
        }
        match NO_EFFECT.iter().find(|(n, _)| n == name) {
            Some((_, None)) => {}
            Some((_, Some(allowed))) if allowed.contains(&value.to_ascii_lowercase().as_str()) => {}
            Some(_) => return Err(params.unsupported(name, "not supported with this value")),
            None => {
                return Err(params.unsupported(name, "not an ldap_table(5) setting Sluice supports"))
            }
        }
    }
    let get = |name: &str, default: &str| params.get(name).unwrap_or(default).to_string();
    let port = get("server_port", "389");
    config.uris = get("server_host", "localhost")
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|h| !h.is_empty())
        .map(|h| match h.contains("://") {
            true => h.to_string(),
            false if h.contains(':') => format!("ldap://{h}"),
            false => format!("ldap://{h}:{port}"),
        })
        .collect();
    config.base = get("search_base", "");
    config.filter = get("query_filter", "(mailacceptinggeneralid=%s)");
    config.attributes = get("result_attribute", "maildrop")
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    config.bind_dn = get("bind_dn", "");
    config.bind_password = get("bind_pw", "");
    config.starttls = yes(&get("start_tls", "no"));
    config.tls_ca_file = params.get("tls_ca_cert_file").map(Into::into);
    let timeout: u64 = get("timeout", "10")
        .parse()
        .map_err(|_| params.unsupported("timeout", "not a number of seconds"))?;
    config.connect_timeout_ms = timeout.max(1) * 1000;
    config.query_timeout_ms = timeout.max(1) * 1000;
    Ok(config)
}

/// Postfix's boolean values.
fn yes(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "yes" | "true" | "1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::cf::parse;

    #[test]
    fn postfix_names_and_defaults() {
        let p = parse("server_host = ldap1 ldap2:3389, ldaps://ldap3\nsearch_base = dc=x\nversion = 3\ntimeout = 2\n", "f").unwrap();
        let c = settings(&p, TableConfig::of_kind("ldap")).unwrap();
        assert_eq!(
            c.uris,
            ["ldap://ldap1:389", "ldap://ldap2:3389", "ldaps://ldap3"]
        );
        assert_eq!(
            (c.filter.as_str(), c.attributes.as_slice()),
            (
                "(mailacceptinggeneralid=%s)",
                ["maildrop".to_string()].as_slice()
            )
        );
        assert_eq!(c.query_timeout_ms, 2000);
        let refused = |text: &str| {
            settings(&parse(text, "f").unwrap(), TableConfig::of_kind("ldap"))
                .unwrap_err()
                .to_string()
        };
        assert!(refused("special_result_attribute = member\n").contains("special_result_attribute"));
        assert!(refused("scope = one\n").contains("not supported with this value"));
        assert!(
            refused("quer_filter = (x=%s)\n").contains("quer_filter"),
            "a typo is not ignored"
        );
    }
}
