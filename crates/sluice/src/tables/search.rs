//! The keys an address is looked up under, in Postfix's order
//! (mail_addr_find, as virtual(5), canonical(5) and the mailbox maps
//! describe it): with `recipient_delimiter = +`, for `user+ext@domain`
//!
//! 1. `user+ext@domain` (the full address),
//! 2. `user@domain`,
//! 3. `user+ext`, then `user`, only when the domain is local (Postfix:
//!    `$myorigin`, `$mydestination`, `$inet_interfaces`,
//!    `$proxy_interfaces`),
//! 4. `@domain`,
//!
//! stopping at the first table that answers; a table that fails stops the
//! search with "try again", never with a later key's answer.
//!
//! Only the first key is *full*: the others are partial, and a pattern
//! table (regexp, pcre, cidr) is asked for full keys only, as Postfix
//! skips tables without `DICT_FLAG_FIXED` for partial keys, so a regexp
//! never sees `user` or `@domain` and mistakes it for an address.
//!
//! The extension is split as Postfix's split_addr does: at the first of
//! the delimiter characters; never for `postmaster`, `mailer-daemon` or
//! `double-bounce`, nor (with `-` among the delimiters and
//! `owner_request_special`) for `owner-…` and `…-request`; never when the
//! local part would be empty (`+ext`). `user+` splits, with an empty
//! extension. The address is in its canonical form (sluice-proto's, as
//! Postfix's external form: a local part quoted only when not a
//! dot-string); a quoted local part is split on its text, quoting
//! undone, and each part quoted again as needed (`"e f+x"@d`: `"e f"@d`). The extension a key left out keeps its delimiter (`-last`
//! with `recipient_delimiter = +-`), and [`mapped_address`] puts it back
//! on what was found, as `propagate_unmatched_extensions` says.
//!
//! For a domain in a domain list ([`domain_keys`]): the domain, then its
//! parents, as `parent.example` or `.parent.example` after
//! `parent_domain_matches_subdomains`.
//!
//! The order, the splitting, the extension put back and the parent
//! domains are held to the real Postfix's by the differential test
//! `tests/it/tables_search.rs` (virtual_alias_maps and relay_domains of
//! an isolated Postfix, `tests/it/common/postfix.rs`).
//!
//! Pure: no table, no I/O. Case is left as given; each table folds keys
//! as Postfix's does (fixed tables lower-case them).

use std::borrow::Cow;

/// What decides the keys, besides the address.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// `recipient_delimiter`: any one of these characters starts an
    /// extension ("" for none).
    pub delimiters: &'a str,
    /// The address's domain is local (`user` forms are tried).
    pub local: bool,
    /// Postfix's `owner_request_special` (default yes).
    pub owner_request_special: bool,
}

/// One key to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key<'a> {
    pub text: Cow<'a, str>,
    /// Only the full address is not partial; pattern tables skip partial
    /// keys.
    pub partial: bool,
    /// The extension this key left out, *with* its delimiter (`+ext`,
    /// `-ext`: Postfix's saved extension), its quoting undone, for
    /// `propagate_unmatched_extensions` ([`mapped_address`]). Set for
    /// `user@domain` and `user` only: `@domain` and `user+ext` leave
    /// nothing out.
    pub extension: Option<Cow<'a, str>>,
}

/// The extension of `local`, if Postfix would split it: the local part
/// before the first delimiter, and what follows that delimiter.
pub fn split_extension<'a>(local: &'a str, rules: &Rules<'_>) -> Option<(&'a str, &'a str)> {
    if rules.delimiters.is_empty() {
        return None;
    }
    let reserved = ["postmaster", "mailer-daemon", "double-bounce"];
    if reserved.iter().any(|r| local.eq_ignore_ascii_case(r)) {
        return None;
    }
    if rules.owner_request_special && rules.delimiters.contains('-') {
        let lower = local.to_ascii_lowercase();
        if lower.starts_with("owner-") || (lower.len() > 8 && lower.ends_with("-request")) {
            return None;
        }
    }
    let at = local.find(|c| rules.delimiters.contains(c))?;
    if at == 0 {
        // The local part would be empty.
        return None;
    }
    let delimiter_len = local[at..].chars().next().map_or(1, char::len_utf8);
    Some((&local[..at], &local[at + delimiter_len..]))
}

