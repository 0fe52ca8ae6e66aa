//! Postfix's lookup-table source format, the text `postmap` reads (and
//! the `texthash:` type uses as is): a site's `/etc/postfix/virtual` or
//! `sender_login` file, read without a `.db`/`.lmdb` compiler. An
//! indexed file only made lookups fast for a process that opened it per
//! lookup; Sluice keeps the parsed map in memory and swaps it whole when
//! the file changes, so the source is all it needs.
//!
//! The format, as Postfix 3.7's `postmap -q … texthash:` reads it (the
//! differential test `tests/it/tables_text.rs` holds both to the same
//! answers):
//! - logical lines as every Postfix table file has them
//!   (`pattern/lines.rs`): continuations, blank and comment lines, so a
//!   `#` elsewhere is text;
//! - a logical line is `key whitespace value`: the key up to the first
//!   blank outside double quotes and not after a backslash (kept as
//!   written: `"a b"@example.com` is a key, quotes included; a quote not
//!   closed skips the line with a warning), folded to lower case; the
//!   value the rest, trimmed at both ends (a CRLF file's CR included),
//!   inner blanks kept;
//! - a line with no value, or a continuation with nothing to continue, is
//!   skipped with a warning; a key given twice keeps its first value,
//!   with a warning.
//!
//! The value is one string, as Postfix's is: a caller that takes a list
//! (aliases: `a, b`) splits it, as Postfix's does.
//!
//! Trust: the file is the operator's; nothing in it is executed, and a
//! bad line costs a warning, as with Postfix, not the whole table.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use super::pattern::lines::{logical_lines, Logical};

/// What is wrong with a logical line (skipped, as `postmap` skips it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("expected format: key whitespace value -- ignoring this line")]
    NoValue,
    #[error("duplicate entry: the first value is kept")]
    Duplicate,
    #[error("logical line must not start with whitespace")]
    LeadingWhitespace,
    #[error("unbalanced '\"' -- ignoring this line")]
    UnbalancedQuote,
}

/// A line skipped or overruled, with the number of the physical line
/// where its logical line starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub line: usize,
    pub key: String,
    pub problem: Problem,
}

/// The map a source text gives, and its warnings.
pub fn parse(text: &str) -> (HashMap<String, String>, Vec<Warning>) {
    let mut map = HashMap::new();
    let mut warnings = Vec::new();
    let (lines, orphans) = logical_lines(text);
    warnings.extend(orphans.into_iter().map(|line| Warning {
        line,
        key: String::new(),
        problem: Problem::LeadingWhitespace,
    }));
    for Logical { line, text } in lines {
        let Some((key, value)) = split_entry(&text) else {
            let key = String::new();
            let problem = Problem::UnbalancedQuote;
            warnings.push(Warning { line, key, problem });
            continue;
        };
        let key = super::fold(key);
        let problem = match map.entry(key.clone()) {
            _ if value.is_empty() => Some(Problem::NoValue),
            Entry::Occupied(_) => Some(Problem::Duplicate),
            Entry::Vacant(slot) => {
                slot.insert(value.to_string());
                None
            }
        };
        if let Some(problem) = problem {
            warnings.push(Warning { line, key, problem });
        }
    }
    (map, warnings)
}

/// `key whitespace value` → the key and the trimmed value ("" if none);
/// `None` when a quote in the key is not closed. The key ends at the
/// first blank outside double quotes and not after a backslash, and is
/// kept as written (quotes and backslashes included), as Postfix's
/// texthash and postmap read it: `"a b"@example.com` is one key.
fn split_entry(logical: &str) -> Option<(&str, &str)> {
    let blank = |c: char| c.is_ascii_whitespace();
    let (mut quoted, mut escaped) = (false, false);
    let mut end = logical.len();
    for (at, c) in logical.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            c if blank(c) && !quoted => {
                end = at;
                break;
            }
            _ => {}
        }
    }
    if quoted {
        return None;
    }
    Some((&logical[..end], logical[end..].trim_matches(blank)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_comments_case_and_duplicates_as_postmap_reads_them() {
        let text = "a b\n  c\nKey1 Value One  \n# comment\n  # indented\nk2\n\
                    k3 v3 # kept\ndup first\ndup second\nk7 v7\r\nk8 a\n\n  b\n  # c\n  d\n";
        let (map, warnings) = parse(text);
        assert_eq!(map["a"], "b  c");
        assert_eq!(map["key1"], "Value One");
        assert_eq!(map["k3"], "v3 # kept");
        assert_eq!(map["dup"], "first");
        assert_eq!(map["k7"], "v7");
        assert_eq!(map["k8"], "a  b  d");
        assert!(!map.contains_key("k2"));
        let problems: Vec<(usize, Problem)> =
            warnings.iter().map(|w| (w.line, w.problem)).collect();
        assert_eq!(problems, [(6, Problem::NoValue), (9, Problem::Duplicate)]);
    }

    #[test]
    fn a_key_may_hold_quoted_or_escaped_blanks() {
        let text = "\"A b\"@x v1\n\"c\\\" d\"@x v2\nk\\ ey v3\n\"open x v4\ne\\ x\n";
        let (map, warnings) = parse(text);
        assert_eq!(map["\"a b\"@x"], "v1");
        assert_eq!(map["\"c\\\" d\"@x"], "v2");
        assert_eq!(map["k\\ ey"], "v3");
        assert_eq!(map.len(), 3);
        let problems: Vec<(usize, Problem)> =
            warnings.iter().map(|w| (w.line, w.problem)).collect();
        assert_eq!(
            problems,
            [(4, Problem::UnbalancedQuote), (5, Problem::NoValue)]
        );
    }

    #[test]
    fn a_continuation_with_nothing_to_continue_is_skipped() {
        let (map, warnings) = parse("  lead x\nk y\n");
        assert_eq!(map.len(), 1);
        assert_eq!(map["k"], "y");
        assert_eq!(warnings[0].problem, Problem::LeadingWhitespace);
    }
}
