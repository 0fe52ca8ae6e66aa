//! Postfix's SMTP restriction lists: per stage (client, HELO, sender,
//! relay, recipient, DATA, end of data), restriction classes, access
//! tables, and Postfix's reply for each refusal, decided the way
//! smtpd_check does it (first match decides; `permit` ends a list,
//! `reject` ends the decision; `defer_if_permit`, `defer_if_reject` and
//! `warn_if_reject` change what a later result means).
//!
//! This module reads the lists when the configuration is loaded
//! ([`Restrictions::build`]: every keyword, table, class and policy
//! service resolved, class loops refused, and a configuration that would
//! leave relaying open refused) and evaluates them (`eval.rs`) over what
//! the session knows ([`eval::Facts`]) and what only the daemon can look
//! up ([`eval::Env`]). It never writes to the client: the session turns a
//! [`Refusal`] into the reply and the typed event.
//!
//! Trust: the lists are the operator's; table answers are data (`access.rs`
//! reads them; an answer that is not an action is "try again", never a
//! permit); client-given names and addresses are only ever lookup keys
//! and reply text between `<` `>` (the session's parser has refused
//! control characters in them).
//! Invariants: a table that cannot answer gives `451 4.3.0`, a broken
//! answer or a class nested too deep `451 4.3.5`; nothing evaluated can
//! permit relaying unless a restriction the operator wrote permits it.

pub mod build;
mod ccert;
mod checks;
pub mod eval;
mod keys;
mod outside;
pub mod parse;
#[cfg(test)]
mod tests;
pub mod unverified;

use std::net::IpAddr;
use std::sync::Arc;

pub use build::{BuildError, Lists, Restrictions};
pub use ccert::PeerCert;
pub use eval::{Effect, Env, Outcome};

use crate::receive::dnscheck::DnsList;
use crate::receive::policy::PolicyClient;
use crate::tables::Table;

/// The SMTP stage a list belongs to (Postfix's `smtpd_<stage>_restrictions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    Client,
    Helo,
    Sender,
    Relay,
    Recipient,
    Data,
    EndOfData,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Client => "client",
            Stage::Helo => "helo",
            Stage::Sender => "sender",
            Stage::Relay => "relay",
            Stage::Recipient => "recipient",
            Stage::Data => "data",
            Stage::EndOfData => "end_of_data",
        }
    }
}

/// What the session knows when it asks.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub client_ip: IpAddr,
    /// The verified client name, or `unknown`.
    pub client_name: &'a str,
    /// The PTR name, or `unknown`.
    pub reverse_client_name: &'a str,
    pub helo: Option<&'a str>,
    /// None before MAIL; `""` is the null sender.
    pub sender: Option<&'a str>,
    /// The recipient being decided (RCPT only).
    pub recipient: Option<&'a str>,
    pub sasl_user: Option<&'a str>,
    /// AUTH is offered in this session (Postfix's smtpd_sasl_auth_enable:
    /// without it, the sender-login checks are skipped).
    pub sasl_enabled: bool,
    /// The client is in mynetworks.
    pub mynetworks: bool,
    /// The client sent commands ahead where it may not.
    pub improper_pipelining: bool,
    /// Recipients accepted so far in this transaction.
    pub recipient_count: usize,
    /// The client's TLS certificate, when asked for and sent.
    pub ccert: Option<&'a PeerCert>,
}

/// What an access-table check looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableCheck {
    /// The client's verified name (and parent domains), then its address
    /// (and, in fixed tables, its networks).
    Client,
    /// The client's reverse (PTR) name.
    ReverseClient,
    Helo,
    Sender,
    Recipient,
    /// The SASL login.
    Sasl,
    /// The client certificate's fingerprint, then its public key's
    /// (check_ccert_access).
    Ccert,
}

/// Which clients `reject_*sender_login_mismatch` holds to the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginCheck {
    /// reject_sender_login_mismatch: both below.
    Both,
    /// An authenticated client may only use the senders its login owns.
    Authenticated,
    /// A client that did not authenticate may not use an owned sender.
    Unauthenticated,
    /// An authenticated client may not use a sender another login owns.
    Known,
}

/// The DNS restrictions (`receive/dnscheck` decides each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsRestriction {
    UnknownSenderDomain,
    UnknownRecipientDomain,
    UnknownHeloHostname,
    UnknownClientHostname,
    UnknownReverseClientHostname,
    RblClient(DnsList),
    DnswlClient(DnsList),
    RhsblClient(DnsList),
    RhsblReverseClient(DnsList),
    RhsblSender(DnsList),
    RhsblHelo(DnsList),
}

impl DnsRestriction {
    /// Whether it needs the client's names (looked up once per session).
    pub fn needs_names(&self) -> bool {
        use DnsRestriction::*;
        matches!(
            self,
            UnknownClientHostname
                | UnknownReverseClientHostname
                | RhsblClient(_)
                | RhsblReverseClient(_)
        )
    }

    pub fn keyword(&self) -> &'static str {
        use DnsRestriction::*;
        match self {
            UnknownSenderDomain => "reject_unknown_sender_domain",
            UnknownRecipientDomain => "reject_unknown_recipient_domain",
            UnknownHeloHostname => "reject_unknown_helo_hostname",
            UnknownClientHostname => "reject_unknown_client_hostname",
            UnknownReverseClientHostname => "reject_unknown_reverse_client_hostname",
            RblClient(_) => "reject_rbl_client",
            DnswlClient(_) => "permit_dnswl_client",
            RhsblClient(_) => "reject_rhsbl_client",
            RhsblReverseClient(_) => "reject_rhsbl_reverse_client",
            RhsblSender(_) => "reject_rhsbl_sender",
            RhsblHelo(_) => "reject_rhsbl_helo",
        }
    }
}

