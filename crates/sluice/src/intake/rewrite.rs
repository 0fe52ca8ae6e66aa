//! The rewriting stage (issue 39), where Postfix's cleanup rewrites
//! addresses (`[rewrite]`), in its order: the canonical maps and
//! masquerading on the envelope (`canonical.rs`, `masquerade.rs`), then
//! the virtual alias maps, then the archive copies ([`run`]); and, after
//! the header and body checks, on the header ([`headers`]:
//! `header_stage.rs`, with `headers.rs` and `address_list.rs`).
//!
//! Canonical maps (`canonical.rs`): the envelope sender through
//! `sender_canonical_maps` then `canonical_maps`, each recipient through
//! `recipient_canonical_maps` then `canonical_maps`, as Postfix's
//! cleanup_map11: Postfix's keys, a value `@domain` keeping the local
//! part, the extension a key left out put back
//! (`propagate_unmatched_extensions`' default), and each table asked
//! again with what it gave until the answer stops changing (at most 10
//! times: a loop is logged and the last answer kept). A rewritten
//! recipient keeps the address it was given as (the log's `orig_to`);
//! two that become the same and were given as the same are one (as
//! Postfix). Each table list applies to what its `*_classes` name
//! (`envelope_sender`, `envelope_recipient`, `header_sender`,
//! `header_recipient`); masquerading (`masquerade_domains`) follows the
//! canonical maps, for what `masquerade_classes` name. The header's
//! sender and recipient fields are rewritten address by address, only
//! for local clients (`local_header_rewrite_clients`) or when
//! `remote_header_rewrite_domain` is set (`header_stage.rs`).
//!
//! Virtual alias maps (`virtual_alias.rs`), after the canonical maps,
//! for every recipient (our notices' too).
//!
//! Archive copies (Postfix's `always_bcc`, `sender_bcc_maps`,
//! `recipient_bcc_maps`), after the canonical maps:
//! - The sender (not the null sender) is looked up in the sender BCC
//!   maps, each recipient in the recipient BCC maps, with Postfix's keys
//!   (`tables::search`: the address, without its extension, `user` for a
//!   local domain, `@domain`; no extension passed on); the first value of
//!   what a table finds is the copy's address.
//! - A copy goes through the virtual alias maps (as Postfix's copies
//!   do), and a copy to one of our local domains through the local
//!   aliases;
//! - Each copy is one more recipient, unless it is one already, and is
//!   never reported to the sender (`NOTIFY=NEVER`, as Postfix's own BCC
//!   copies get NOTIFY=NONE), logged as a `bcc` event.
//! - A table that cannot answer defers the message (`451 4.3.0`), as
//!   Postfix's cleanup does; a value that is not a mailbox is logged and
//!   skipped.
//! - Our own notices get no copy (Postfix's bounces neither).
//!
//! Trust: the tables are the administrator's; the addresses looked up
//! are the sender's. Invariant: nothing is done, and nothing allocated,
//! when `[rewrite]` is empty.

use std::sync::Arc;

use super::{divert, Intake, Origin, Refusal, Submission};
use crate::log::{Event, Qid};
use crate::message::address::Target;
use crate::tables::search::{mapped_address, Rules};
use crate::tables::Table;

pub mod address_list;
mod canonical;
mod header_stage;
pub mod headers;
pub mod masquerade;

pub use header_stage::HeaderClients;
pub use masquerade::Masquerade;
pub mod virtual_alias;

/// `[rewrite]`'s tables, as the restriction lists' builder built them.
#[derive(Default)]
pub struct RewriteMaps {
    pub sender_bcc: Vec<Arc<Table>>,
    pub recipient_bcc: Vec<Arc<Table>>,
    pub canonical: Vec<Arc<Table>>,
    pub sender_canonical: Vec<Arc<Table>>,
    pub recipient_canonical: Vec<Arc<Table>>,
    pub virtual_alias: Vec<Arc<Table>>,
    /// `virtual_alias_domains` when listed (lower case); `None`: the
    /// domains the virtual alias maps have as keys.
    pub virtual_alias_domains: Option<std::collections::HashSet<String>>,
    /// `smtp_generic_maps`, for the SMTP client (`deliver::smtp::generic`).
    pub generic: Vec<Arc<Table>>,
    /// The `*_classes`, read.
    pub classes: Classes,
    pub masquerade: Masquerade,
    pub header_clients: HeaderClients,
}

/// Address classes, as bits ([`class_bits`]).
pub const ENV_SENDER: u8 = 1;
pub const ENV_RECIPIENT: u8 = 2;
pub const HDR_SENDER: u8 = 4;
pub const HDR_RECIPIENT: u8 = 8;

/// The bits of a `*_classes` list (validated: every name known).
pub fn class_bits(list: &[String]) -> u8 {
    let bit = |c: &str| match c {
        "envelope_sender" => ENV_SENDER,
        "envelope_recipient" => ENV_RECIPIENT,
        "header_sender" => HDR_SENDER,
        "header_recipient" => HDR_RECIPIENT,
        _ => 0,
    };
    list.iter().fold(0, |bits, c| bits | bit(c))
}

/// What each table list and masquerading apply to.
#[derive(Debug, Clone, Copy, Default)]
pub struct Classes {
    pub canonical: u8,
    pub sender: u8,
    pub recipient: u8,
    pub masquerade: u8,
}

impl Classes {
    pub fn new(config: &crate::config::rewrite::RewriteConfig) -> Classes {
        Classes {
            canonical: class_bits(&config.canonical_classes),
            sender: class_bits(&config.sender_canonical_classes),
            recipient: class_bits(&config.recipient_canonical_classes),
            masquerade: class_bits(&config.masquerade_classes),
        }
    }
}

