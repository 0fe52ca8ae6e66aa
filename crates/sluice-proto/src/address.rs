//! RFC 5321 paths (`<local@domain>`) parsed strictly, kept in a form that
//! is safe to write back on the wire.
//!
//! Hand-written on purpose: the parsers we could use (smtp-proto) unquote
//! local parts and re-emit them raw, drop CRs and strip source routes
//! silently, which is how a quoted `"v@evil> ORCPT=…"@ours` recipient
//! became a command injection at the next hop. Here every address is
//! checked against the RFC 5321 §4.1.2 grammar (RFC 6531 for UTF-8) and
//! stored canonically: a local part that is not a dot-string keeps its
//! quotes, with `"` and `\` escaped, so writing `<{address}>` can never
//! produce a different address or a parameter.
//!
//! Trust: the input is one command argument from a hostile client; the
//! caller has already refused control characters and invalid UTF-8.
//! Invariants: a [`Mailbox`] has a local part of at most 64 octets as
//! written, a domain of at most 255 octets with labels of at most 63 (or
//! an IPv4/IPv6 literal), ASCII letters in the domain lowercased, no
//! trailing dot; its path `<…>` is at most 256 octets.

use std::net::{Ipv4Addr, Ipv6Addr};

/// RFC 5321 §4.5.3.1: local part, domain, label and path limits (octets).
pub const MAX_LOCAL_PART: usize = 64;
pub const MAX_DOMAIN: usize = 255;
pub const MAX_LABEL: usize = 63;
pub const MAX_PATH: usize = 256;

/// A mailbox as it will be written on the wire: `local@domain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailbox {
    /// Local part as written: a dot-string, or a quoted string.
    pub local: String,
    /// Lowercased domain without a trailing dot, or `[literal]`.
    pub domain: String,
}

impl Mailbox {
    /// `local@domain`, safe inside `<…>` on the wire.
    pub fn address(&self) -> String {
        format!("{}@{}", self.local, self.domain)
    }

    /// The local part with quoting undone.
    pub fn local_text(&self) -> String {
        unquote(&self.local)
    }

    /// Sender-specified routing in the local part: `%`, `!` or `@`
    /// (RFC 2505 §2: the %-hack, bang paths and quoted `@`).
    pub fn has_routing(&self) -> bool {
        // Quoting changes nothing for these three: look at the text as
        // stored (no copy per recipient).
        self.local.contains(['%', '!', '@'])
    }

    pub fn is_literal(&self) -> bool {
        self.domain.starts_with('[')
    }
}

/// A MAIL or RCPT path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Path {
    /// `<>`: the null reverse-path.
    Null,
    /// `<Postmaster>` with no domain (RFC 5321 §4.5.1).
    Postmaster,
    Mailbox {
        mailbox: Mailbox,
        /// A source route `<@a,@b:…>` was given (and ignored).
        source_route: bool,
    },
}

/// Why a path was refused; the text goes into the 501 reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressError {
    Syntax,
    NoDomain,
    LocalTooLong,
    DomainTooLong,
    PathTooLong,
    BadLiteral,
}

impl AddressError {
    pub fn text(self) -> &'static str {
        match self {
            AddressError::Syntax => "address syntax error",
            AddressError::NoDomain => "address without a domain",
            AddressError::LocalTooLong => "local part longer than 64 octets",
            AddressError::DomainTooLong => "domain or label too long",
            AddressError::PathTooLong => "address longer than 256 octets",
            AddressError::BadLiteral => "unsupported address literal",
        }
    }
}

/// Parses a path at the start of `s`; returns it and the rest of `s`.
pub fn parse_path(s: &str) -> Result<(Path, &str), AddressError> {
    let b = s.as_bytes();
    if b.first() != Some(&b'<') {
        return Err(AddressError::Syntax);
    }
    let end = closing_bracket(b).ok_or(AddressError::Syntax)?;
    if end + 1 > MAX_PATH {
        return Err(AddressError::PathTooLong);
    }
    let inner = &s[1..end];
    let rest = &s[end + 1..];
    if inner.is_empty() {
        return Ok((Path::Null, rest));
    }
    let (route, mailbox) = split_source_route(inner)?;
    let at = local_part_end(mailbox)?;
    let local = canonical_local(&mailbox[..at])?;
    if at == mailbox.len() {
        return if route.is_none() && local.eq_ignore_ascii_case("postmaster") {
            Ok((Path::Postmaster, rest))
        } else {
            Err(AddressError::NoDomain)
        };
    }
    let domain = parse_domain_or_literal(&mailbox[at + 1..])?;
    if local.len() > MAX_LOCAL_PART {
        return Err(AddressError::LocalTooLong);
    }
    Ok((
        Path::Mailbox {
            mailbox: Mailbox { local, domain },
            source_route: route.is_some(),
        },
        rest,
    ))
}

