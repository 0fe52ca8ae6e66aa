//! `[restrictions]`: Postfix's SMTP restriction lists, written as Postfix
//! writes them (`smtpd_recipient_restrictions = permit_mynetworks,
//! reject_unauth_destination` becomes `recipient = "permit_mynetworks,
//! reject_unauth_destination"`), with the reply codes Postfix lets a site
//! choose, under Postfix's names and defaults.
//!
//! The lists are text here; `receive/restrict` reads them into typed
//! restrictions when the configuration is loaded, so a misspelt keyword,
//! an unknown class or table, or a class loop is an error at start (or
//! reload), never a surprise in a session.
//!
//! Defaults: every list is empty but `relay`, which holds what Sluice
//! always did (`permit_mynetworks, permit_sasl_authenticated,
//! reject_unauth_destination`); Postfix's own default ends in
//! `defer_unauth_destination` (a `454`), Debian's main.cf in
//! `reject_unauth_destination` (a `554`), which Sluice keeps
//! (docs/CONFIG.md).

use std::collections::BTreeMap;

use serde::Deserialize;

pub use super::verify::TempfailAction;

/// The lists, one per SMTP stage, and what they share.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RestrictionsConfig {
    /// smtpd_client_restrictions
    pub client: String,
    /// smtpd_helo_restrictions
    pub helo: String,
    /// smtpd_sender_restrictions
    pub sender: String,
    /// smtpd_relay_restrictions
    pub relay: String,
    /// smtpd_recipient_restrictions
    pub recipient: String,
    /// smtpd_data_restrictions
    pub data: String,
    /// smtpd_end_of_data_restrictions
    pub end_of_data: String,
    /// smtpd_restriction_classes: name → list (`[restrictions.classes]`).
    pub classes: BTreeMap<String, String>,
    /// smtpd_delay_reject: client, HELO and sender lists are applied at
    /// each RCPT TO (so a refusal names the recipient, and clients that
    /// do not expect a refusal before RCPT are not confused).
    pub delay_reject: bool,
    /// smtpd_helo_required: MAIL without HELO/EHLO first gets `503`.
    /// Sluice's default is yes (RFC 5321 §4.1.4 asks for it, and Sluice
    /// always required it); Postfix's is no (docs/CONFIG.md).
    pub helo_required: bool,
    /// parent_domain_matches_subdomains, for access tables and
    /// `relay_domains`: whether `example.com` also matches its subdomains
    /// (Postfix's default: yes for both), else only `.example.com` does.
    pub parent_domain_matches_subdomains: bool,
    /// smtpd_sender_login_maps: tables (`[tables]` names or Postfix
    /// specs) of sender address → the logins that may use it (several
    /// separated by commas or blanks), for `reject_*sender_login_mismatch`.
    pub sender_login_maps: Vec<String>,
    /// relay_clientcerts: tables (`[tables]` names or Postfix specs) of
    /// client certificate fingerprints (or public-key fingerprints, in
    /// `[tls] smtpd_tls_fingerprint_digest`) `permit_tls_clientcerts`
    /// lets relay; the value is not used.
    pub relay_clientcerts: Vec<String>,
    /// smtpd_null_access_lookup_key: the key the null sender is looked
    /// up with in access tables.
    pub null_access_lookup_key: String,
    /// unknown_address_tempfail_action: a DNS failure in
    /// `reject_unknown_sender_domain`/`_recipient_domain` is
    /// `defer_if_permit` (Postfix's default) or `defer`.
    pub unknown_address_tempfail_action: TempfailAction,
    /// unknown_helo_hostname_tempfail_action (likewise).
    pub unknown_helo_hostname_tempfail_action: TempfailAction,
    /// Reply codes (Postfix's names and defaults).
    pub reject_code: u16,
    pub defer_code: u16,
    pub access_map_reject_code: u16,
    pub access_map_defer_code: u16,
    pub relay_domains_reject_code: u16,
    pub non_fqdn_reject_code: u16,
    pub invalid_hostname_reject_code: u16,
    pub unknown_address_reject_code: u16,
    pub unknown_client_reject_code: u16,
    pub unknown_hostname_reject_code: u16,
    pub maps_rbl_reject_code: u16,
    pub multi_recipient_bounce_reject_code: u16,
    pub unknown_virtual_mailbox_reject_code: u16,
    pub unknown_relay_recipient_reject_code: u16,
    /// For an address of a virtual alias domain missing from
    /// `rewrite.virtual_alias_maps`.
    pub unknown_virtual_alias_reject_code: u16,
}

