//! Postfix's `virtual_alias_maps` (`[rewrite]`), for every recipient in
//! any domain, and the RCPT-time question of which addresses the
//! rewriting maps make known.
//!
//! Expansion is Postfix cleanup's (cleanup_map1n), after the canonical
//! maps:
//! - the address is looked up with Postfix's keys (`tables::search`:
//!   the address, without its extension, `@domain`); a value lists one
//!   or more addresses, each `@domain` keeping the local part and the
//!   extension the key left out put back (`propagate_unmatched_extensions`
//!   names virtual by default);
//! - the first address of a value replaces the one looked up and is
//!   looked up again, in place, until a table has nothing for it; the
//!   others are expanded in their turn;
//! - an address that expands into itself (among others) is kept and not
//!   looked up again;
//! - more than `virtual_alias_expansion_limit` addresses, a chain deeper
//!   than `virtual_alias_recursion_limit` (a loop ends there), or a value
//!   over 1,000 characters defers the whole message: `451 4.6.0 Alias
//!   expansion error`, as Postfix's cleanup answers; a table that cannot
//!   answer defers it too (`451 4.3.0`).
//!
//! A result that is in one of our local domains and is not the address
//! given goes through the local aliases as well (Sluice's `[local]`
//! alias table is its own alias layer: what it does to an address given
//! at RCPT it does to an address a virtual alias gave).
//!
//! At RCPT (Postfix's check_rcpt_maps): an address that
//! `recipient_canonical_maps`, `canonical_maps` or `virtual_alias_maps`
//! has is known, whatever its domain (the intake rewrites it); an
//! address of a virtual alias domain that they do not have is unknown
//! (`550 5.1.1 … User unknown in virtual alias table`).
//!
//! Trust: the tables are the administrator's, the addresses the
//! sender's; a table's loop or fan-out costs bounded work (the limits)
//! and defers, never loses, the message. Invariant: nothing is looked up
//! when no virtual alias map is configured.

use std::collections::HashSet;
use std::sync::Arc;

use super::RewriteMaps;
use crate::intake::{Intake, Refusal, Submission};
use crate::log::{Event, Qid};
use crate::routing::mailboxes::{Resolution, VirtualMailboxes};
use crate::tables::search::{mapped_address, Rules};
use crate::tables::{LookupError, Table};

/// Postfix's `virtual_alias_address_length_limit`.
const ADDRESS_LENGTH_LIMIT: usize = 1000;

/// Why an address could not be expanded.
#[derive(Debug, thiserror::Error)]
pub enum ExpandError {
    #[error("unreasonable virtual_alias_maps map expansion size for {0}")]
    TooMany(String),
    #[error("unreasonable virtual_alias_maps map nesting for {0}")]
    TooDeep(String),
    #[error("unreasonable virtual_alias_maps result {0:.300}...")]
    TooLong(String),
    #[error("virtual_alias_maps map lookup problem for {0}: {1}")]
    Lookup(String, LookupError),
}

/// An address at RCPT time, as Postfix's check_rcpt_maps decides it.
pub enum RcptLookup {
    /// A rewriting map has it: taken as given, rewritten by the intake.
    Mapped,
    /// In a virtual alias domain, and no map has it.
    UnknownAlias,
    /// Neither: as the local mailboxes and aliases say.
    Local(Resolution),
}

impl RewriteMaps {
    /// Whether `domain` is a virtual alias domain: listed in
    /// `virtual_alias_domains`, or (that unset) a key of a virtual alias
    /// map that answers without I/O.
    pub fn is_virtual_alias_domain(&self, domain: &str) -> bool {
        if self.virtual_alias.is_empty() {
            return false;
        }
        let domain = domain.to_ascii_lowercase();
        let domain = domain.strip_suffix('.').unwrap_or(&domain);
        match &self.virtual_alias_domains {
            Some(listed) => listed.contains(domain),
            None => self
                .virtual_alias
                .iter()
                .any(|t| t.lookup_now(domain).is_some_and(|hit| hit.is_some())),
        }
    }

    /// Whether any map reads recipients at RCPT time.
    fn maps_recipients(&self) -> bool {
        !(self.virtual_alias.is_empty()
            && self.canonical.is_empty()
            && self.recipient_canonical.is_empty())
    }

    /// Decides `address` at RCPT time (see the head).
    pub async fn rcpt_lookup(
        &self,
        mailboxes: &VirtualMailboxes,
        delimiters: &str,
        address: &str,
    ) -> Result<RcptLookup, LookupError> {
        if self.maps_recipients() {
            let rules = rules(delimiters);
            for tables in [
                &self.recipient_canonical,
                &self.canonical,
                &self.virtual_alias,
            ] {
                if !tables.is_empty()
                    && crate::tables::find_address(tables, address, &rules)
                        .await?
                        .is_some()
                {
                    return Ok(RcptLookup::Mapped);
                }
            }
            let domain = crate::message::address::domain_of(address);
            if self.is_virtual_alias_domain(domain) {
                return Ok(RcptLookup::UnknownAlias);
            }
        }
        Ok(RcptLookup::Local(mailboxes.resolve(address).await?))
    }

