//! The rewriting stage (issue 39), where Postfix's cleanup rewrites
//! addresses: so far the archive copies, Postfix's `always_bcc`,
//! `sender_bcc_maps` and `recipient_bcc_maps` (`[rewrite]`).
//!
//! - The sender (not the null sender) is looked up in the sender BCC
//!   maps, each recipient in the recipient BCC maps, with Postfix's keys
//!   (`tables::search`: the address, without its extension, `user` for a
//!   local domain, `@domain`; no extension passed on); the first value of
//!   what a table finds is the copy's address.
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
use crate::tables::search::Rules;
use crate::tables::Table;

/// The BCC maps, as the restriction lists' builder built them.
#[derive(Default)]
pub struct BccMaps {
    pub sender: Vec<Arc<Table>>,
    pub recipient: Vec<Arc<Table>>,
}

/// The stage.
pub(super) async fn run(intake: &Intake, sub: &mut Submission) -> Result<(), Refusal> {
    let rw = &intake.config.rewrite;
    if !rw.any() || matches!(sub.origin, Origin::Notice) {
        return Ok(());
    }
    let maps = &intake.bcc;
    let mut copies = Vec::new();
    if !rw.always_bcc.is_empty() {
        copies.push(rw.always_bcc.clone());
    }
    if !sub.sender.is_empty() {
        let found = lookup(intake, &maps.sender, &sub.sender, "sender_bcc_maps").await?;
        copies.extend(found);
    }
    for r in sub.recipients.clone() {
        let found = lookup(intake, &maps.recipient, &r, "recipient_bcc_maps").await?;
        copies.extend(found);
    }
    for copy in copies {
        let target = match Target::new(&copy) {
            Ok(t) => t,
            Err(_) => {
                intake.logger.emit(&Event::Warning {
                    kind: "bcc_map".into(),
                    open: None,
                    line: format!(
                        "warning: {}: BCC address {copy:?} is no mailbox: ignored",
                        Qid(sub.id)
                    )
                    .into(),
                });
                continue;
            }
        };
        if divert::add_bcc(sub, &target) {
            intake.logger.emit(&Event::Bcc {
                queue_id: Qid(sub.id),
                to: target.as_str().into(),
            });
        }
    }
    Ok(())
}

/// The copy's address `tables` give `address`, if any.
async fn lookup(
    intake: &Intake,
    tables: &[Arc<Table>],
    address: &str,
    what: &str,
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
        Ok(found) => Ok(found.and_then(|f| f.values.first().cloned())),
        Err(_) => Err(Refusal::Lookup(what.into())),
    }
}
