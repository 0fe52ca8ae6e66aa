//! `[dkim]`: the keys that sign mail from our own users, as the
//! configuration holds them (values only; `intake/dkim.rs` loads them).

use std::path::PathBuf;

use serde::Deserialize;

use super::names::Domain;

/// `[dkim]`: keys that sign mail from our own users (`[[dkim.keys]]`).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DkimConfig {
    pub keys: Vec<DkimKeyConfig>,
    /// Sign mail from ordinary local users (sendmail) whose From: is
    /// their own address (login@hostname); `false`: never sign theirs.
    /// Root's and the daemon's mail is signed whatever its From:. A local
    /// user's mail with any other From: is never signed: a local account
    /// (a web application) must not get our signature on `ceo@`.
    pub sign_local_users: bool,
}

impl Default for DkimConfig {
    fn default() -> Self {
        DkimConfig {
            keys: Vec::new(),
            sign_local_users: true,
        }
    }
}

/// One signing key: mail whose From: domain is `domain` (or below it) is
/// signed with `d=domain; s=selector`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DkimKeyConfig {
    pub domain: Domain,
    pub selector: String,
    /// PEM private key (RSA or Ed25519), e.g. from `sluice dkim-keygen`.
    pub key_file: PathBuf,
    /// Headers to sign (default: `intake::dkim::DEFAULT_HEADERS`).
    #[serde(default)]
    pub headers: Option<Vec<String>>,
    /// Signatures expire this long after signing (`x=`); it must exceed
    /// `queue.maximal_lifetime_secs`. Default: that lifetime plus two
    /// days; 0: no `x=`.
    #[serde(default)]
    pub expire_secs: Option<u64>,
}
