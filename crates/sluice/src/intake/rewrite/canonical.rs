//! The canonical maps on the envelope (see `rewrite.rs` for the rules),
//! each table list only when its `*_classes` name the envelope sender or
//! recipients; then masquerading, when `masquerade_classes` say so.
//!
//! Trust: the tables are the administrator's, the addresses the
//! sender's. Invariants: the recipients stay lined up with their DSN
//! entries (a duplicate is dropped with its entries);
//! every rewritten recipient keeps the address it was given as.

use std::sync::Arc;

use super::{lookup, RewriteMaps, ENV_RECIPIENT, ENV_SENDER};
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
    let c = &maps.classes;
    if !sub.sender.is_empty() {
        let chain = [
            (
                on(c.sender, ENV_SENDER, &maps.sender_canonical),
                "sender_canonical_maps",
            ),
            (
                on(c.canonical, ENV_SENDER, &maps.canonical),
                "canonical_maps",
            ),
        ];
        sub.sender = rewrite(intake, sub.id, &chain, &sub.sender).await?;
        if c.masquerade & ENV_SENDER != 0 {
            if let Some(m) = maps.masquerade.apply(&sub.sender) {
                sub.sender = m;
            }
        }
    }
    let chain = [
        (
            on(c.recipient, ENV_RECIPIENT, &maps.recipient_canonical),
            "recipient_canonical_maps",
        ),
        (
            on(c.canonical, ENV_RECIPIENT, &maps.canonical),
            "canonical_maps",
        ),
    ];
    let masquerade = c.masquerade & ENV_RECIPIENT != 0 && !maps.masquerade.is_empty();
    if chain.iter().all(|(t, _)| t.is_empty()) && !masquerade {
        return Ok(());
    }
    let mut rewritten = Vec::with_capacity(sub.recipients.len());
    for r in &sub.recipients {
        let mut now = rewrite(intake, sub.id, &chain, r).await?;
        if let Some(m) = maps.masquerade.apply(&now).filter(|_| masquerade) {
            now = m;
        }
        rewritten.push(vec![now]);
    }
    replace_recipients(sub, rewritten);
    Ok(())
}

/// `tables` when `bits` hold `class`, else none.
pub(super) fn on(bits: u8, class: u8, tables: &[Arc<Table>]) -> &[Arc<Table>] {
    match bits & class {
        0 => &[],
        _ => tables,
    }
}

/// `address` through each table list of `chain` in turn.
pub(super) async fn rewrite(
    intake: &Intake,
    id: u64,
    chain: &[(&[Arc<Table>], &str)],
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