/// Parses a whole `local@domain` (no brackets), e.g. a table value.
pub fn parse_mailbox(s: &str) -> Result<Mailbox, AddressError> {
    match parse_path(&format!("<{s}>"))? {
        (Path::Mailbox { mailbox, .. }, "") => Ok(mailbox),
        _ => Err(AddressError::Syntax),
    }
}

/// Index of the `>` that closes the path starting at `b[0] == b'<'`,
/// outside any quoted string.
pub fn closing_bracket(b: &[u8]) -> Option<usize> {
    let (mut quoted, mut i) = (false, 1);
    while i < b.len() {
        match b[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            b'>' if !quoted => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Splits `@a,@b:mailbox` into the route and the mailbox.
fn split_source_route(inner: &str) -> Result<(Option<&str>, &str), AddressError> {
    if !inner.starts_with('@') {
        return Ok((None, inner));
    }
    let colon = inner.find(':').ok_or(AddressError::Syntax)?;
    for hop in inner[..colon].split(',') {
        let domain = hop.strip_prefix('@').ok_or(AddressError::Syntax)?;
        parse_domain(domain)?;
    }
    Ok((Some(&inner[..colon]), &inner[colon + 1..]))
}

/// Where the local part ends (the `@`, or the end of `s`).
fn local_part_end(s: &str) -> Result<usize, AddressError> {
    let b = s.as_bytes();
    if b.first() == Some(&b'"') {
        let mut i = 1;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                b'"' => {
                    return match b.get(i + 1) {
                        None => Ok(i + 1),
                        Some(b'@') => Ok(i + 1),
                        Some(_) => Err(AddressError::Syntax),
                    }
                }
                _ => i += 1,
            }
        }
        return Err(AddressError::Syntax);
    }
    Ok(s.rfind('@').unwrap_or(s.len()))
}

fn is_atext(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii()
}

/// RFC 5321 Dot-string: atoms of atext joined by single dots.
pub fn is_dot_string(s: &str) -> bool {
    !s.is_empty()
        && s.split('.')
            .all(|a| !a.is_empty() && a.chars().all(is_atext))
}

/// The local part as it should be written: a dot-string as is, anything
/// else quoted with `"` and `\` escaped.
fn canonical_local(s: &str) -> Result<String, AddressError> {
    let text = if let Some(q) = s.strip_prefix('"') {
        let q = q.strip_suffix('"').ok_or(AddressError::Syntax)?;
        decode_quoted(q)?
    } else if is_dot_string(s) {
        return Ok(s.to_string());
    } else {
        return Err(AddressError::Syntax);
    };
    if is_dot_string(&text) {
        return Ok(text);
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// RFC 5321 QcontentSMTP: qtextSMTP or `\` + printable ASCII.
fn decode_quoted(q: &str) -> Result<String, AddressError> {
    let mut out = String::with_capacity(q.len());
    let mut chars = q.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) if (' '..='~').contains(&e) => out.push(e),
                _ => return Err(AddressError::Syntax),
            },
            '"' => return Err(AddressError::Syntax),
            c if (' '..='~').contains(&c) || !c.is_ascii() => out.push(c),
            _ => return Err(AddressError::Syntax),
        }
    }
    Ok(out)
}

/// Undoes the quoting of a canonical local part.
pub fn unquote(local: &str) -> String {
    match local.strip_prefix('"').and_then(|q| q.strip_suffix('"')) {
        Some(q) => decode_quoted(q).unwrap_or_else(|_| q.to_string()),
        None => local.to_string(),
    }
}

fn parse_domain_or_literal(s: &str) -> Result<String, AddressError> {
    match s.strip_prefix('[') {
        Some(lit) => parse_literal(lit.strip_suffix(']').ok_or(AddressError::Syntax)?),
        None => parse_domain(s),
    }
}