/// The header's sender and recipient fields rewritten
/// (`header_stage.rs`): after the header and body checks, which see the
/// header as it came, as in Postfix's cleanup (our notices' left alone).
pub(super) async fn headers(intake: &Intake, sub: &mut Submission) -> Result<(), Refusal> {
    if !intake.config.rewrite.any() || matches!(sub.origin, Origin::Notice) {
        return Ok(());
    }
    header_stage::run(intake, &intake.rewrite, sub).await
}

/// The stage (the envelope's part).
pub(super) async fn run(intake: &Intake, sub: &mut Submission) -> Result<(), Refusal> {
    let rw = &intake.config.rewrite;
    if !rw.any() {
        return Ok(());
    }
    let maps = &*intake.rewrite;
    // Our notices get no canonical rewriting and no copy, but their
    // recipients are virtual aliases' too (a bounce to an alias).
    let notice = matches!(sub.origin, Origin::Notice);
    if !notice {
        canonical::run(intake, maps, sub).await?;
    }
    virtual_alias::run(intake, maps, sub).await?;
    if notice {
        return Ok(());
    }
    let mut copies = Vec::new();
    if !rw.always_bcc.is_empty() {
        copies.push(rw.always_bcc.clone());
    }
    if !sub.sender.is_empty() {
        let found = lookup(
            intake,
            &maps.sender_bcc,
            &sub.sender,
            "sender_bcc_maps",
            false,
        )
        .await?;
        copies.extend(found);
    }
    for r in sub.recipients.clone() {
        let found = lookup(intake, &maps.recipient_bcc, &r, "recipient_bcc_maps", false).await?;
        copies.extend(found);
    }
    add_copies(intake, sub, copies, "bcc_map").await
}

/// Adds a copy of the message for each of `addresses` (the archive
/// copies, an access table's BCC): each through [`copy_targets`], each
/// result one more recipient never reported on (unless it is one
/// already), with the copy's address as its `orig_to` when an alias
/// changed it (as Postfix logs a virtual alias's copy); logged as `bcc`.
/// A result that is not a mailbox is logged (`what`) and skipped.
pub(super) async fn add_copies(
    intake: &Intake,
    sub: &mut Submission,
    addresses: Vec<String>,
    what: &str,
) -> Result<(), Refusal> {
    for address in addresses {
        for copy in copy_targets(intake, &intake.rewrite, address.clone()).await? {
            let Ok(target) = Target::new(&copy) else {
                intake.logger.emit(&Event::Warning {
                    kind: what.into(),
                    open: None,
                    line: format!(
                        "warning: {}: BCC address {copy:?} is no mailbox: ignored",
                        Qid(sub.id)
                    )
                    .into(),
                });
                continue;
            };
            if divert::add_bcc(sub, &target) {
                if !copy.eq_ignore_ascii_case(&address) {
                    sub.orig_rcpt.push((copy.clone(), address.clone()));
                }
                intake.logger.emit(&Event::Bcc {
                    queue_id: Qid(sub.id),
                    to: target.as_str().into(),
                });
            }
        }
    }
    Ok(())
}

/// Where a copy to `address` goes: through the virtual alias maps (as
/// Postfix expands its BCC copies), then each result through the local
/// aliases when its domain is ours; nowhere for an alias that discards.
async fn copy_targets(
    intake: &Intake,
    maps: &RewriteMaps,
    address: String,
) -> Result<Vec<String>, Refusal> {
    let addresses = match maps.virtual_alias.is_empty() {
        true => vec![address],
        false => {
            let rw = &intake.config.rewrite;
            let limits = (
                rw.virtual_alias_recursion_limit,
                rw.virtual_alias_expansion_limit,
            );
            let delimiters = intake.config.recipient_delimiter.as_str();
            match maps.expand(&address, delimiters, limits).await {
                Ok(found) => found,
                Err(virtual_alias::ExpandError::Lookup(..)) => {
                    return Err(Refusal::Lookup("virtual_alias_maps".into()))
                }
                Err(_) => return Err(Refusal::AliasExpansion),
            }
        }
    };
    let mut out = Vec::with_capacity(addresses.len());
    for a in addresses {
        out.extend(virtual_alias::local_aliases(&intake.mailboxes, a).await?);
    }
    Ok(out)
}

/// What `tables` give `address`, if anything: the value as it is, or
/// (`mapped`) the address it maps `address` to.
pub(super) async fn lookup(
    intake: &Intake,
    tables: &[Arc<Table>],
    address: &str,
    what: &str,
    mapped: bool,
) -> Result<Option<String>, Refusal> {
    if tables.is_empty() {
        return Ok(None);
    }
    let domain = crate::message::address::domain_of(address);
    let rules = Rules {
        delimiters: &intake.config.recipient_delimiter,
        local: intake.mailboxes.is_local_domain(domain),
        owner_request_special: true,
    };
    // (A table that fails logs its own `lookup_failed`.)
    match crate::tables::find_address(tables, address, &rules).await {
        Ok(found) => Ok(found.and_then(|f| {
            let value = f.values.first()?;
            Some(match mapped {
                // (Postfix's mail_addr_map: `@domain` values, the
                // extension put back, as `propagate_unmatched_extensions`
                // says for canonical maps by default.)
                true => mapped_address(address, value, f.dropped.as_deref(), true),
                // (mail_addr_find: the value as it is.)
                false => value.clone(),
            })
        })),
        Err(_) => Err(Refusal::Lookup(what.into())),
    }
}
