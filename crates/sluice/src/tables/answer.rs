//! What a table found for a key, in both the shapes its users need.
//!
//! Postfix's tables answer one string: several values (LDAP attribute
//! values, SQL rows, a unionmap's members) are joined with commas. Users
//! that take a list (aliases, `a, b c`) split it at commas and blanks;
//! users that take a sentence (an access table's `REJECT go away`) take it
//! whole. An [`Answer`] keeps both: [`Answer::raw`] is Postfix's string,
//! and the answer derefs to the list.
//!
//! Invariant: `raw` is what Postfix would return for the same data; the
//! list is never empty for a found key made from text (a text line with no
//! value is skipped by the parser, not found as an empty answer).

use std::ops::Deref;
use std::sync::Arc;

/// A found key's value: Postfix's string and its list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    raw: String,
    list: Vec<String>,
}

/// A shared answer (tables keep them in maps and caches).
pub type Values = Arc<Answer>;

impl Answer {
    /// A value given as one string (a text file's line, a socketmap or
    /// tcp reply, a pattern's result): the list is its comma- and
    /// blank-separated parts.
    pub fn text(raw: impl Into<String>) -> Answer {
        let raw = raw.into();
        let list = raw
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        Answer { raw, list }
    }

    /// Several values (LDAP attribute values, SQL rows): each stays whole
    /// in the list, and Postfix's string joins them with commas.
    pub fn values(list: Vec<String>) -> Answer {
        Answer {
            raw: list.join(","),
            list,
        }
    }

    /// Replaces Postfix's string, keeping the list (a union joins its
    /// members' strings, not their lists).
    pub(super) fn set_raw(&mut self, raw: String) {
        self.raw = raw;
    }

    /// The value as Postfix returns it.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The values as a list.
    pub fn as_slice(&self) -> &[String] {
        &self.list
    }
}

impl Deref for Answer {
    type Target = [String];
    fn deref(&self) -> &[String] {
        &self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keeps_the_sentence_and_splits_the_list() {
        let a = Answer::text("REJECT go  away, now");
        assert_eq!(a.raw(), "REJECT go  away, now");
        assert_eq!(a.as_slice(), ["REJECT", "go", "away", "now"]);
        let v = Answer::values(vec!["a b".into(), "c".into()]);
        assert_eq!(v.raw(), "a b,c");
        assert_eq!(v.len(), 2);
    }
}