/// The keys `address` is looked up under, in order (see the head
/// comment). An address without `@` is looked up as itself only.
pub fn address_keys<'a>(address: &'a str, rules: &Rules<'_>) -> Vec<Key<'a>> {
    let full = Key {
        text: Cow::Borrowed(address),
        partial: false,
        extension: None,
    };
    let Some(at) = address.rfind('@') else {
        return vec![full];
    };
    let (local, domain) = (&address[..at], &address[at + 1..]);
    // Split as Postfix does: the text, its quoting undone; each part
    // quoted again as needed.
    let text = local_text(local);
    let parts = split_extension(&text, rules).map(|(bare, _)| match &text {
        Cow::Borrowed(t) => (
            quote(Cow::Borrowed(&t[..bare.len()])),
            Cow::Borrowed(&t[bare.len()..]),
        ),
        Cow::Owned(t) => (
            quote(Cow::Owned(t[..bare.len()].to_string())),
            Cow::Owned(t[bare.len()..].to_string()),
        ),
    });
    let mut keys = vec![full];
    let partial = |text: Cow<'a, str>, extension| Key {
        text,
        partial: true,
        extension,
    };
    if let Some((bare, extension)) = &parts {
        let key = format!("{bare}@{domain}").into();
        keys.push(partial(key, Some(extension.clone())));
    }
    if rules.local {
        keys.push(partial(Cow::Borrowed(local), None));
        if let Some((bare, extension)) = parts {
            keys.push(partial(bare, Some(extension)));
        }
    }
    keys.push(partial(Cow::Borrowed(&address[at..]), None));
    keys
}

/// A local part as an address has it, quoting undone (`"a b"` → `a b`).
fn local_text(local: &str) -> Cow<'_, str> {
    match local.starts_with('"') {
        true => Cow::Owned(sluice_proto::address::unquote(local)),
        false => Cow::Borrowed(local),
    }
}

/// A local part's text as an address has it: as is when a dot-string,
/// else quoted with `"` and `\` escaped (Postfix's quote_822_local,
/// sluice-proto's canonical form).
pub fn quote_local(text: &str) -> Cow<'_, str> {
    quote(Cow::Borrowed(text))
}

