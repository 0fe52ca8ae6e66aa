//! `[srs]` and `[arc]`: forwarding that still passes SPF and DMARC at the
//! receiver (issue 39). SRS rewrites the envelope sender of mail we
//! forward into our SRS domain (and turns bounces to those addresses back
//! into the original sender); ARC verifies incoming chains and seals the
//! mail we forward with our DKIM key.
//!
//! Trust: the administrator's. Invariant: [`SrsConfig::validate`] passes
//! before the daemon builds the codec (a day count the two timestamp
//! characters can tell apart).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::names::{Domain, DomainPattern};

/// `[srs]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SrsConfig {
    /// Rewrite the envelope sender of forwarded mail; accept bounces to
    /// our SRS addresses.
    pub enabled: bool,
    /// The SRS domain (its SPF must allow our addresses, and its MX lead
    /// here); default: `hostname`.
    pub domain: Option<Domain>,
    /// One secret a line (postsrsd's format): the first signs, every line
    /// verifies. Default `<data_dir>/srs.secret`, made (mode 0600) with a
    /// random secret on first start when missing.
    pub secret_file: Option<PathBuf>,
    /// An SRS0 address older than this many days is refused (libsrs2's
    /// and postsrsd's 21 by default; at most 1000: the day wraps at 1024).
    pub max_age_days: u64,
    /// Senders in these domains (`.example.com`: and below) are never
    /// rewritten (postsrsd's `SRS_EXCLUDE_DOMAINS`).
    pub exclude_domains: Vec<DomainPattern>,
}

impl Default for SrsConfig {
    fn default() -> Self {
        SrsConfig {
            enabled: false,
            domain: None,
            secret_file: None,
            max_age_days: 21,
            exclude_domains: Vec::new(),
        }
    }
}

impl SrsConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.enabled && !(1..=1000).contains(&self.max_age_days) {
            return Err(format!(
                "srs.max_age_days: {} (want 1 to 1000)",
                self.max_age_days
            ));
        }
        Ok(())
    }

    /// The SRS domain: `domain`, or the hostname.
    pub fn domain_or<'a>(&'a self, hostname: &'a str) -> &'a str {
        self.domain.as_ref().map_or(hostname, |d| d.as_str())
    }

    /// The secret file: `secret_file`, or `<data_dir>/srs.secret`.
    pub fn secret_path(&self, data_dir: &Path) -> PathBuf {
        self.secret_file
            .clone()
            .unwrap_or_else(|| data_dir.join("srs.secret"))
    }
}

/// `[arc]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArcConfig {
    /// Verify ARC chains where a listener checks senders (`sender_auth`),
    /// adding `arc=` to our Authentication-Results, and seal the mail we
    /// forward (the first `[[dkim.keys]]` key whose domain is `key_domain`).
    pub enabled: bool,
    /// Whose `[[dkim.keys]]` key seals; default: the SRS domain's key,
    /// else the hostname's, else the first key.
    pub key_domain: Option<Domain>,
}
