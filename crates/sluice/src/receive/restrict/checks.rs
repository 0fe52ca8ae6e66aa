//! The checks' pure parts: Postfix's replies (`<name>: Class rejected:
//! text`), host name syntax as Postfix's valid_hostname, and the key
//! search of one access table.
//!
//! Trust: names and addresses are the client's; they are only compared
//! and quoted between `<` `>` (the parser refused control characters).

use std::net::IpAddr;
use std::sync::Arc;

use super::keys::AccessKey;
use super::{Facts, Refusal, Stage};
use crate::tables::{LookupError, Table, Values};

/// Looks keys up in order; partial keys only in fixed tables.
pub(super) async fn search(
    table: &Arc<Table>,
    keys: &[AccessKey],
) -> Result<Option<Values>, LookupError> {
    for key in keys {
        if key.partial && !table.fixed() {
            continue;
        }
        if let Some(v) = table.lookup(&key.text).await? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// The name and class a list's own refusals use (Postfix's reply_name,
/// reply_class).
pub(super) fn subject(stage: Stage, f: &Facts<'_>) -> (String, &'static str) {
    match stage {
        Stage::Client => (namaddr(f.client_name, f.client_ip), "Client host"),
        Stage::Helo => (f.helo.unwrap_or("").to_string(), "Helo command"),
        Stage::Sender => (f.sender.unwrap_or("").to_string(), "Sender address"),
        Stage::Relay | Stage::Recipient => {
            (f.recipient.unwrap_or("").to_string(), "Recipient address")
        }
        Stage::Data => ("DATA".into(), "Data command"),
        Stage::EndOfData => ("END-OF-MESSAGE".into(), "End-of-data"),
    }
}

pub(super) fn namaddr(name: &str, ip: IpAddr) -> String {
    format!("{name}[{ip}]")
}

/// `<name>: Class rejected: text`. The enhanced code's class is the
/// reply's (a `450` for an unknown user is `4.1.1`, as Postfix's
/// smtpd_check_reject makes it).
pub fn reply(
    code: u16,
    enhanced: &str,
    name: &str,
    class: &str,
    text: &str,
    by: &'static str,
) -> Refusal {
    let mut enhanced = enhanced.to_string();
    if (400..600).contains(&code) && enhanced.is_char_boundary(1) {
        enhanced.replace_range(0..1, &(code / 100).to_string());
    }
    Refusal {
        code,
        enhanced,
        text: format!("<{name}>: {class} rejected: {text}"),
        by,
    }
}

/// A text's leading enhanced status code (`4.2.0 Greylisted`), else
/// `default` (Postfix's dsn_split: class 2, 4 or 5, then 1-3 and 1-3
/// digits, then a blank).
pub(super) fn dsn_split<'a>(default: &'a str, text: &'a str) -> (&'a str, &'a str) {
    let Some((first, rest)) = text.split_once(' ') else {
        return (default, text);
    };
    let parts: Vec<&str> = first.split('.').collect();
    let digits =
        |p: &str, n: usize| (1..=n).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit());
    match parts.as_slice() {
        [c, s, d] if matches!(*c, "2" | "4" | "5") && digits(s, 3) && digits(d, 3) => {
            (first, rest.trim_start())
        }
        _ => (default, text),
    }
}

pub(super) fn relay_denied(code: u16, enhanced: &str, rcpt: &str, by: &'static str) -> Refusal {
    Refusal {
        code,
        enhanced: enhanced.into(),
        text: format!("<{rcpt}>: Relay access denied"),
        by,
    }
}

/// `451 4.3.0`: a table could not answer.
pub(super) fn lookup_failed(name: &str, by: &'static str) -> Refusal {
    Refusal {
        code: 451,
        enhanced: "4.3.0".into(),
        text: format!("<{name}>: Temporary lookup failure"),
        by,
    }
}

/// `451 4.3.5`: an answer or a class Sluice cannot apply.
pub(super) fn config_error(by: &'static str) -> Refusal {
    Refusal {
        code: 451,
        enhanced: "4.3.5".into(),
        text: "Server configuration error".into(),
        by,
    }
}

/// An address whose domain is a fully-qualified name or an address
/// literal (reject_non_fqdn_sender/recipient).
pub(super) fn fqdn_address(addr: &str) -> bool {
    match addr.rsplit_once('@') {
        Some((_, domain)) => is_literal(domain) || fqdn_host(domain),
        None => false,
    }
}

pub(super) fn is_literal(name: &str) -> bool {
    name.starts_with('[') && name.ends_with(']')
}

/// A name with a dot that is not at its end.
pub(super) fn fqdn_host(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    name.contains('.') && valid_hostname(name)
}

/// Postfix's valid_hostname: labels of letters, digits, `-` and `_`, of
/// 1..=63 octets, not starting or ending with `-`, at most 255 in all,
/// not all digits and dots.
fn valid_hostname(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    name.len() <= 255
        && !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// reject_invalid_helo_hostname: a valid host name, or an address
/// (bare or as a literal).
pub(super) fn valid_helo(helo: &str) -> bool {
    let inner = helo
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(helo);
    let inner = inner.strip_prefix("IPv6:").unwrap_or(inner);
    inner.parse::<IpAddr>().is_ok() || (!is_literal(helo) && valid_hostname(helo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_enhanced_codes() {
        assert_eq!(
            dsn_split("4.7.1", "4.2.0 Greylisted"),
            ("4.2.0", "Greylisted")
        );
        assert_eq!(dsn_split("5.7.1", "5.7.9  two"), ("5.7.9", "two"));
        assert_eq!(dsn_split("4.7.1", "Greylisted"), ("4.7.1", "Greylisted"));
        assert_eq!(dsn_split("4.7.1", "4.2 x"), ("4.7.1", "4.2 x"));
        assert_eq!(dsn_split("4.7.1", "3.2.1 x"), ("4.7.1", "3.2.1 x"));
        assert_eq!(dsn_split("4.7.1", "4.2.1000 x"), ("4.7.1", "4.2.1000 x"));
    }

    #[test]
    fn hostnames() {
        assert!(valid_helo("mail.example.com"));
        assert!(valid_helo("localhost"));
        assert!(valid_helo("[192.0.2.1]"));
        assert!(valid_helo("[IPv6:2001:db8::1]"));
        assert!(!valid_helo("bad..name"));
        assert!(!valid_helo("-x.example"));
        assert!(!valid_helo("a b"));
        assert!(!valid_helo("12345"));
        assert!(fqdn_host("mail.example.com"));
        assert!(!fqdn_host("localhost"));
        assert!(fqdn_address("u@example.com"));
        assert!(fqdn_address("u@[192.0.2.1]"));
        assert!(!fqdn_address("u@localhost"));
        assert!(!fqdn_address("u"));
    }
}
