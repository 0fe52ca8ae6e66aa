//! Reading a restriction list (Postfix's text: keywords and their
//! arguments separated by commas or blanks) into typed [`Restriction`]s.
//!
//! Trust: lists come from the operator's configuration (checked at load:
//! an unknown keyword, a missing argument or table, or an unknown class is
//! an error there) or, at run time, from an access table's answer (the
//! same grammar, but no table may be named there that was not built at
//! load: an answer cannot make Sluice open a file or a connection).

use std::sync::Arc;

use super::{DnsRestriction, Restriction, TableCheck};
use crate::receive::dnscheck::DnsList;
use crate::receive::policy::PolicyClient;
use crate::tables::Table;

/// Why a list cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown restriction {0:?}")]
    Unknown(String),
    #[error("{0} needs {1}")]
    Needs(String, &'static str),
    #[error("table {0:?}: {1}")]
    Table(String, String),
    #[error("{0} is not available in Sluice (docs/CONFIG.md says why)")]
    Unsupported(String),
}

/// What a list may refer to: tables, classes and policy services, built
/// (or, at run time, already built) by the caller.
pub trait Resolve {
    fn table(&mut self, spec: &str) -> Result<Arc<Table>, String>;
    fn is_class(&self, name: &str) -> bool;
    fn policy(&mut self, addr: &str) -> Result<Arc<PolicyClient>, String>;
}

/// The words of a list: split at commas and blanks.
pub fn words(list: &str) -> Vec<&str> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Reads `list` into restrictions.
pub fn parse_list(list: &str, resolve: &mut impl Resolve) -> Result<Vec<Restriction>, ParseError> {
    let words = words(list);
    let mut out = Vec::new();
    let mut at = 0;
    while at < words.len() {
        let word = words[at];
        at += 1;
        let mut arg = |what: &'static str| -> Result<String, ParseError> {
            let next = words.get(at).ok_or(ParseError::Needs(word.into(), what))?;
            at += 1;
            Ok(next.to_string())
        };
        let keyword = word.to_ascii_lowercase();
        let r = match simple(&keyword) {
            Some(r) => r,
            None => match table_check(&keyword) {
                Some(check) => {
                    let spec = arg("a table")?;
                    let table = resolve
                        .table(&spec)
                        .map_err(|e| ParseError::Table(spec.clone(), e))?;
                    Restriction::Access(check, table)
                }
                None => with_argument(&keyword, word, &mut arg, resolve)?,
            },
        };
        out.push(r);
    }
    Ok(out)
}

