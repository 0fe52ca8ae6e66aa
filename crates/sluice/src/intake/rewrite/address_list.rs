//! The addresses of an address-list header field (RFC 5322 §3.4: From:,
//! To:, Cc:, …), found where they are so that only their addr-specs are
//! rewritten and every other byte (display names, comments, groups,
//! folding) stays as it was.
//!
//! What it finds, as Postfix's tok822 does, tolerantly: each mailbox
//! between the top-level commas (and a group's `name:` … `;`), its
//! address the part in `<…>` when there is one (a source route
//! `@a,@b:` before it left alone), else its words without comments. A
//! quoted local part is given unquoted (Postfix's internal form) and
//! [`external`] quotes it again when it has to be.
//!
//! Trust: the field is the sender's, any bytes. Invariants: no recursion
//! (comments nest through a counter); an unclosed comment, quote or
//! bracket ends at the end of the field; at most [`MAX_TOKENS`] tokens
//! are read per field (the rest stays as it is, as Postfix's
//! `token_limit`); a span is always inside the field, on token bounds,
//! and never holds a line break unless the address itself was folded.

use std::ops::Range;

/// Postfix's `token_limit` default: tokens read per field.
pub const MAX_TOKENS: usize = 10_000;

/// One address found: where its addr-spec is in the field, and what it
/// says (quotes removed; an address that is not UTF-8 is not found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub span: Range<usize>,
    pub address: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An atom, a `.` or `@` (any byte that is no special).
    Word,
    Quoted,
    Literal,
    Comment,
    Special(u8),
}

#[derive(Debug, Clone, Copy)]
struct Token {
    kind: Kind,
    span: (usize, usize),
}

/// The addresses of `value` (the field's body after its colon).
pub fn addresses(value: &[u8]) -> Vec<Found> {
    let tokens = tokens(value);
    let mut found = Vec::new();
    let mut current: Vec<Token> = Vec::new();
    let mut in_angle = false;
    for t in tokens {
        match (t.kind, in_angle) {
            (Kind::Special(b'<'), false) => {
                in_angle = true;
                current.push(t);
            }
            (Kind::Special(b'>'), true) => {
                in_angle = false;
                current.push(t);
            }
            (Kind::Special(b':'), false) => current.clear(), // a group's name
            (Kind::Special(b',' | b';'), false) => {
                mailbox(value, &current, &mut found);
                current.clear();
            }
            _ => current.push(t),
        }
    }
    mailbox(value, &current, &mut found);
    found
}

/// The address of one mailbox's tokens, if it has one.
fn mailbox(value: &[u8], tokens: &[Token], found: &mut Vec<Found>) {
    let open = tokens.iter().position(|t| t.kind == Kind::Special(b'<'));
    let addr: &[Token] = match open {
        Some(i) => {
            let rest = &tokens[i + 1..];
            let close = rest
                .iter()
                .position(|t| t.kind == Kind::Special(b'>'))
                .unwrap_or(rest.len());
            let inside = &rest[..close];
            // A source route (`@a,@b:user@c`) ends at its last colon.
            match inside
                .iter()
                .rposition(|t| matches!(t.kind, Kind::Special(b':')))
            {
                Some(c) => &inside[c + 1..],
                None => inside,
            }
        }
        None => tokens,
    };
    let words: Vec<&Token> = addr.iter().filter(|t| t.kind != Kind::Comment).collect();
    let (Some(first), Some(last)) = (words.first(), words.last()) else {
        return;
    };
    if words.iter().any(|t| matches!(t.kind, Kind::Special(_))) {
        return; // (a stray special: not an address we can rewrite)
    }
    let mut address = Vec::new();
    for t in &words {
        let bytes = &value[t.span.0..t.span.1];
        match t.kind {
            Kind::Quoted => unquote(&bytes[1..], &mut address),
            _ => address.extend_from_slice(bytes),
        }
    }
    if let Ok(address) = String::from_utf8(address) {
        found.push(Found {
            span: first.span.0..last.span.1,
            address,
        });
    }
}

/// The text of a quoted string (after its opening quote), escapes
/// resolved, the closing quote (if any) dropped.
fn unquote(bytes: &[u8], out: &mut Vec<u8>) {
    let mut escaped = false;
    for &b in bytes {
        match (escaped, b) {
            (false, b'\\') => escaped = true,
            (false, b'"') => break,
            (false, b'\r' | b'\n') => {}
            _ => {
                out.push(b);
                escaped = false;
            }
        }
    }
}

/// The tokens of `value`, whitespace dropped, at most [`MAX_TOKENS`].
fn tokens(value: &[u8]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < value.len() && out.len() < MAX_TOKENS {
        let start = i;
        let kind = match value[i] {
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            b'"' => {
                i = quoted_end(value, i + 1, b'"');
                Kind::Quoted
            }
            b'[' => {
                i = quoted_end(value, i + 1, b']');
                Kind::Literal
            }
            b'(' => {
                i = comment_end(value, i + 1);
                Kind::Comment
            }
            c @ (b'<' | b'>' | b',' | b';' | b':' | b')' | b']') => {
                i += 1;
                Kind::Special(c)
            }
            b'.' | b'@' => {
                i += 1;
                Kind::Word
            }
            _ => {
                while i < value.len() && !is_special(value[i]) {
                    i += 1;
                }
                Kind::Word
            }
        };
        out.push(Token {
            kind,
            span: (start, i),
        });
    }
    out
}