/// One restriction.
#[derive(Clone)]
pub enum Restriction {
    Permit,
    Reject,
    Defer,
    DeferIfPermit,
    DeferIfReject,
    WarnIfReject,
    PermitMynetworks,
    PermitSaslAuthenticated,
    /// The client certificate's (or its public key's) fingerprint is in
    /// relay_clientcerts (`ccert.rs`).
    PermitTlsClientcerts,
    /// ... or the certificate is verified against smtpd_tls_CAfile.
    PermitTlsAllClientcerts,
    RejectUnauthDestination,
    DeferUnauthDestination,
    PermitAuthDestination,
    RejectUnauthPipelining,
    RejectNonFqdnSender,
    RejectNonFqdnRecipient,
    RejectNonFqdnHelo,
    RejectInvalidHelo,
    RejectUnlistedRecipient,
    RejectUnlistedSender,
    RejectMultiRecipientBounce,
    SenderLogin(LoginCheck),
    /// reject_unverified_recipient (true) / _sender: address verification.
    RejectUnverified {
        recipient: bool,
    },
    Dns(DnsRestriction),
    Access(TableCheck, Arc<Table>),
    Policy(Arc<PolicyClient>),
    /// A restriction class, by name.
    Class(String),
}

impl std::fmt::Debug for Restriction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Restriction::Access(check, _) => write!(f, "Access({check:?})"),
            Restriction::Policy(p) => write!(f, "Policy({})", p.addr()),
            Restriction::Class(name) => write!(f, "Class({name})"),
            Restriction::SenderLogin(c) => write!(f, "SenderLogin({c:?})"),
            Restriction::Dns(d) => write!(f, "{d:?}"),
            other => write!(f, "{}", keyword(other)),
        }
    }
}

/// The keyword of a restriction, for the log.
pub fn keyword(r: &Restriction) -> &'static str {
    use Restriction::*;
    match r {
        Permit => "permit",
        Reject => "reject",
        Defer => "defer",
        DeferIfPermit => "defer_if_permit",
        DeferIfReject => "defer_if_reject",
        WarnIfReject => "warn_if_reject",
        PermitMynetworks => "permit_mynetworks",
        PermitSaslAuthenticated => "permit_sasl_authenticated",
        PermitTlsClientcerts => "permit_tls_clientcerts",
        PermitTlsAllClientcerts => "permit_tls_all_clientcerts",
        RejectUnauthDestination => "reject_unauth_destination",
        DeferUnauthDestination => "defer_unauth_destination",
        PermitAuthDestination => "permit_auth_destination",
        RejectUnauthPipelining => "reject_unauth_pipelining",
        RejectNonFqdnSender => "reject_non_fqdn_sender",
        RejectNonFqdnRecipient => "reject_non_fqdn_recipient",
        RejectNonFqdnHelo => "reject_non_fqdn_helo_hostname",
        RejectInvalidHelo => "reject_invalid_helo_hostname",
        RejectUnlistedRecipient => "reject_unlisted_recipient",
        RejectUnlistedSender => "reject_unlisted_sender",
        RejectMultiRecipientBounce => "reject_multi_recipient_bounce",
        SenderLogin(LoginCheck::Both) => "reject_sender_login_mismatch",
        SenderLogin(LoginCheck::Authenticated) => "reject_authenticated_sender_login_mismatch",
        SenderLogin(LoginCheck::Unauthenticated) => "reject_unauthenticated_sender_login_mismatch",
        SenderLogin(LoginCheck::Known) => "reject_known_sender_login_mismatch",
        Dns(d) => d.keyword(),
        RejectUnverified { recipient: true } => "reject_unverified_recipient",
        RejectUnverified { recipient: false } => "reject_unverified_sender",
        Access(TableCheck::Client, _) => "check_client_access",
        Access(TableCheck::ReverseClient, _) => "check_reverse_client_hostname_access",
        Access(TableCheck::Helo, _) => "check_helo_access",
        Access(TableCheck::Sender, _) => "check_sender_access",
        Access(TableCheck::Recipient, _) => "check_recipient_access",
        Access(TableCheck::Sasl, _) => "check_sasl_access",
        Access(TableCheck::Ccert, _) => "check_ccert_access",
        Policy(_) => "check_policy_service",
        Class(_) => "restriction_class",
    }
}

/// A refusal: Postfix's reply, and what decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    /// The enhanced status code (`5.7.1`).
    pub enhanced: String,
    /// What follows the codes (`<a@b>: Recipient address rejected: …`).
    pub text: String,
    /// The restriction that refused (`check_recipient_access`).
    pub by: &'static str,
}

impl Refusal {
    /// The reply line, without CRLF.
    pub fn line(&self) -> String {
        format!("{} {} {}", self.code, self.enhanced, self.text)
    }

    /// This refusal as a `4XX` (defer_if_reject, warn): code and class.
    pub fn deferred(&self, defer_code: u16) -> Refusal {
        let mut r = self.clone();
        if r.code >= 500 {
            r.code = defer_code;
            r.enhanced.replace_range(0..1, "4");
        }
        r
    }
}