/// Keywords with an argument other than a table, and class names.
fn with_argument(
    keyword: &str,
    word: &str,
    arg: &mut impl FnMut(&'static str) -> Result<String, ParseError>,
    resolve: &mut impl Resolve,
) -> Result<Restriction, ParseError> {
    Ok(match keyword {
        "check_policy_service" => {
            let addr = arg("a service (inet:host:port or unix:/path)")?;
            let client = resolve
                .policy(&addr)
                .map_err(|e| ParseError::Table(addr.clone(), e))?;
            Restriction::Policy(client)
        }
        "reject_rbl_client"
        | "reject_rhsbl_client"
        | "reject_rhsbl_sender"
        | "reject_rhsbl_helo"
        | "reject_rhsbl_reverse_client"
        | "permit_dnswl_client" => {
            let text = arg("a DNS list (zone or zone=d.d.d.d)")?;
            let list: DnsList =
                text.parse()
                    .map_err(|e: crate::receive::dnscheck::DnsListError| {
                        ParseError::Table(text.clone(), e.to_string())
                    })?;
            Restriction::Dns(match keyword {
                "reject_rbl_client" => DnsRestriction::RblClient(list),
                "reject_rhsbl_client" => DnsRestriction::RhsblClient(list),
                "reject_rhsbl_sender" => DnsRestriction::RhsblSender(list),
                "reject_rhsbl_helo" => DnsRestriction::RhsblHelo(list),
                "reject_rhsbl_reverse_client" => DnsRestriction::RhsblReverseClient(list),
                _ => DnsRestriction::DnswlClient(list),
            })
        }
        "reject_rhsbl_recipient"
        | "permit_rhswl_client"
        | "sleep"
        | "check_client_a_access"
        | "check_client_mx_access"
        | "check_client_ns_access"
        | "check_helo_a_access"
        | "check_helo_mx_access"
        | "check_helo_ns_access"
        | "check_sender_a_access"
        | "check_sender_mx_access"
        | "check_sender_ns_access"
        | "check_recipient_a_access"
        | "check_recipient_mx_access"
        | "check_recipient_ns_access"
        | "check_reverse_client_a_access"
        | "check_reverse_client_mx_access"
        | "check_reverse_client_ns_access"
        | "permit_mx_backup"
        | "reject_plaintext_session"
        | "check_etrn_access" => return Err(ParseError::Unsupported(word.into())),
        _ if resolve.is_class(word) => Restriction::Class(word.to_string()),
        _ => return Err(ParseError::Unknown(word.into())),
    })
}

/// Keywords without an argument.
fn simple(keyword: &str) -> Option<Restriction> {
    use Restriction::*;
    Some(match keyword {
        "permit" => Permit,
        "reject" => Reject,
        "defer" => Defer,
        "defer_if_permit" => DeferIfPermit,
        "defer_if_reject" => DeferIfReject,
        "warn_if_reject" => WarnIfReject,
        "permit_mynetworks" => PermitMynetworks,
        "permit_sasl_authenticated" => PermitSaslAuthenticated,
        "permit_tls_clientcerts" => PermitTlsClientcerts,
        "permit_tls_all_clientcerts" => PermitTlsAllClientcerts,
        "reject_unauth_destination" => RejectUnauthDestination,
        "defer_unauth_destination" => DeferUnauthDestination,
        "permit_auth_destination" => PermitAuthDestination,
        "reject_unauth_pipelining" => RejectUnauthPipelining,
        "reject_non_fqdn_sender" => RejectNonFqdnSender,
        "reject_non_fqdn_recipient" => RejectNonFqdnRecipient,
        "reject_non_fqdn_helo_hostname" | "reject_non_fqdn_hostname" => RejectNonFqdnHelo,
        "reject_invalid_helo_hostname" | "reject_invalid_hostname" => RejectInvalidHelo,
        "reject_unlisted_recipient" | "check_recipient_maps" => RejectUnlistedRecipient,
        "reject_unlisted_sender" => RejectUnlistedSender,
        "reject_multi_recipient_bounce" => RejectMultiRecipientBounce,
        "reject_sender_login_mismatch" => SenderLogin(super::LoginCheck::Both),
        "reject_authenticated_sender_login_mismatch" => {
            SenderLogin(super::LoginCheck::Authenticated)
        }
        "reject_unauthenticated_sender_login_mismatch" => {
            SenderLogin(super::LoginCheck::Unauthenticated)
        }
        "reject_known_sender_login_mismatch" => SenderLogin(super::LoginCheck::Known),
        "reject_unverified_recipient" => RejectUnverified { recipient: true },
        "reject_unknown_sender_domain" => Dns(DnsRestriction::UnknownSenderDomain),
        "reject_unknown_recipient_domain" => Dns(DnsRestriction::UnknownRecipientDomain),
        "reject_unknown_helo_hostname" | "reject_unknown_hostname" => {
            Dns(DnsRestriction::UnknownHeloHostname)
        }
        "reject_unknown_client_hostname" | "reject_unknown_client" => {
            Dns(DnsRestriction::UnknownClientHostname)
        }
        "reject_unknown_reverse_client_hostname" => {
            Dns(DnsRestriction::UnknownReverseClientHostname)
        }
        "reject_unverified_sender" => RejectUnverified { recipient: false },
        _ => return None,
    })
}

/// The access-table checks and what each looks up.
fn table_check(keyword: &str) -> Option<TableCheck> {
    Some(match keyword {
        "check_client_access" => TableCheck::Client,
        "check_reverse_client_hostname_access" => TableCheck::ReverseClient,
        "check_helo_access" => TableCheck::Helo,
        "check_sender_access" => TableCheck::Sender,
        "check_recipient_access" => TableCheck::Recipient,
        "check_sasl_access" => TableCheck::Sasl,
        "check_ccert_access" => TableCheck::Ccert,
        _ => return None,
    })
}