    /// `address` expanded through the virtual alias maps (see the head).
    pub async fn expand(
        &self,
        address: &str,
        delimiters: &str,
        limits: (usize, usize),
    ) -> Result<Vec<String>, ExpandError> {
        let (recursion_limit, expansion_limit) = limits;
        let rules = rules(delimiters);
        let mut argv = vec![address.to_string()];
        let mut been_here: HashSet<String> = HashSet::new();
        let mut arg = 0;
        while arg < argv.len() {
            if argv.len() > expansion_limit {
                return Err(ExpandError::TooMany(address.into()));
            }
            for count in 0.. {
                if been_here.contains(&argv[arg].to_ascii_lowercase()) {
                    break;
                }
                if count >= recursion_limit {
                    return Err(ExpandError::TooDeep(address.into()));
                }
                let lhs = argv[arg].clone();
                let Some(found) = find(&self.virtual_alias, &lhs, &rules).await? else {
                    break;
                };
                for (i, value) in found.values.iter().enumerate() {
                    let mapped = mapped_address(&lhs, value, found.dropped.as_deref(), true);
                    if mapped.len() > ADDRESS_LENGTH_LIMIT {
                        return Err(ExpandError::TooLong(mapped));
                    }
                    if mapped.eq_ignore_ascii_case(&lhs) {
                        been_here.insert(lhs.to_ascii_lowercase());
                    }
                    match i {
                        0 => argv[arg] = mapped,
                        _ => argv.push(mapped),
                    }
                }
            }
            arg += 1;
        }
        Ok(argv)
    }
}

/// The keys' rules: Postfix asks `user` alone only for its own
/// `mydestination` domains, which Sluice has none of (its local domains
/// are virtual mailbox domains).
fn rules(delimiters: &str) -> Rules<'_> {
    Rules {
        delimiters,
        local: false,
        owner_request_special: true,
    }
}

async fn find(
    tables: &[Arc<Table>],
    address: &str,
    rules: &Rules<'_>,
) -> Result<Option<crate::tables::Found>, ExpandError> {
    crate::tables::find_address(tables, address, rules)
        .await
        .map_err(|e| ExpandError::Lookup(address.into(), e))
}

/// The stage's part: every recipient expanded, in place.
pub(super) async fn run(
    intake: &Intake,
    maps: &RewriteMaps,
    sub: &mut Submission,
) -> Result<(), Refusal> {
    if maps.virtual_alias.is_empty() {
        return Ok(());
    }
    let rw = &intake.config.rewrite;
    let limits = (
        rw.virtual_alias_recursion_limit,
        rw.virtual_alias_expansion_limit,
    );
    let delimiters = intake.config.recipient_delimiter.as_str();
    let mut expanded = Vec::with_capacity(sub.recipients.len());
    for r in &sub.recipients {
        let targets = match maps.expand(r, delimiters, limits).await {
            Ok(t) => t,
            Err(e) => return Err(refuse(intake, sub.id, e)),
        };
        let mut out = Vec::with_capacity(targets.len());
        for t in targets {
            match t.eq_ignore_ascii_case(r) {
                true => out.push(t),
                false => out.extend(local_aliases(&intake.mailboxes, t).await?),
            }
        }
        expanded.push(out);
    }
    super::canonical::replace_recipients(sub, expanded);
    Ok(())
}

/// Logs why the message is deferred (Postfix's cleanup warning), and the
/// refusal.
fn refuse(intake: &Intake, id: u64, e: ExpandError) -> Refusal {
    let (kind, refusal) = match &e {
        ExpandError::Lookup(..) => ("lookup", Refusal::Lookup("virtual_alias_maps".into())),
        _ => ("virtual_alias_limit", Refusal::AliasExpansion),
    };
    if kind != "lookup" {
        intake.logger.emit(&Event::Warning {
            kind: kind.into(),
            open: None,
            line: format!(
                "warning: {}: {e} -- message not accepted, try again later",
                Qid(id)
            )
            .into(),
        });
    }
    refusal
}

/// Where a virtual alias's result goes: through the local aliases when
/// its domain is ours, else to itself; nowhere for an alias that
/// discards. (An unknown local address stays: delivery bounces it, as
/// Postfix's virtual(8) does.)
pub(super) async fn local_aliases(
    mailboxes: &VirtualMailboxes,
    address: String,
) -> Result<Vec<String>, Refusal> {
    match mailboxes.resolve(&address).await {
        Ok(Resolution::Accept(targets)) => Ok(targets),
        Ok(Resolution::Discard) => Ok(Vec::new()),
        Ok(Resolution::NotLocal | Resolution::Unknown) => Ok(vec![address]),
        Err(_) => Err(Refusal::Lookup("alias_table".into())),
    }
}