/// RFC 5321 §4.1.3 address literals: IPv4 or `IPv6:`; general ones are
/// refused.
fn parse_literal(lit: &str) -> Result<String, AddressError> {
    if let Some(v6) = lit
        .get(..5)
        .filter(|t| t.eq_ignore_ascii_case("IPv6:"))
        .map(|_| &lit[5..])
    {
        let ip: Ipv6Addr = v6.parse().map_err(|_| AddressError::BadLiteral)?;
        return Ok(format!("[IPv6:{ip}]"));
    }
    let ip: Ipv4Addr = lit.parse().map_err(|_| AddressError::BadLiteral)?;
    Ok(format!("[{ip}]"))
}

/// RFC 5321 Domain (U-labels allowed for SMTPUTF8): lowercased, one
/// trailing dot removed.
pub fn parse_domain(s: &str) -> Result<String, AddressError> {
    let s = s.strip_suffix('.').unwrap_or(s);
    if s.len() > MAX_DOMAIN {
        return Err(AddressError::DomainTooLong);
    }
    for label in s.split('.') {
        if label.len() > MAX_LABEL {
            return Err(AddressError::DomainTooLong);
        }
        let ok = !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || !c.is_ascii());
        if !ok {
            return Err(AddressError::Syntax);
        }
    }
    Ok(s.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mailbox(s: &str) -> Result<String, AddressError> {
        match parse_path(s)? {
            (Path::Mailbox { mailbox, .. }, _) => Ok(mailbox.address()),
            (other, _) => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn canonical_forms() {
        let table = [
            ("<a@b.example>", "a@b.example"),
            ("<A.B@EXAMPLE.Org.>", "A.B@example.org"),
            ("<\"abc\"@x.example>", "abc@x.example"),
            ("<\"john smith\"@x.example>", "\"john smith\"@x.example"),
            ("<\"a\\\"b\"@x.example>", "\"a\\\"b\"@x.example"),
            (
                "<\"v@evil.test> ORCPT=rfc822;x\"@ours.test>",
                "\"v@evil.test> ORCPT=rfc822;x\"@ours.test",
            ),
            ("<@a.example,@b.example:u@d.example>", "u@d.example"),
            ("<u@[192.0.2.1]>", "u@[192.0.2.1]"),
            ("<u@[ipv6:2001:DB8::1]>", "u@[IPv6:2001:db8::1]"),
            ("<u@bücher.example>", "u@bücher.example"),
        ];
        for (input, want) in table {
            assert_eq!(mailbox(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn refusals() {
        let table = [
            ("<a@b", AddressError::Syntax),
            ("<nodomain>", AddressError::NoDomain),
            ("<a..b@x.example>", AddressError::Syntax),
            ("<a b@x.example>", AddressError::Syntax),
            ("<a@-x.example>", AddressError::Syntax),
            ("<a@x_y.example>", AddressError::Syntax),
            ("<a@x..example>", AddressError::Syntax),
            ("<\"a\"b@x.example>", AddressError::Syntax),
            ("<u@[1.2.3]>", AddressError::BadLiteral),
            ("<u@[tag:stuff]>", AddressError::BadLiteral),
        ];
        for (input, want) in table {
            assert_eq!(mailbox(input), Err(want), "{input}");
        }
        let long_local = format!("<{}@x.example>", "a".repeat(65));
        assert_eq!(mailbox(&long_local), Err(AddressError::LocalTooLong));
        let long_label = format!("<a@{}.example>", "b".repeat(64));
        assert_eq!(mailbox(&long_label), Err(AddressError::DomainTooLong));
        let long_path = format!("<a@{}example>", "b.".repeat(127));
        assert_eq!(mailbox(&long_path), Err(AddressError::PathTooLong));
    }

    #[test]
    fn special_paths_and_routing() {
        assert_eq!(parse_path("<>").unwrap().0, Path::Null);
        assert_eq!(parse_path("<PostMaster>").unwrap().0, Path::Postmaster);
        assert_eq!(
            parse_path("<@a.example:postmaster>"),
            Err(AddressError::NoDomain)
        );
        let (path, rest) = parse_path("<a@b.example> SIZE=10").unwrap();
        assert_eq!(rest, " SIZE=10");
        assert!(matches!(
            path,
            Path::Mailbox {
                source_route: false,
                ..
            }
        ));
        for routed in [
            "<v%evil@ours.example>",
            "<evil!v@ours.example>",
            "<\"v@evil\"@ours.example>",
        ] {
            match parse_path(routed).unwrap().0 {
                Path::Mailbox { mailbox, .. } => assert!(mailbox.has_routing(), "{routed}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
