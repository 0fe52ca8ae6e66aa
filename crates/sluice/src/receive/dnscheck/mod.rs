//! Postfix's DNS-based restrictions (issue 38), each a typed outcome the
//! restriction lists act on: `reject_unknown_sender_domain`,
//! `reject_unknown_recipient_domain`, `reject_unknown_helo_hostname`,
//! `reject_unknown_client_hostname`,
//! `reject_unknown_reverse_client_hostname`, `reject_rbl_client`,
//! `reject_rhsbl_client`, `reject_rhsbl_sender`, `reject_rhsbl_helo`,
//! `reject_rhsbl_reverse_client`, `permit_dnswl_client`; and the client's
//! names ([`ClientNames`]) as Postfix's smtpd finds them at connect.
//!
//! Each check gives a [`DnsCheck`] with the reply Postfix 3.7 gives, code,
//! enhanced code and text (held to a real Postfix by
//! tests/it/restrict_dns.rs), from the codes of [`DnsCheckCodes`]
//! (Postfix's parameters and defaults). Which lookups decide what is
//! Postfix's (smtpd_check.c, dns_lookup.c): a domain is known if it has
//! an MX, A or AAAA record; a null MX is refused (550 5.7.27 for a
//! sender, 556 5.1.10 for a recipient); an MX naming only invalid hosts is
//! "Malformed DNS server reply"; NXDOMAIN and no data are both "not
//! found"; a failure of any of the lookups, none succeeding, is temporary.
//! The lists ask for A records, then TXT for the reply's text; a list
//! that fails is "not listed" to a blocklist and "defer if rejected" to
//! an allowlist.
//!
//! Trust: every answer is data from whoever runs the zone — for the
//! client's own names and domains, the attacker. Invariants: a DNS failure
//! or timeout never becomes a permit (at most [`DnsCheck::Pass`] for a
//! blocklist, as Postfix); a PTR counts only when forward-confirmed for
//! `client_name`; each lookup ends within [`Limits::timeout`] and keeps
//! a bounded answer in a bounded cache (see [`lookup`]); reply text is
//! printable ASCII within Postfix's 510 bytes.
//!
//! Not here: which domains are local (Postfix skips its own final
//! destinations for the unknown-domain checks: the caller does), the
//! restriction lists themselves (and their `defer_if_permit` /
//! `defer_if_reject` state: the first reason is kept), `rbl_reply_maps`,
//! `smtpd_dns_reply_filter`, `reject_rhsbl_recipient`,
//! `permit_rhswl_client`.

pub mod lists;
pub mod lookup;
pub mod names;

use std::net::IpAddr;
use std::sync::Arc;

pub use lists::{DnsList, DnsListError, Listing};
pub use lookup::Limits;
pub use names::{valid_hostname, ClientNames, NameStatus};

use crate::receive::access::Reply;
use crate::routing::dns::Dns;
use lookup::{Fact, Lookups, Query};

/// What one DNS restriction decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsCheck {
    /// Nothing against (Postfix's DUNNO): the list goes on.
    Pass,
    /// Allowlisted (Postfix's OK): the list permits. At RCPT, Postfix
    /// lets an allowlist permit only a recipient the client may relay to
    /// (permit_auth_destination): the caller checks that.
    Permit,
    /// Refused with this reply now (4XX or 5XX: the configured code).
    Reject(Reply),
    /// A temporary DNS failure under the tempfail action `defer`: this
    /// reply now.
    Defer(Reply),
    /// A temporary DNS failure under `defer_if_permit` (the default): the
    /// list goes on, and this reply replaces a permit at its end.
    DeferIfPermit(Reply),
    /// An allowlist that did not answer: the list goes on, and this reply
    /// replaces a later 5XX refusal.
    DeferIfReject(Reply),
}

/// Postfix's `*_tempfail_action`: what a temporary failure does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TempfailAction {
    /// Reply 4XX at once.
    Defer,
    /// Reply 4XX only if the list would otherwise permit.
    #[default]
    DeferIfPermit,
}

/// The codes and actions, named and defaulted as Postfix's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnsCheckCodes {
    /// `unknown_address_reject_code` (450): unknown sender/recipient domain.
    pub unknown_address_reject_code: u16,
    /// `unknown_client_reject_code` (450): client without (a confirmed) name.
    pub unknown_client_reject_code: u16,
    /// `unknown_hostname_reject_code` (450): unknown HELO host name.
    pub unknown_hostname_reject_code: u16,
    /// `maps_rbl_reject_code` (554): listed in a DNS blocklist.
    pub maps_rbl_reject_code: u16,
    /// `unknown_address_tempfail_action` (`$reject_tempfail_action`,
    /// `defer_if_permit`).
    pub unknown_address_tempfail_action: TempfailAction,
    /// `unknown_helo_hostname_tempfail_action` (likewise).
    pub unknown_helo_hostname_tempfail_action: TempfailAction,
}

