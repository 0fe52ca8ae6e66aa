//! [`Intake::accept`]: the intake's stages, in Postfix cleanup's order,
//! each in its own file and called in order from [`run`]:
//!
//! 1. body checks, trace and hop limit (`checks.rs`);
//! 2. rewriting of the envelope (`[rewrite]`, `rewrite.rs`): canonical
//!    maps and masquerading, virtual aliases, the archive copies;
//! 3. forged Authentication-Results in our name removed, before any
//!    filter reads the message (`authenticate.rs`);
//! 4. header and body checks: Postfix's `header_checks`,
//!    `mime_header_checks`, `nested_header_checks`, `body_checks`
//!    (`content_checks.rs`), on the header as it came (Postfix checks a
//!    header before it rewrites its addresses);
//! 5. rewriting of the header's addresses (`rewrite.rs`, `headers`);
//! 6. content filters: the door's milters (`filters.rs`);
//! 7. the sender limits: our own users' mail over a limit is held
//!    (`limits.rs`);
//! 8. the access tables' REDIRECT and BCC (`divert.rs`);
//! 9. sender authentication for strangers on a `sender_auth` listener
//!    (`authenticate.rs`), or signing for trusted origins (`sign.rs`);
//! 10. the spool and the queue (`store.rs`).
//!
//! A stage refuses (the sender's reply, logged here), drops the message
//! (a check's or a milter's DISCARD, no recipient left), holds it (recorded here and
//! logged once it is stored), or passes it on changed.
//!
//! Trust: see `mod.rs`. Invariant: every refusal is logged once, with the
//! queue ID, before it is returned.

use super::content_checks::{self, Outcome};
use super::milter::Verdict;
use super::{authenticate, checks, divert, filters, limits, rewrite, sign, store};
use super::{Accepted, Intake, Origin, Refusal, Submission};
use crate::log::{Event, Qid, Reject};
use crate::message::flags::{LIMITED, QUARANTINE};

/// Why the message is held, once stored: the first cause wins, but a
/// milter's hold is told over an access table's (as it always was).
struct Held {
    reason: Option<String>,
    cause: &'static str,
}

pub(super) async fn run(intake: &Intake, mut sub: Submission) -> Result<Accepted, Refusal> {
    if let Err(refusal) = checks::run(intake, &mut sub) {
        return refuse(intake, &sub, refusal);
    }
    if let Err(refusal) = rewrite::run(intake, &mut sub).await {
        return refuse(intake, &sub, refusal);
    }
    authenticate::strip_ours(intake, &mut sub);
    let mut held = Held {
        reason: sub.hold.take(),
        cause: "access",
    };
    let filtered = intake.milters.smtp.is_some() || intake.milters.local.is_some();
    let filtered = match check_content(intake, &mut sub, &mut held).await {
        Ok(skip_filters) => filtered && !skip_filters,
        Err(done) => return done,
    };
    if let Err(refusal) = rewrite::headers(intake, &mut sub).await {
        return refuse(intake, &sub, refusal);
    }
    let verdict = match filtered {
        // (No allocation per message when no filter is configured.)
        false => Verdict::Pass,
        true => Box::pin(filters::run(intake, &mut sub)).await,
    };
    match verdict {
        Verdict::Pass => {}
        Verdict::Hold(reason) => (held.reason, held.cause) = (Some(reason), "milter"),
        Verdict::Discard => {
            intake.logger.emit(&Event::MilterDiscard {
                queue_id: Qid(sub.id),
            });
            return Ok(Accepted::Discarded(sub.id));
        }
        Verdict::Refuse(reply) => return refuse(intake, &sub, Refusal::Milter(reply)),
    }
    if held.reason.is_some() {
        sub.flags |= QUARANTINE;
    }
    if sub.recipients.is_empty() {
        intake.logger.emit(&Event::NoRecipientsLeft {
            queue_id: Qid(sub.id),
        });
        return Ok(Accepted::Discarded(sub.id));
    }
    if intake.config.sender_limits.any() {
        hold_over_limit(intake, &mut sub, &mut held).await;
    }
    // After the limits: they count the recipients the client gave.
    if let Err(refusal) = divert(intake, &mut sub).await {
        return refuse(intake, &sub, refusal);
    }
    let on_top = match &sub.origin {
        Origin::Smtp(c) if !(c.trusted || c.authenticated) => {
            let client = (c.peer.ip(), c.helo.clone(), c.sender_auth, c.dmarc_reject);
            match Box::pin(authenticate::check_sender(intake, client, &mut sub)).await {
                Ok(results) => results,
                Err(refusal) => return refuse(intake, &sub, refusal),
            }
        }
        _ => sign::run(intake, &sub).await,
    };
    if !on_top.is_empty() {
        let mut body = Vec::with_capacity(on_top.len() + sub.body.len());
        body.extend_from_slice(on_top.as_bytes());
        body.extend_from_slice(&sub.body);
        sub.body = body;
    }
    let stored = store::run(intake, sub).await;
    if let (Ok(Accepted::Queued(id)), Some(reason)) = (&stored, held.reason) {
        intake.logger.emit(&Event::Hold {
            queue_id: Qid(*id),
            cause: held.cause.into(),
            reason: reason.as_str().into(),
        });
    }
    stored
}

