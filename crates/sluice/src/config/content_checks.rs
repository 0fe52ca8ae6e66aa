//! `[content_checks]`: Postfix's built-in content inspection
//! (header_checks(5)) under Postfix's names: `header_checks`,
//! `mime_header_checks`, `nested_header_checks`, `body_checks` (each a
//! list of tables: `[tables]` names or Postfix `type:name`, asked in
//! order, the first that finds the line decides) and
//! `body_checks_size_limit`; and a listener's own lists
//! ([`CheckOverrides`], master.cf's `-o header_checks=…` on a cleanup
//! service of its own).
//!
//! Trust: the administrator's. Invariant: [`ContentChecksConfig::validate`]
//! passes before the intake uses it (every table named is a `[tables]`
//! name or a `type:name` Sluice can build).

use serde::{Deserialize, Serialize};

/// Postfix's `body_checks_size_limit` default.
pub const BODY_CHECKS_SIZE_LIMIT: usize = 51_200;

/// `[content_checks]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContentChecksConfig {
    /// Postfix's `header_checks`: the primary message headers (MIME
    /// headers excepted).
    pub header_checks: Vec<String>,
    /// Postfix's `mime_header_checks`: MIME headers (Content-*,
    /// MIME-Version) at any level, and every header of a multipart body
    /// part. Unset: `header_checks` (Postfix's `$header_checks`).
    pub mime_header_checks: Option<Vec<String>>,
    /// Postfix's `nested_header_checks`: the headers of an attached
    /// message/rfc822 (MIME headers excepted). Unset: `header_checks`.
    pub nested_header_checks: Option<Vec<String>>,
    /// Postfix's `body_checks`: every other line, one physical line at a
    /// time (multipart boundaries included).
    pub body_checks: Vec<String>,
    /// Postfix's `body_checks_size_limit`: how much of each body segment
    /// (the body after each header block) `body_checks` see.
    pub body_checks_size_limit: usize,
    /// Sluice's bound on one message's checks, in milliseconds (Postfix
    /// has none): past it, the rest of the message is not checked and a
    /// warning is logged.
    pub time_limit_ms: u64,
    /// Postfix's `content_filter`: after it is queued, every message from
    /// SMTP listeners without their own setting and from sendmail goes to
    /// this after-queue filter (`smtp:[127.0.0.1]:10024`) before its
    /// recipients' own routes (`config/content_filter.rs`); `""`: none.
    pub content_filter: super::content_filter::ContentFilter,
}

impl Default for ContentChecksConfig {
    fn default() -> Self {
        ContentChecksConfig {
            header_checks: Vec::new(),
            mime_header_checks: None,
            nested_header_checks: None,
            body_checks: Vec::new(),
            body_checks_size_limit: BODY_CHECKS_SIZE_LIMIT,
            time_limit_ms: 2_000,
            content_filter: Default::default(),
        }
    }
}

/// A listener's own lists (`[smtpd.listeners.content_checks]`): each one
/// set replaces the main one for mail taken on that listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckOverrides {
    pub header_checks: Option<Vec<String>>,
    pub mime_header_checks: Option<Vec<String>>,
    pub nested_header_checks: Option<Vec<String>>,
    pub body_checks: Option<Vec<String>>,
}

/// The four lists in force for one door, defaults resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckLists {
    pub header: Vec<String>,
    pub mime: Vec<String>,
    pub nested: Vec<String>,
    pub body: Vec<String>,
}

impl CheckLists {
    /// Whether any check is configured.
    pub fn any(&self) -> bool {
        !(self.header.is_empty()
            && self.mime.is_empty()
            && self.nested.is_empty()
            && self.body.is_empty())
    }

    /// Every table named, with the parameter that names it.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, &String)> {
        self.header
            .iter()
            .map(|t| ("header_checks", t))
            .chain(self.mime.iter().map(|t| ("mime_header_checks", t)))
            .chain(self.nested.iter().map(|t| ("nested_header_checks", t)))
            .chain(self.body.iter().map(|t| ("body_checks", t)))
    }
}

impl ContentChecksConfig {
    /// The lists in force with a listener's overrides `o` (the main ones:
    /// `CheckOverrides::default()`). As Postfix expands a service's `-o
    /// header_checks=…` into the `$header_checks` defaults, an unset
    /// `mime_header_checks` follows the listener's `header_checks`.
    pub fn lists(&self, o: &CheckOverrides) -> CheckLists {
        let header = o.header_checks.as_ref().unwrap_or(&self.header_checks);
        let follow = |own: &Option<Vec<String>>, main: &Option<Vec<String>>| {
            own.as_ref().or(main.as_ref()).unwrap_or(header).clone()
        };
        CheckLists {
            header: header.clone(),
            mime: follow(&o.mime_header_checks, &self.mime_header_checks),
            nested: follow(&o.nested_header_checks, &self.nested_header_checks),
            body: o.body_checks.as_ref().unwrap_or(&self.body_checks).clone(),
        }
    }

    /// Every table named is a `[tables]` name (`known`) or a Postfix
    /// `type:name` Sluice can build; the limits are not zero.
    pub fn validate(
        &self,
        listeners: &[&CheckOverrides],
        known: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        if self.time_limit_ms == 0 {
            return Err("time_limit_ms: 0 (want at least 1)".into());
        }
        let sets = std::iter::once(self.lists(&CheckOverrides::default()))
            .chain(listeners.iter().map(|o| self.lists(o)));
        for lists in sets {
            for (what, name) in lists.named() {
                if known(name) {
                    continue;
                }
                crate::tables::spec::parse(name)
                    .map_err(|e| format!("{what}: {name:?}: not a [tables] name, nor {e}"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn mime_and_nested_follow_header_checks_unless_set() {
        let mut c = ContentChecksConfig {
            header_checks: v(&["h"]),
            ..Default::default()
        };
        let main = c.lists(&CheckOverrides::default());
        assert_eq!(
            (main.mime.clone(), main.nested.clone()),
            (v(&["h"]), v(&["h"]))
        );
        let sub = CheckOverrides {
            header_checks: Some(v(&["strip"])),
            ..Default::default()
        };
        assert_eq!(c.lists(&sub).mime, v(&["strip"]));
        c.mime_header_checks = Some(Vec::new());
        let l = c.lists(&sub);
        assert_eq!(
            (l.header, l.mime, l.nested),
            (v(&["strip"]), v(&[]), v(&["strip"]))
        );
        assert!(!ContentChecksConfig::default()
            .lists(&CheckOverrides::default())
            .any());
    }

    #[test]
    fn unknown_tables_are_refused() {
        let c = ContentChecksConfig {
            header_checks: v(&["regexp:/etc/h", "mine"]),
            ..Default::default()
        };
        assert!(c.validate(&[], |n| n == "mine").is_ok());
        let err = c.validate(&[], |_| false).unwrap_err();
        assert!(err.contains("header_checks: \"mine\""), "{err}");
        let o = CheckOverrides {
            body_checks: Some(v(&["nosuch"])),
            ..Default::default()
        };
        assert!(c.validate(&[&o], |n| n == "mine").is_err());
    }
}
