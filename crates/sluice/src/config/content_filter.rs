//! `content_filter`: Postfix's after-queue content filter (FILTER_README,
//! "advanced content filter"): mail is queued first, then every recipient
//! of it goes to this SMTP or LMTP server (amavisd-new, …) in one
//! transaction, whatever its normal route; the filter sends its copy back
//! in on a listener whose own `content_filter` is empty, and that copy is
//! routed as usual.
//!
//! The value is `transport:nexthop` as Postfix writes it:
//! `smtp:[127.0.0.1]:10024`, a named SMTP transport of `[transports]`
//! (`scan:[127.0.0.1]:10025`, FILTER_README's master.cf service),
//! `lmtp:unix:/path`, `lmtp:[host]:port`; never one without a next hop;
//! an empty string is no filter (master.cf's `-o content_filter=` on the
//! reinjection service).
//!
//! Trust: the administrator's (the main setting, a listener's own, an
//! access table's or a header check's FILTER action); never a client's.
//! Invariant: a `ContentFilter` holds no hop but SMTP or LMTP, so the
//! queue can always send to it.
//!
//! The reinjection listener is a door around the filter: see
//! `listener.rs` (`check_bypass`, `bypass_warnings`).

use serde::Deserialize;

use super::hop::NextHop;

/// A content filter setting: a next hop, or none (`""`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct ContentFilter(Option<NextHop>);

/// A `content_filter` (or FILTER action) that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad content filter {0:?} (want smtp:[host]:port, smtp:host:port, lmtp:unix:/path, \
     lmtp:[host]:port, or \"\" for none)"
)]
pub struct BadFilter(pub String);

impl ContentFilter {
    /// No filter.
    pub const NONE: ContentFilter = ContentFilter(None);

    /// Parses `transport:nexthop` (SMTP or LMTP), or `""` for none.
    pub fn parse(text: &str) -> Result<ContentFilter, BadFilter> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(ContentFilter(None));
        }
        match NextHop::parse(text) {
            Some(hop @ (NextHop::Smtp { .. } | NextHop::Lmtp(_))) => Ok(ContentFilter(Some(hop))),
            _ => Err(BadFilter(text.to_string())),
        }
    }

    /// Where filtered mail goes, if anywhere.
    pub fn hop(&self) -> Option<&NextHop> {
        self.0.as_ref()
    }

    /// The text kept with a queued message (`Envelope::filter`): the hop's
    /// canonical key, which [`ContentFilter::parse`] reads back; empty
    /// for none.
    pub fn spool_text(&self) -> String {
        self.0.as_ref().map(NextHop::key).unwrap_or_default()
    }
}

impl TryFrom<String> for ContentFilter {
    type Error = BadFilter;
    fn try_from(text: String) -> Result<ContentFilter, BadFilter> {
        ContentFilter::parse(&text)
    }
}

impl std::fmt::Display for ContentFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.spool_text())
    }
}

super::as_text!(ContentFilter);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_and_lmtp_hops_or_nothing() {
        let f = ContentFilter::parse("smtp:[127.0.0.1]:10024").unwrap();
        assert_eq!(f.spool_text(), "smtp:[127.0.0.1]:10024");
        assert_eq!(ContentFilter::parse(&f.spool_text()).unwrap(), f);
        let l = ContentFilter::parse("lmtp:unix:/run/amavis/lmtp").unwrap();
        assert_eq!(ContentFilter::parse(&l.spool_text()).unwrap(), l);
        assert_eq!(ContentFilter::parse("").unwrap(), ContentFilter::NONE);
        let named = ContentFilter::parse("scan:[127.0.0.1]:10025").unwrap();
        assert_eq!(named.spool_text(), "scan:[127.0.0.1]:10025");
        assert_eq!(ContentFilter::parse("  ").unwrap().hop(), None);
        for bad in [
            "discard",
            "maildir",
            "amavis",
            "smtp:[127.0.0.1:10024]",
            "x:",
            "smtp:",
            "X:y",
        ] {
            assert!(ContentFilter::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn read_from_toml_as_text() {
        #[derive(Deserialize)]
        struct T {
            f: ContentFilter,
        }
        let t: T = toml::from_str("f = \"smtp:[::1]:10024\"").unwrap();
        assert_eq!(t.f.to_string(), "smtp:[::1]:10024");
        assert!(toml::from_str::<T>("f = \"discard\"").is_err());
    }
}