impl Default for DnsCheckCodes {
    fn default() -> Self {
        DnsCheckCodes {
            unknown_address_reject_code: 450,
            unknown_client_reject_code: 450,
            unknown_hostname_reject_code: 450,
            maps_rbl_reject_code: 554,
            unknown_address_tempfail_action: TempfailAction::DeferIfPermit,
            unknown_helo_hostname_tempfail_action: TempfailAction::DeferIfPermit,
        }
    }
}

/// Postfix's reply classes (smtpd_dsn_fix.h), as the texts name them.
const CLIENT: &str = "Client host";
const REV_CLIENT: &str = "Unverified Client host";
const HELO: &str = "Helo command";
const SENDER: &str = "Sender address";
const RECIPIENT: &str = "Recipient address";

/// The DNS checks: a resolver's answers, kept a while, and the codes.
pub struct DnsChecker {
    lookups: Lookups,
    codes: DnsCheckCodes,
}

/// How a name's lookups ended, as Postfix ranks them (dns_lookup_l: the
/// highest of the types asked wins, unless one was found).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    NotFound,
    NullMx,
    Invalid,
    Retry,
    Ok,
}

impl DnsChecker {
    pub fn new(dns: Arc<Dns>, codes: DnsCheckCodes, limits: Limits) -> DnsChecker {
        DnsChecker {
            lookups: Lookups::new(dns, limits),
            codes,
        }
    }

    pub fn codes(&self) -> &DnsCheckCodes {
        &self.codes
    }

    /// The client's names: looked up once per session, at connect (as
    /// Postfix's smtpd does), for the checks that take [`ClientNames`].
    pub async fn client_names(&self, ip: IpAddr) -> ClientNames {
        names::client_names(&self.lookups, ip).await
    }

    /// `reject_unknown_sender_domain`: `sender` as given in MAIL FROM
    /// (the null sender passes).
    pub async fn unknown_sender_domain(&self, sender: &str) -> DnsCheck {
        self.unknown_address(sender, SENDER).await
    }

    /// `reject_unknown_recipient_domain`: `recipient` as given in RCPT TO.
    pub async fn unknown_recipient_domain(&self, recipient: &str) -> DnsCheck {
        self.unknown_address(recipient, RECIPIENT).await
    }

    /// `reject_unknown_helo_hostname`: an address literal passes (its
    /// syntax is `reject_invalid_helo_hostname`'s); any other name needs
    /// an A, AAAA or MX record (a null MX will do). Without HELO/EHLO the
    /// caller passes (as Postfix skips the check).
    pub async fn unknown_helo_hostname(&self, helo: &str) -> DnsCheck {
        if helo.starts_with('[') {
            return DnsCheck::Pass;
        }
        let status = self
            .name_status(helo, &[Kind::A, Kind::Aaaa, Kind::Mx])
            .await;
        let why = |what: &str| format!("<{helo}>: {HELO} rejected: {what}");
        let code = self.codes.unknown_hostname_reject_code;
        match status {
            Status::Ok | Status::NullMx => DnsCheck::Pass,
            Status::Retry => tempfail(
                self.codes.unknown_helo_hostname_tempfail_action,
                reply(450, "4.7.1", why("Host not found")),
            ),
            Status::Invalid => {
                DnsCheck::Reject(reply(code, "4.7.1", why("Malformed DNS server reply")))
            }
            Status::NotFound => DnsCheck::Reject(reply(code, "4.7.1", why("Host not found"))),
        }
    }

    /// `reject_unknown_client_hostname`: no forward-confirmed name.
    pub fn unknown_client_hostname(&self, names: &ClientNames, ip: IpAddr) -> DnsCheck {
        let code = match names.name_status {
            NameStatus::Ok => return DnsCheck::Pass,
            NameStatus::Temp => 450,
            NameStatus::Perm | NameStatus::Forged => self.codes.unknown_client_reject_code,
        };
        let text = format!(
            "{CLIENT} rejected: cannot find your hostname, [{}]",
            ip.to_canonical()
        );
        DnsCheck::Reject(reply(code, "4.7.25", text))
    }

