//! The values inside events: queue IDs ([`Qid`], hex as Postfix shows
//! them) and values written as they are shown ([`Shown`]), without a
//! string made first.
//!
//! Trusts nothing read back: a queue ID that is not hex fails to read.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A text field: borrowed when logged, owned when read back.
pub type Text<'a> = Cow<'a, str>;

/// A queue ID, shown (and written) in upper-case hex like Postfix's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Qid(pub u64);

impl fmt::Display for Qid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}", self.0)
    }
}

impl Serialize for Qid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Qid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(d)?;
        u64::from_str_radix(&text, 16)
            .map(Qid)
            .map_err(|_| serde::de::Error::custom(format!("not a queue ID: {text:?}")))
    }
}

impl PartialEq<str> for Qid {
    fn eq(&self, other: &str) -> bool {
        u64::from_str_radix(other, 16).is_ok_and(|n| n == self.0)
    }
}

impl PartialEq<&str> for Qid {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

/// A value written as it is shown, without making a string of it first
/// (a delivery line's DSN code and reply: the hot path); read back as
/// text.
#[derive(Clone)]
pub enum Shown<'a> {
    Text(Text<'a>),
    Value(&'a (dyn fmt::Display + Sync)),
}

impl Shown<'_> {
    /// The text, made only if it is a value.
    pub fn text(&self) -> Text<'_> {
        match self {
            Shown::Text(t) => Cow::Borrowed(t),
            Shown::Value(v) => Cow::Owned(v.to_string()),
        }
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shown::Text(t) => f.write_str(t),
            Shown::Value(v) => v.fmt(f),
        }
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text(), f)
    }
}

impl PartialEq for Shown<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl PartialEq<str> for Shown<'_> {
    fn eq(&self, other: &str) -> bool {
        self.text() == other
    }
}

impl PartialEq<&str> for Shown<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.text() == *other
    }
}

impl Serialize for Shown<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de, 'a> Deserialize<'de> for Shown<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Shown::Text(Cow::Owned(String::deserialize(d)?)))
    }
}

impl<'a> From<&'a str> for Shown<'a> {
    fn from(s: &'a str) -> Self {
        Shown::Text(Cow::Borrowed(s))
    }
}

impl From<String> for Shown<'_> {
    fn from(s: String) -> Self {
        Shown::Text(Cow::Owned(s))
    }
}