/// The BCC copies and the REDIRECT that an access table or a header
/// check asked for: the copies go through the aliases (as Postfix's go
/// through virtual_alias_maps), the REDIRECT's address does not
/// (Postfix's qmgr applies it as it is), and takes the copies too.
async fn divert(intake: &Intake, sub: &mut Submission) -> Result<(), Refusal> {
    let bccs: Vec<String> = sub.bcc.drain(..).map(|t| t.as_str().to_string()).collect();
    if !bccs.is_empty() {
        rewrite::add_copies(intake, sub, bccs, "bcc").await?;
    }
    divert::apply(&intake.logger, sub);
    Ok(())
}

/// Holds our own user's message when it crosses a sender limit.
async fn hold_over_limit(intake: &Intake, sub: &mut Submission, held: &mut Held) {
    if let Some(reason) = limits::check(intake, &*intake.limits, sub).await {
        sub.flags |= QUARANTINE;
        // Held for the limit alone: its release may release it. Held
        // for another cause too, it waits for that one's release.
        if held.reason.is_none() {
            sub.flags |= LIMITED;
            (held.reason, held.cause) = (Some(reason), "limit");
        }
    }
}

/// The header and body checks, when the message's door has any (nothing
/// allocated otherwise): whether they turned the milters off, or the
/// message's end (refused, discarded).
async fn check_content(
    intake: &Intake,
    sub: &mut Submission,
    held: &mut Held,
) -> Result<bool, Result<Accepted, Refusal>> {
    let Some(checks) = intake.content_checks.for_origin(&sub.origin).cloned() else {
        return Ok(false);
    };
    match Box::pin(content_checks::run(intake, &checks, sub)).await {
        Outcome::Pass { hold, skip_filters } => {
            if let (None, Some(reason)) = (&held.reason, hold) {
                (held.reason, held.cause) = (Some(reason), "header_checks");
            }
            Ok(skip_filters)
        }
        // (Logged by the check, as Postfix's `discard:` line.)
        Outcome::Discard => Err(Ok(Accepted::Discarded(sub.id))),
        Outcome::Refuse(refusal) => Err(refuse(intake, sub, refusal)),
    }
}

/// Logs a refusal and returns it.
fn refuse(intake: &Intake, sub: &Submission, refusal: Refusal) -> Result<Accepted, Refusal> {
    log_refusal(intake, sub, &refusal);
    Err(refusal)
}

fn log_refusal(intake: &Intake, sub: &Submission, refusal: &Refusal) {
    let from = match &sub.origin {
        Origin::Smtp(c) => format!("[{}]", c.peer.ip()),
        Origin::Local { uid, .. } => {
            format!("uid {}", uid.map_or("unknown".into(), |u| u.to_string()))
        }
        Origin::Notice => "a notice".into(),
    };
    let reply = refusal.reply();
    intake.logger.emit(&Event::Reject(Reject::Data {
        stage: "data".into(),
        queue_id: Qid(sub.id),
        cause: refusal.cause().into(),
        code: reply.code,
        dsn: reply.status.map(|s| s.to_string().into()),
        from: sub.sender.as_str().into(),
        line: format!(
            "{}: reject: end of data from {from}: {reply}; from=<{}>",
            Qid(sub.id),
            sub.sender
        )
        .into(),
    }));
}