    /// `reject_unknown_reverse_client_hostname`: no PTR name at all.
    pub fn unknown_reverse_client_hostname(&self, names: &ClientNames, ip: IpAddr) -> DnsCheck {
        let code = match names.reverse_name_status {
            NameStatus::Ok => return DnsCheck::Pass,
            NameStatus::Perm => self.codes.unknown_client_reject_code,
            NameStatus::Temp | NameStatus::Forged => 450,
        };
        let text = format!(
            "{CLIENT} rejected: cannot find your reverse hostname, [{}]",
            ip.to_canonical()
        );
        DnsCheck::Reject(reply(code, "4.7.1", text))
    }

    /// `reject_rbl_client list`: the client's address in a blocklist.
    pub async fn rbl_client(&self, list: &DnsList, ip: IpAddr) -> DnsCheck {
        let listing = lists::address_listing(&self.lookups, list, ip).await;
        self.blocked(listing, list, &ip.to_canonical().to_string(), CLIENT)
    }

    /// `permit_dnswl_client list`: the client's address in an allowlist.
    pub async fn dnswl_client(&self, list: &DnsList, ip: IpAddr) -> DnsCheck {
        let ip = ip.to_canonical();
        match lists::address_listing(&self.lookups, list, ip).await {
            Listing::Yes(_) => DnsCheck::Permit,
            Listing::No => DnsCheck::Pass,
            Listing::Unknown => DnsCheck::DeferIfReject(reply(
                450,
                "4.7.1",
                format!("<{ip}>: {CLIENT} rejected: Service unavailable"),
            )),
        }
    }

    /// `reject_rhsbl_client list`: the client's (confirmed) name.
    pub async fn rhsbl_client(&self, list: &DnsList, names: &ClientNames) -> DnsCheck {
        if names.name.eq_ignore_ascii_case(names::UNKNOWN) {
            return DnsCheck::Pass;
        }
        let listing = lists::domain_listing(&self.lookups, list, &names.name).await;
        self.blocked(listing, list, &names.name, CLIENT)
    }

    /// `reject_rhsbl_reverse_client list`: the client's PTR name.
    pub async fn rhsbl_reverse_client(&self, list: &DnsList, names: &ClientNames) -> DnsCheck {
        if names.reverse_name.eq_ignore_ascii_case(names::UNKNOWN) {
            return DnsCheck::Pass;
        }
        let listing = lists::domain_listing(&self.lookups, list, &names.reverse_name).await;
        self.blocked(listing, list, &names.reverse_name, REV_CLIENT)
    }

    /// `reject_rhsbl_sender list`: the sender's domain (the null sender
    /// passes).
    pub async fn rhsbl_sender(&self, list: &DnsList, sender: &str) -> DnsCheck {
        if sender.is_empty() {
            return DnsCheck::Pass;
        }
        let listing = lists::domain_listing(&self.lookups, list, sender).await;
        self.blocked(listing, list, sender, SENDER)
    }

    /// `reject_rhsbl_helo list`: the HELO name (without one, the caller
    /// passes).
    pub async fn rhsbl_helo(&self, list: &DnsList, helo: &str) -> DnsCheck {
        let listing = lists::domain_listing(&self.lookups, list, helo).await;
        self.blocked(listing, list, helo, HELO)
    }

    /// Postfix's default_rbl_reply: `$rbl_code Service unavailable;
    /// $rbl_class [$rbl_what] blocked using $rbl_domain${rbl_reason?;
    /// $rbl_reason}`; a list that did not answer does not list.
    fn blocked(&self, listing: Listing, list: &DnsList, what: &str, class: &str) -> DnsCheck {
        let Listing::Yes(txt) = listing else {
            return DnsCheck::Pass;
        };
        let reason = match txt.is_empty() {
            true => String::new(),
            false => format!("; {}", expansion(&txt)),
        };
        let text = format!(
            "Service unavailable; {class} [{}] blocked using {}{reason}",
            expansion(what),
            list.zone
        );
        DnsCheck::Reject(reply(self.codes.maps_rbl_reject_code, "4.7.1", text))
    }

