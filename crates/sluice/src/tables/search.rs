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
//! extension.
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
    /// The extension this key left out (without its delimiter), for
    /// `propagate_unmatched_extensions`.
    pub dropped: Option<&'a str>,
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
        dropped: None,
    };
    let Some(at) = address.rfind('@') else {
        return vec![full];
    };
    let (local, domain) = (&address[..at], &address[at + 1..]);
    let split = split_extension(local, rules);
    let mut keys = vec![full];
    let partial = |text: Cow<'a, str>, dropped| Key {
        text,
        partial: true,
        dropped,
    };
    if let Some((bare, ext)) = split {
        keys.push(partial(format!("{bare}@{domain}").into(), Some(ext)));
    }
    if rules.local {
        keys.push(partial(Cow::Borrowed(local), None));
        if let Some((bare, ext)) = split {
            keys.push(partial(Cow::Borrowed(bare), Some(ext)));
        }
    }
    keys.push(partial(Cow::Borrowed(&address[at..]), None));
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
        assert_eq!(keys[1].dropped, Some("ext"));
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
}