fn is_special(b: u8) -> bool {
    matches!(
        b,
        b' ' | b'\t'
            | b'\r'
            | b'\n'
            | b'"'
            | b'['
            | b']'
            | b'('
            | b')'
            | b'<'
            | b'>'
            | b','
            | b';'
            | b':'
            | b'.'
            | b'@'
    )
}

/// Where a quoted string or domain literal opened before `i` ends (after
/// its `close`, or the field's end).
fn quoted_end(value: &[u8], mut i: usize, close: u8) -> usize {
    while i < value.len() {
        match value[i] {
            b'\\' => i += 2,
            b if b == close => return i + 1,
            _ => i += 1,
        }
    }
    value.len()
}

/// Where a comment opened before `i` ends (nested ones counted).
fn comment_end(value: &[u8], mut i: usize) -> usize {
    let mut depth = 1usize;
    while i < value.len() {
        match value[i] {
            b'\\' => i += 1,
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    value.len()
}

/// `address` (internal form, as [`addresses`] gives it) in the form
/// addresses have everywhere else (the envelope's, the tables' keys): its
/// local part quoted when it is not a dot-string (Postfix's
/// quote_822_local, `tables::search::quote_local`).
pub fn external(address: &str) -> String {
    match address.rfind('@') {
        Some(at) => format!(
            "{}{}",
            crate::tables::search::quote_local(&address[..at]),
            &address[at..]
        ),
        None => crate::tables::search::quote_local(address).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(value: &str) -> Vec<(String, String)> {
        addresses(value.as_bytes())
            .into_iter()
            .map(|f| (value[f.span].to_string(), f.address))
            .collect()
    }

    fn pair(span: &str, address: &str) -> (String, String) {
        (span.into(), address.into())
    }

    #[test]
    fn display_names_comments_and_bare_addresses() {
        assert_eq!(
            found(
                " \"Smith, Alice\" <alice@old.test>, bob@x.test (Bob (the) builder), Carol <c@y>"
            ),
            vec![
                pair("alice@old.test", "alice@old.test"),
                pair("bob@x.test", "bob@x.test"),
                pair("c@y", "c@y"),
            ]
        );
        assert_eq!(found(" a@b (c, d: e;)"), vec![pair("a@b", "a@b")]);
    }

    #[test]
    fn groups_and_empty_groups() {
        assert_eq!(
            found(" Team: a@x.test, B <b@x.test>; c@y.test"),
            vec![
                pair("a@x.test", "a@x.test"),
                pair("b@x.test", "b@x.test"),
                pair("c@y.test", "c@y.test"),
            ]
        );
        assert_eq!(found(" undisclosed-recipients:;"), vec![]);
    }

    #[test]
    fn folded_fields_and_quoted_local_parts() {
        assert_eq!(
            found(" A <a@x.test>,\r\n\tB\r\n <\"john doe\"@y.test>"),
            vec![
                pair("a@x.test", "a@x.test"),
                pair("\"john doe\"@y.test", "john doe@y.test"),
            ]
        );
        assert_eq!(external("john doe@y.test"), "\"john doe\"@y.test");
        assert_eq!(external("a\"b@y"), "\"a\\\"b\"@y");
        assert_eq!(external("a.b+c@y"), "a.b+c@y");
        assert_eq!(external(".a@y"), "\".a\"@y");
        assert_eq!(external("bob"), "bob");
    }

    #[test]
    fn null_routes_literals_and_junk() {
        assert_eq!(found(" <>"), vec![]);
        assert_eq!(
            found(" <@r1,@r2:u@d.test>"),
            vec![pair("u@d.test", "u@d.test")]
        );
        assert_eq!(
            found(" u@[192.0.2.1]"),
            vec![pair("u@[192.0.2.1]", "u@[192.0.2.1]")]
        );
        assert_eq!(found(" bob"), vec![pair("bob", "bob")]);
        // Unclosed: to the end, no panic, nothing outside the field.
        for junk in [
            " (((",
            " \"a@b",
            " <a@b",
            " a@b)",
            " [x",
            " ,,,;;:<>",
            " \\",
            "",
        ] {
            for f in addresses(junk.as_bytes()) {
                assert!(f.span.end <= junk.len(), "{junk:?}");
            }
        }
        assert_eq!(found(" a@b)"), vec![]);
    }

    #[test]
    fn hostile_fields_are_bounded() {
        let deep = format!(" {}a@b", "(".repeat(100_000));
        assert_eq!(addresses(deep.as_bytes()), vec![]);
        let many = " a@b,".repeat(50_000);
        let got = addresses(many.as_bytes());
        assert!(
            !got.is_empty() && got.len() <= MAX_TOKENS / 4 + 1,
            "{}",
            got.len()
        );
    }
}
