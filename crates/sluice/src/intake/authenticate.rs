//! The sender-authentication stage: forged `Authentication-Results:`
//! fields in our name removed from mail from outside, before any content
//! filter reads the message, and, for a stranger on a `sender_auth`
//! listener, SPF/DKIM/DMARC checked (`sender_auth.rs`) with our own
//! results put on top or the DMARC refusal.
//!
//! Trust: the message is the sender's; `Origin` is the door's.
//! Invariant: only results in our name that we wrote survive the intake.

use super::arc::ArcStep;
use super::{sender_auth, Intake, Origin, Refusal, Submission};
use crate::log::{Event, Qid};

/// Authentication-Results: fields in our name (our hostname as the
/// authserv-id) that arrive with the message are forgeries (RFC 8601 §5):
/// removed at the door, before any filter reads them, so a milter that
/// trusts our id (OpenDMARC's TrustedAuthservIDs) sees only ours, and the
/// results our own filters add later are kept. Every client but
/// mynetworks: authenticated and local users may forge too; mynetworks is
/// where a content filter (amavis) hands mail back with our results of
/// the first pass. Notices are ours.
pub(super) fn strip_ours(intake: &Intake, sub: &mut Submission) {
    let from_outside = match &sub.origin {
        Origin::Smtp(c) => !c.trusted,
        Origin::Local { .. } => true,
        Origin::Notice => false,
    };
    if !from_outside {
        return;
    }
    let host = intake.config.hostname.as_str();
    if let Some(stripped) = sender_auth::strip_forged_results(&sub.body, host) {
        sub.body = stripped;
    }
}

/// For a stranger on a `sender_auth` listener (forged results in our name
/// are gone already, see `strip_ours`): SPF/DKIM/DMARC checked; our
/// own Authentication-Results field to put on top, or the DMARC refusal.
pub(super) async fn check_sender(
    intake: &Intake,
    (ip, helo, wanted, dmarc_reject): (std::net::IpAddr, String, bool, bool),
    sub: &mut Submission,
) -> Result<String, Refusal> {
    let Some(checker) = intake.sender_auth.as_ref().filter(|_| wanted) else {
        return Ok(String::new());
    };
    let step = arc_step(intake, sub);
    let asked = sender_auth::Asked {
        ip,
        helo: &helo,
        sender: &sub.sender,
        dmarc_reject,
        max_signatures: intake.config.smtpd.dkim_verify_max_signatures,
        arc: step,
    };
    let verdict = checker.check(&asked, &sub.body).await;
    if let (ArcStep::Seal(sealer), Some(sealed)) = (step, &verdict.sealed) {
        intake.logger.emit(&Event::ArcSealed {
            queue_id: Qid(sub.id),
            domain: sealer.domain().into(),
            cv: verdict.arc.into(),
            sealed: sealed.is_ok(),
            error: sealed.as_ref().err().map_or("", |e| e.as_str()).into(),
        });
    }
    intake.logger.emit(&Event::SenderAuth {
        queue_id: Qid(sub.id),
        spf: verdict.spf.as_str().into(),
        dkim: verdict.dkim.iter().map(|d| d.as_str().into()).collect(),
        dkim_not_evaluated: verdict.skipped as u64,
        dmarc: verdict.dmarc.into(),
        policy: verdict.policy.as_str().into(),
        from_domain: verdict.from_domain.as_str().into(),
        line: format!(
            "{}: sender authentication: {}",
            Qid(sub.id),
            verdict.summary
        )
        .into(),
    });
    match verdict.reject {
        Some(reply) => Err(Refusal::Dmarc(reply)),
        None => Ok(verdict.header),
    }
}

/// `[arc]` off: nothing; on: verify, and seal a message we forward
/// (`routing::forward`) when we have a key.
fn arc_step<'a>(intake: &'a Intake, sub: &Submission) -> ArcStep<'a> {
    if !intake.config.arc.enabled {
        return ArcStep::Off;
    }
    let forwarded = intake.forwarding.as_ref().is_some_and(|f| {
        sub.orig_rcpt
            .iter()
            .any(|(r, given)| sub.recipients.contains(r) && f.is_forwarded(r, given))
    });
    match (&intake.arc, forwarded) {
        (Some(sealer), true) => ArcStep::Seal(sealer),
        _ => ArcStep::Verify,
    }
}