    /// Postfix's reject_unknown_address / reject_unknown_mailhost.
    async fn unknown_address(&self, address: &str, class: &str) -> DnsCheck {
        let Some((_, domain)) = address.rsplit_once('@') else {
            return DnsCheck::Pass;
        };
        if address.is_empty() || domain.starts_with('[') {
            return DnsCheck::Pass;
        }
        let domain = domain.strip_suffix('.').unwrap_or(domain);
        let ascii = crate::routing::dns::ascii_name(domain).unwrap_or_else(|_| domain.into());
        let status = self
            .name_status(&ascii, &[Kind::Mx, Kind::A, Kind::Aaaa])
            .await;
        let sender = class == SENDER;
        let dsn = if sender { "4.1.8" } else { "4.1.2" };
        let why = |what: &str| format!("<{address}>: {class} rejected: {what}");
        let code = self.codes.unknown_address_reject_code;
        match status {
            Status::Ok => DnsCheck::Pass,
            Status::NullMx => DnsCheck::Reject(match sender {
                true => reply(550, "4.7.27", why(&null_mx(&ascii))),
                false => reply(556, "4.1.10", why(&null_mx(&ascii))),
            }),
            Status::Retry => tempfail(
                self.codes.unknown_address_tempfail_action,
                reply(450, dsn, why("Domain not found")),
            ),
            Status::Invalid => {
                DnsCheck::Reject(reply(code, dsn, why("Malformed DNS server reply")))
            }
            Status::NotFound => DnsCheck::Reject(reply(code, dsn, why("Domain not found"))),
        }
    }

    /// Asks for `kinds` in order (one after the other, as Postfix: at
    /// worst three timeouts) until one is found (or, MX first, a null
    /// MX or only invalid hosts stop it), and ranks the rest as Postfix's
    /// dns_lookup_l: the highest status of those asked.
    async fn name_status(&self, name: &str, kinds: &[Kind]) -> Status {
        if !valid_hostname(name) {
            return Status::NotFound;
        }
        let stops_on_mx = kinds.first() == Some(&Kind::Mx);
        let mut worst = Status::NotFound;
        for kind in kinds {
            let status = match kind {
                Kind::Mx => mx_status(&*self.lookups.fact(Query::Mx(name.into())).await),
                Kind::A => addr_status(&*self.lookups.fact(Query::A(name.into())).await),
                Kind::Aaaa => addr_status(&*self.lookups.fact(Query::Aaaa(name.into())).await),
            };
            let stop = status == Status::Ok
                || (stops_on_mx && matches!(status, Status::NullMx | Status::Invalid));
            if stop {
                return status;
            }
            worst = worst.max(status);
        }
        worst
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mx,
    A,
    Aaaa,
}

/// An MX answer: any root target is a null MX; some valid target (a
/// numeric one too, as Postfix takes it), found; only invalid ones, a
/// malformed answer.
fn mx_status(fact: &Fact) -> Status {
    match fact {
        Fact::Mx(targets) if targets.iter().any(String::is_empty) => Status::NullMx,
        Fact::Mx(targets) if targets.iter().any(|t| names::valid_rr_name(t)) => Status::Ok,
        Fact::Mx(_) => Status::Invalid,
        Fact::Failed(_) => Status::Retry,
        _ => Status::NotFound,
    }
}

fn addr_status(fact: &Fact) -> Status {
    match fact {
        Fact::V4(a) if !a.is_empty() => Status::Ok,
        Fact::V6(a) if !a.is_empty() => Status::Ok,
        Fact::Failed(_) => Status::Retry,
        _ => Status::NotFound,
    }
}

fn null_mx(domain: &str) -> String {
    format!("Domain {domain} does not accept mail (nullMX)")
}

fn tempfail(action: TempfailAction, reply: Reply) -> DnsCheck {
    match action {
        TempfailAction::Defer => DnsCheck::Defer(reply),
        TempfailAction::DeferIfPermit => DnsCheck::DeferIfPermit(reply),
    }
}

/// A reply as Postfix's smtpd_check_reject() makes it: the enhanced
/// code's class is the reply code's; the text is printable ASCII (other
/// bytes spaces), the whole line at most 510 bytes.
fn reply(code: u16, dsn: &str, text: String) -> Reply {
    let class = char::from(b'0' + (code / 100 % 10) as u8);
    let enhanced = format!("{class}{}", &dsn[1..]);
    let room = 510usize.saturating_sub(4 + enhanced.len() + 1);
    let text: String = text
        .bytes()
        .take(room)
        .map(|b| match b {
            0x20..=0x7e => b as char,
            _ => ' ',
        })
        .collect();
    Reply {
        code,
        enhanced: Some(enhanced),
        text,
    }
}

/// A value put into the reply template as Postfix's
/// `smtpd_expansion_filter` passes it: tab and printable ASCII, anything
/// else `_`.
fn expansion(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'\t' | 0x20..=0x7e => b as char,
            _ => '_',
        })
        .collect()
}

#[cfg(test)]
mod tests;