impl Default for RestrictionsConfig {
    fn default() -> Self {
        RestrictionsConfig {
            client: String::new(),
            helo: String::new(),
            sender: String::new(),
            relay: DEFAULT_RELAY.into(),
            recipient: String::new(),
            data: String::new(),
            end_of_data: String::new(),
            classes: BTreeMap::new(),
            delay_reject: true,
            helo_required: true,
            parent_domain_matches_subdomains: true,
            sender_login_maps: Vec::new(),
            relay_clientcerts: Vec::new(),
            null_access_lookup_key: "<>".into(),
            unknown_address_tempfail_action: TempfailAction::DeferIfPermit,
            unknown_helo_hostname_tempfail_action: TempfailAction::DeferIfPermit,
            reject_code: 554,
            defer_code: 450,
            access_map_reject_code: 554,
            access_map_defer_code: 450,
            relay_domains_reject_code: 554,
            non_fqdn_reject_code: 504,
            invalid_hostname_reject_code: 501,
            unknown_address_reject_code: 450,
            unknown_client_reject_code: 450,
            unknown_hostname_reject_code: 450,
            maps_rbl_reject_code: 554,
            multi_recipient_bounce_reject_code: 550,
            unknown_virtual_mailbox_reject_code: 550,
            unknown_relay_recipient_reject_code: 550,
            unknown_virtual_alias_reject_code: 550,
        }
    }
}

/// What Sluice did before restriction lists, as a relay list.
pub const DEFAULT_RELAY: &str =
    "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination";

/// A listener's own lists (master.cf `-o smtpd_*_restrictions=`): each
/// one set replaces the main one for sessions on that listener.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ListOverrides {
    pub client: Option<String>,
    pub helo: Option<String>,
    pub sender: Option<String>,
    pub relay: Option<String>,
    pub recipient: Option<String>,
    pub data: Option<String>,
    pub end_of_data: Option<String>,
}

impl RestrictionsConfig {
    /// Each code that must be a 4XX or 5XX reply, with its name.
    pub fn codes(&self) -> [(&'static str, u16); 15] {
        [
            ("reject_code", self.reject_code),
            ("defer_code", self.defer_code),
            ("access_map_reject_code", self.access_map_reject_code),
            ("access_map_defer_code", self.access_map_defer_code),
            ("relay_domains_reject_code", self.relay_domains_reject_code),
            ("non_fqdn_reject_code", self.non_fqdn_reject_code),
            (
                "invalid_hostname_reject_code",
                self.invalid_hostname_reject_code,
            ),
            (
                "unknown_address_reject_code",
                self.unknown_address_reject_code,
            ),
            (
                "unknown_client_reject_code",
                self.unknown_client_reject_code,
            ),
            (
                "unknown_hostname_reject_code",
                self.unknown_hostname_reject_code,
            ),
            ("maps_rbl_reject_code", self.maps_rbl_reject_code),
            (
                "multi_recipient_bounce_reject_code",
                self.multi_recipient_bounce_reject_code,
            ),
            (
                "unknown_virtual_mailbox_reject_code",
                self.unknown_virtual_mailbox_reject_code,
            ),
            (
                "unknown_relay_recipient_reject_code",
                self.unknown_relay_recipient_reject_code,
            ),
            (
                "unknown_virtual_alias_reject_code",
                self.unknown_virtual_alias_reject_code,
            ),
        ]
    }
}
