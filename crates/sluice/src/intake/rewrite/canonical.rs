//! The canonical maps on the envelope (see `rewrite.rs` for the rules).
//!
//! Trust: the tables are the administrator's, the addresses the
//! sender's. Invariants: the recipients stay lined up with their DSN
//! entries (a duplicate is dropped with its entries);
//! every rewritten recipient keeps the address it was given as.

use std::sync::Arc;

use super::{lookup, RewriteMaps};
use crate::intake::{Intake, Refusal, Submission};
use crate::log::{Event, Qid};
use crate::tables::Table;

/// Postfix's cleanup_map11 bound on asking a table again.
const MAX_ROUNDS: usize = 10;

/// Rewrites the envelope sender and recipients.
pub(super) async fn run(
    intake: &Intake,
    maps: &RewriteMaps,
    sub: &mut Submission,
) -> Result<(), Refusal> {
    if !sub.sender.is_empty() {
        let chain = [
            (&maps.sender_canonical, "sender_canonical_maps"),
            (&maps.canonical, "canonical_maps"),
        ];
        sub.sender = rewrite(intake, sub.id, &chain, &sub.sender).await?;
    }
    if maps.recipient_canonical.is_empty() && maps.canonical.is_empty() {
        return Ok(());
    }
    let chain = [
        (&maps.recipient_canonical, "recipient_canonical_maps"),
        (&maps.canonical, "canonical_maps"),
    ];
    let mut rewritten = Vec::with_capacity(sub.recipients.len());
    for r in &sub.recipients {
        rewritten.push(vec![rewrite(intake, sub.id, &chain, r).await?]);
    }
    replace_recipients(sub, rewritten);
    Ok(())
}

/// `address` through each table list of `chain` in turn.
async fn rewrite(
    intake: &Intake,
    id: u64,
    chain: &[(&Vec<Arc<Table>>, &str)],
    address: &str,
) -> Result<String, Refusal> {
    let mut current = address.to_string();
    for (tables, what) in chain {
        if tables.is_empty() {
            continue;
        }
        let mut rounds = 0;
        while let Some(next) = lookup(intake, tables, &current, what, true).await? {
            if next.eq_ignore_ascii_case(&current) {
                break;
            }
            current = next;
            rounds += 1;
            if rounds >= MAX_ROUNDS {
                intake.logger.emit(&Event::Warning {
                    kind: "rewrite_loop".into(),
                    open: None,
                    line: format!(
                        "warning: {}: {what}: {address} is still rewritten after {MAX_ROUNDS} lookups (a loop?): {current} kept",
                        Qid(id)
                    )
                    .into(),
                });
                break;
            }
        }
    }
    Ok(current)
}

/// Puts the rewritten recipients in place (each recipient's list of what
/// it became, in order; a virtual alias may make one several, or none):
/// each keeps the address it was given as (`orig_rcpt`) and its DSN
/// entries; of two that became one *and* were given as one, the first
/// stays, as Postfix's cleanup drops a duplicate only when both
/// addresses match.
pub(super) fn replace_recipients(sub: &mut Submission, rewritten: Vec<Vec<String>>) {
    let old = std::mem::take(&mut sub.recipients);
    let given_as = |r: &String, pairs: &[(String, String)]| {
        pairs
            .iter()
            .find(|(to, _)| to == r)
            .map_or_else(|| r.clone(), |(_, g)| g.clone())
    };
    let mut pairs = Vec::with_capacity(old.len());
    let mut keep = Vec::with_capacity(old.len());
    for (i, (was, became)) in old.iter().zip(rewritten).enumerate() {
        let given = given_as(was, &sub.orig_rcpt);
        for now in became {
            let same = |(r, g): &(String, String)| {
                r.eq_ignore_ascii_case(&now) && g.eq_ignore_ascii_case(&given)
            };
            if pairs.iter().any(same) {
                continue;
            }
            pairs.push((now, given.clone()));
            keep.push(i);
        }
    }
    sub.orig_rcpt = pairs
        .iter()
        .filter(|(r, g)| !r.eq_ignore_ascii_case(g))
        .cloned()
        .collect();
    sub.recipients = pairs.into_iter().map(|(r, _)| r).collect();
    if let Some(dsn) = sub.dsn.as_mut() {
        dsn.notify = keep
            .iter()
            .filter_map(|&i| dsn.notify.get(i).copied())
            .collect();
        dsn.orcpt = keep
            .iter()
            .filter_map(|&i| dsn.orcpt.get(i).cloned())
            .collect();
    }
}
