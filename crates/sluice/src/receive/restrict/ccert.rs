//! The client-certificate restrictions, as Postfix's smtpd_check:
//! `permit_tls_clientcerts` (the public key's fingerprint, then the
//! certificate's, in relay_clientcerts), `permit_tls_all_clientcerts`
//! (any certificate verified against smtpd_tls_CAfile, else as the
//! former), and the keys of `check_ccert_access` (the certificate's
//! fingerprint, then its public key's; the reply names the subject CN as
//! "Client certificate").
//!
//! Trust: a fingerprint is a digest of what the client proved it holds
//! the key of; the CN is never looked up, only shown (made printable by
//! `receive/smtp/ccert.rs`). Without a certificate every one of these
//! says nothing (Postfix's DUNNO); a table that cannot answer is a `451
//! 4.3.0`, never a permit.

use std::sync::Arc;

use super::checks::{lookup_failed, search, subject};
use super::eval::Step;
use super::keys::AccessKey;
use super::{Facts, Stage};
use crate::tables::Table;

/// What a session knows of the client's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCert {
    /// The digest of the certificate (DER), `AB:CD:…` (Postfix's
    /// `ccert_fingerprint`).
    pub fingerprint: String,
    /// The digest of its SubjectPublicKeyInfo (`ccert_pubkey_fingerprint`).
    pub pubkey_fingerprint: String,
    /// The subject's CN, printable (`ccert_subject`); "" without one.
    pub subject: String,
    /// The issuer's CN, printable (`ccert_issuer`).
    pub issuer: String,
    /// It chains to `smtpd_tls_CAfile` (Postfix's "trusted").
    pub verified: bool,
}

/// `permit_tls_clientcerts` (`all`: `permit_tls_all_clientcerts`).
pub(super) async fn permit(
    relay_clientcerts: &[Arc<Table>],
    all: bool,
    stage: Stage,
    f: &Facts<'_>,
    by: &'static str,
) -> Step {
    let Some(cert) = f.ccert else {
        return Step::Next;
    };
    if all && cert.verified {
        return Step::Permit;
    }
    // As Postfix's maps_find over the list: the first table to know the
    // key decides; one that fails stops the search.
    for print in [&cert.pubkey_fingerprint, &cert.fingerprint] {
        let key = [exact(print)];
        for table in relay_clientcerts {
            match search(table, &key).await {
                Ok(Some(_)) => return Step::Permit,
                Ok(None) => {}
                Err(_) => return Step::Refuse(lookup_failed(&subject(stage, f).0, by)),
            }
        }
    }
    Step::Next
}

/// What `check_ccert_access` looks up, and the name and class of its
/// replies; None without a certificate.
pub(super) fn access_keys(f: &Facts<'_>) -> Option<(String, &'static str, Vec<Vec<AccessKey>>)> {
    let cert = f.ccert?;
    Some((
        cert.subject.clone(),
        "Client certificate",
        vec![
            vec![exact(&cert.fingerprint)],
            vec![exact(&cert.pubkey_fingerprint)],
        ],
    ))
}

fn exact(text: &str) -> AccessKey {
    AccessKey {
        text: text.to_string(),
        partial: false,
    }
}