fn quote(text: Cow<'_, str>) -> Cow<'_, str> {
    if sluice_proto::address::is_dot_string(&text) {
        return text;
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
    Cow::Owned(out)
}

/// What a value found for `address` makes of it, one address of the
/// value (Postfix's mail_addr_map; a value listing several addresses is
/// split by the caller and each is passed here):
///
/// - a value `@domain` keeps the address's local part, less the
///   extension its key left out: `user+ext@a` found under `@a` with
///   `@b` gives `user+ext@b`;
/// - with `propagate` (`propagate_unmatched_extensions` names the
///   table's use: canonical and virtual by default), the extension the
///   key left out is put back ([`propagate_extension`]).
pub fn mapped_address(
    address: &str,
    found: &str,
    extension: Option<&str>,
    propagate: bool,
) -> String {
    let value = match found.strip_prefix('@') {
        Some(_) => {
            let local = address.rfind('@').map_or(address, |at| &address[..at]);
            let text = local_text(local);
            let text = text.strip_suffix(extension.unwrap_or("")).unwrap_or(&text);
            format!("{}{found}", quote_local(text))
        }
        None => found.to_string(),
    };
    match extension {
        Some(extension) if propagate => propagate_extension(&value, extension),
        _ => value,
    }
}

/// `target` with `extension` (its delimiter included) put at the end of
/// its local part (before its last `@`, or at its end when it has none),
/// quoted again as needed; as Postfix does, even when `target` has an
/// extension already.
pub fn propagate_extension(target: &str, extension: &str) -> String {
    let (local, rest) = target
        .rfind('@')
        .map_or((target, ""), |at| target.split_at(at));
    let text = format!("{}{extension}", local_text(local));
    format!("{}{rest}", quote_local(&text))
}

/// The keys a domain is looked up under in a table named in a domain
/// list (`relay_domains`, `mydestination`, `virtual_alias_domains` …:
/// Postfix's match_hostname), in order: the domain itself, then at each
/// dot after its first character the rest, as a parent
/// (`sub.example.com`, `example.com`, `com`) when the list is named in
/// `parent_domain_matches_subdomains`, else with its leading dot
/// (`sub.example.com`, `.example.com`, `.com`): so a `.example.com`
/// entry means "strict subdomains" only without the flag, and an
/// `example.com` entry covers its subdomains only with it.
///
/// Only the first key is full: Postfix asks pattern tables (regexp,
/// pcre, cidr) the domain itself only. (The access maps of
/// `check_*_access` walk the same keys, but not for a numeric address;
/// the caller skips the parents there.) Case is left as given; an empty
/// domain has no keys.
pub fn domain_keys(domain: &str, parent_matches_subdomains: bool) -> Vec<&str> {
    let mut keys = Vec::new();
    let mut at = 0;
    while at < domain.len() {
        keys.push(&domain[at..]);
        // Byte search: a dot is never inside a UTF-8 sequence, so every
        // cut is on a character boundary.
        let Some(dot) = domain.as_bytes()[at + 1..].iter().position(|&b| b == b'.') else {
            break;
        };
        at += 1 + dot + usize::from(parent_matches_subdomains);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLUS: Rules = Rules {
        delimiters: "+",
        local: false,
        owner_request_special: true,
    };

    fn texts(address: &str, rules: &Rules) -> Vec<String> {
        address_keys(address, rules)
            .into_iter()
            .map(|k| k.text.into_owned())
            .collect()
    }

    #[test]
    fn a_remote_address_with_an_extension() {
        assert_eq!(
            texts("user+ext@example.com", &PLUS),
            ["user+ext@example.com", "user@example.com", "@example.com"]
        );
        let keys = address_keys("user+ext@example.com", &PLUS);
        assert!(!keys[0].partial && keys[1].partial && keys[2].partial);
        assert_eq!(keys[1].extension.as_deref(), Some("+ext"));
        assert_eq!(keys[2].extension, None);
    }

    #[test]
    fn a_local_address_tries_the_local_part_too() {
        let local = Rules {
            local: true,
            ..PLUS
        };
        assert_eq!(
            texts("user+ext@localhost", &local),
            [
                "user+ext@localhost",
                "user@localhost",
                "user+ext",
                "user",
                "@localhost"
            ]
        );
        assert_eq!(
            texts("user@localhost", &local),
            ["user@localhost", "user", "@localhost"]
        );
    }

    #[test]
    fn no_delimiter_no_extension_and_a_bare_name_is_itself() {
        let none = Rules {
            delimiters: "",
            ..PLUS
        };
        assert_eq!(
            texts("user+ext@example.com", &none),
            ["user+ext@example.com", "@example.com"]
        );
        assert_eq!(texts("user", &PLUS), ["user"]);
    }

    #[test]
    fn reserved_and_owner_request_names_are_not_split() {
        let dash = Rules {
            delimiters: "-+",
            ..PLUS
        };
        for local in ["postmaster", "MAILER-DAEMON", "owner-list", "list-request"] {
            assert_eq!(split_extension(local, &dash), None, "{local}");
        }
        let plain = Rules {
            owner_request_special: false,
            ..dash
        };
        assert_eq!(
            split_extension("owner-list", &plain),
            Some(("owner", "list"))
        );
        assert_eq!(split_extension("a-b+c", &dash), Some(("a", "b+c")));
    }

    #[test]
    fn an_empty_local_part_is_never_made() {
        assert_eq!(split_extension("+ext", &PLUS), None);
        assert_eq!(split_extension("user+", &PLUS), Some(("user", "")));
    }

    #[test]
    fn an_unmatched_extension_is_put_back_with_its_delimiter() {
        let dash = Rules {
            delimiters: "+-",
            ..PLUS
        };
        let keys = address_keys("first-last@example.com", &dash);
        assert_eq!(keys[1].text, "first@example.com");
        assert_eq!(keys[1].extension.as_deref(), Some("-last"));
        let to = |found, key: &Key, propagate| {
            mapped_address(
                "first-last@example.com",
                found,
                key.extension.as_deref(),
                propagate,
            )
        };
        assert_eq!(to("t@hit.test", &keys[1], true), "t-last@hit.test");
        assert_eq!(to("t@hit.test", &keys[1], false), "t@hit.test");
        assert_eq!(to("t+x@hit.test", &keys[1], true), "t+x-last@hit.test");
        assert_eq!(to("@hit.test", &keys[1], true), "first-last@hit.test");
        assert_eq!(to("@hit.test", &keys[1], false), "first@hit.test");
        // `@domain` leaves nothing out: the local part is kept whole.
        assert_eq!(to("@hit.test", &keys[2], false), "first-last@hit.test");
        assert_eq!(propagate_extension("local", "+x"), "local+x");
        assert_eq!(propagate_extension("a@b@c", "+"), "\"a@b+\"@c");
    }

    #[test]
    fn a_quoted_local_part_is_split_unquoted_and_quoted_again() {
        let local = Rules {
            local: true,
            ..PLUS
        };
        assert_eq!(
            texts("\"e f+x\"@example.com", &local),
            [
                "\"e f+x\"@example.com",
                "\"e f\"@example.com",
                "\"e f+x\"",
                "\"e f\"",
                "@example.com"
            ]
        );
        let keys = address_keys("\"g+h i\"@example.com", &PLUS);
        assert_eq!(keys[1].text, "g@example.com");
        let extension = keys[1].extension.as_deref();
        assert_eq!(extension, Some("+h i"));
        let to = |found| mapped_address("\"g+h i\"@example.com", found, extension, true);
        assert_eq!(to("t@hit.test"), "\"t+h i\"@hit.test");
        assert_eq!(to("@hit.test"), "\"g+h i\"@hit.test");
        assert_eq!(to("\"a b\"@hit.test"), "\"a b+h i\"@hit.test");
        assert_eq!(quote_local("a\"b"), "\"a\\\"b\"");
        assert_eq!(quote_local(".a"), "\".a\"");
        assert_eq!(quote_local("a.b"), "a.b");
    }

    #[test]
    fn a_domain_and_its_parents_in_either_style() {
        assert_eq!(
            domain_keys("a.b.example.com", true),
            ["a.b.example.com", "b.example.com", "example.com", "com"]
        );
        assert_eq!(
            domain_keys("a.b.example.com", false),
            ["a.b.example.com", ".b.example.com", ".example.com", ".com"]
        );
        assert_eq!(domain_keys("com", true), ["com"]);
        assert!(domain_keys("", false).is_empty());
        // A leading or trailing dot, and a name not ASCII, as Postfix
        // walks them.
        assert_eq!(domain_keys(".x.org", true), [".x.org", "org"]);
        assert_eq!(domain_keys("x.org.", true), ["x.org.", "org."]);
        assert_eq!(domain_keys("x.org.", false), ["x.org.", ".org.", "."]);
        assert_eq!(domain_keys("é.org", false), ["é.org", ".org"]);
    }
}
