//! [`Intake::accept`], step by step: the body checks and our trace, the
//! hop limit, forged Authentication-Results in our name removed, the
//! content filters, the sender limits, the access tables' REDIRECT and BCC
//! (`divert.rs`), then signing (trusted origins) or sender authentication
//! (strangers on a `sender_auth` listener), then the spool and the queue.

use std::sync::Arc;

use super::headers;
use super::milter::{Client, MilterError, Verdict};
use super::sender_auth;
use super::store::Entry;
use super::{Accepted, Intake, Origin, Refusal, Stored, Submission};
use crate::log::qid;
use crate::log::{Event, Qid, Reject};
use crate::message::body;

pub(super) async fn run(intake: &Intake, mut sub: Submission) -> Result<Accepted, Refusal> {
    let checked = complete(intake, &mut sub).and_then(|()| intake.check_hops(&sub.body));
    if let Err(refusal) = checked {
        log_refusal(intake, &sub, &refusal);
        return Err(refusal);
    }
    strip_ours(intake, &mut sub);
    let filtered = intake.milters.smtp.is_some() || intake.milters.local.is_some();
    let verdict = match filtered {
        // (No allocation per message when no filter is configured.)
        false => Verdict::Pass,
        true => Box::pin(filter(intake, &mut sub)).await,
    };
    let mut held = None;
    let mut cause = "milter";
    if let Some(reason) = sub.hold.take() {
        sub.flags |= crate::message::flags::QUARANTINE;
        held = Some(reason);
        cause = "access";
    }
    match verdict {
        Verdict::Pass => {}
        Verdict::Hold(reason) => {
            sub.flags |= crate::message::flags::QUARANTINE;
            held = Some(reason);
            cause = "milter";
        }
        Verdict::Discard => {
            intake.logger.emit(&Event::MilterDiscard {
                queue_id: Qid(sub.id),
            });
            return Ok(Accepted::Discarded(sub.id));
        }
        Verdict::Refuse(reply) => {
            let refusal = Refusal::Milter(reply);
            log_refusal(intake, &sub, &refusal);
            return Err(refusal);
        }
    }
    if sub.recipients.is_empty() {
        intake.logger.emit(&Event::NoRecipientsLeft {
            queue_id: Qid(sub.id),
        });
        return Ok(Accepted::Discarded(sub.id));
    }
    if intake.config.sender_limits.any() {
        if let Some(reason) = super::limits::check(intake, &*intake.limits, &sub).await {
            use crate::message::flags::{LIMITED, QUARANTINE};
            sub.flags |= QUARANTINE;
            // Held for the limit alone: its release may release it. Held
            // for another cause too, it waits for that one's release.
            if held.is_none() {
                sub.flags |= LIMITED;
                (held, cause) = (Some(reason), "limit");
            }
        }
    }
    // After the limits: they count the recipients the client gave.
    super::divert::apply(&intake.logger, &mut sub);
    let on_top = match &sub.origin {
        Origin::Smtp(c) if !(c.trusted || c.authenticated) => {
            let client = (c.peer.ip(), c.helo.clone(), c.sender_auth, c.dmarc_reject);
            match Box::pin(check_sender(intake, client, &mut sub)).await {
                Ok(results) => results,
                Err(refusal) => {
                    log_refusal(intake, &sub, &refusal);
                    return Err(refusal);
                }
            }
        }
        _ => sign(intake, &sub).await,
    };
    if !on_top.is_empty() {
        let mut body = Vec::with_capacity(on_top.len() + sub.body.len());
        body.extend_from_slice(on_top.as_bytes());
        body.extend_from_slice(&sub.body);
        sub.body = body;
    }
    let stored = store(intake, sub).await;
    if let (Ok(Accepted::Queued(id)), Some(reason)) = (&stored, held) {
        intake.logger.emit(&Event::Hold {
            queue_id: Qid(*id),
            cause: cause.into(),
            reason: reason.as_str().into(),
        });
    }
    stored
}

/// Authentication-Results: fields in our name (our hostname as the
/// authserv-id) that arrive with the message are forgeries (RFC 8601 §5):
/// removed at the door, before any filter reads them, so a milter that
/// trusts our id (OpenDMARC's TrustedAuthservIDs) sees only ours, and the
/// results our own filters add later are kept. Every client but
/// mynetworks: authenticated and local users may forge too; mynetworks is
/// where a content filter (amavis) hands mail back with our results of
/// the first pass. Notices are ours.
fn strip_ours(intake: &Intake, sub: &mut Submission) {
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

/// The content filters for the message's door, if any (notices are ours
/// and not filtered); a filter that fails is logged.
async fn filter(intake: &Intake, sub: &mut Submission) -> Verdict {
    let hostname = intake.config.hostname.as_str();
    let (milters, client) = match &sub.origin {
        Origin::Smtp(c) => (
            intake.milters.smtp.as_ref(),
            Client {
                addr: Some(c.peer),
                helo: &c.helo,
                auth_user: c.auth_user.as_deref(),
            },
        ),
        Origin::Local { .. } => (
            intake.milters.local.as_ref(),
            Client {
                addr: None,
                helo: hostname,
                auth_user: None,
            },
        ),
        Origin::Notice => (
            None,
            Client {
                addr: None,
                helo: hostname,
                auth_user: None,
            },
        ),
    };
    let Some(milters) = milters else {
        return Verdict::Pass;
    };
    let id = qid(sub.id);
    let logger = intake.logger.clone();
    let mut on_error = |service: &crate::config::services::ServiceAddr, e: &MilterError| {
        logger.emit(&Event::MilterFailed {
            queue_id: Qid(sub.id),
            milter: service.to_string().into(),
            error: e.to_string().into(),
        });
    };
    let envelope = (&mut sub.sender, &mut sub.recipients);
    milters
        .filter(&id, &client, envelope, &mut sub.body, &mut on_error)
        .await
}

/// The body checks, and for a local submission its trace and the fields
/// it lacks. An SMTP body already starts with its trace; a notice is ours.
fn complete(intake: &Intake, sub: &mut Submission) -> Result<(), Refusal> {
    let hostname = &intake.config.hostname;
    match &sub.origin {
        Origin::Smtp(_) => intake.check_body(&mut sub.body, sub.flaws.take()),
        Origin::Local { uid, full_name, .. } => {
            intake.check_body(&mut sub.body, None)?;
            let trace = headers::local_trace(hostname, sub.id, *uid);
            let missing = headers::missing_fields(
                &sub.body,
                &sub.sender,
                full_name.as_deref(),
                hostname,
                sub.id,
            );
            let mut body = Vec::with_capacity(trace.len() + missing.len() + sub.body.len());
            body.extend_from_slice(trace.as_bytes());
            body.extend_from_slice(missing.as_bytes());
            body.extend_from_slice(&sub.body);
            sub.body = body;
            Ok(())
        }
        Origin::Notice => Ok(()),
    }
}

/// The `DKIM-Signature:` field for a message from a trusted origin, or
/// nothing: no key covers its From: domain, it comes from an ordinary
/// local account and its From: is not one the account owns
/// (`local_sign.rs`), or it already passed through us and its submitter
/// did not authenticate (a loop never turns hostile mail into signed
/// mail, security review H2). An authenticated client's From: is not
/// checked against the sender login map: `reject_sender_login_mismatch`
/// holds its envelope to the map, as Postfix's, and OpenDKIM beside
/// Postfix signs its mail the same way (docs/CONFIG.md).
async fn sign(intake: &Intake, sub: &Submission) -> String {
    if intake.dkim.is_empty() {
        return String::new();
    }
    if let Origin::Local {
        user: super::LocalUser::Account(own),
        ..
    } = &sub.origin
    {
        if let Err(cause) = super::local_sign::may_sign(intake, own, &sub.body).await {
            let from = super::dkim::from_address(&sub.body).unwrap_or_default();
            intake.logger.emit(&Event::DkimNotSigned {
                queue_id: Qid(sub.id),
                cause: cause.into(),
                from: from.as_str().into(),
                user: own.as_str().into(),
            });
            return String::new();
        }
    }
    let authenticated = matches!(&sub.origin, Origin::Smtp(c) if c.authenticated);
    let hostname = &intake.config.hostname;
    if !authenticated && body::carries_our_trace(&sub.body, hostname) {
        intake.logger.emit(&Event::DkimLoop {
            queue_id: Qid(sub.id),
            hostname: hostname.to_string().into(),
        });
        return String::new();
    }
    match intake.dkim.sign(&sub.body) {
        None => String::new(),
        Some(Ok((header, domain))) => {
            intake.logger.emit(&Event::DkimSigned {
                queue_id: Qid(sub.id),
                domain: domain.into(),
            });
            header
        }
        Some(Err(e)) => {
            intake.logger.emit(&Event::DkimFailed {
                queue_id: Qid(sub.id),
                error: e.to_string().into(),
            });
            String::new()
        }
    }
}

/// For a stranger on a `sender_auth` listener (forged results in our name
/// are gone already, see `strip_ours`): SPF/DKIM/DMARC checked; our
/// own Authentication-Results field to put on top, or the DMARC refusal.
async fn check_sender(
    intake: &Intake,
    (ip, helo, wanted, dmarc_reject): (std::net::IpAddr, String, bool, bool),
    sub: &mut Submission,
) -> Result<String, Refusal> {
    let Some(checker) = intake.sender_auth.as_ref().filter(|_| wanted) else {
        return Ok(String::new());
    };
    let verdict = checker
        .check(
            ip,
            &helo,
            &sub.sender,
            &sub.body,
            dmarc_reject,
            intake.config.smtpd.dkim_verify_max_signatures,
        )
        .await;
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

/// Stores the message (synced before this returns), logs it and hands it
/// to the queue.
async fn store(intake: &Intake, sub: Submission) -> Result<Accepted, Refusal> {
    let Submission {
        id,
        origin,
        sender,
        recipients,
        orig_rcpt,
        flags,
        dsn,
        body,
        flaws: _,
        hold: _,
        redirect: _,
        bcc: _,
    } = sub;
    let orig_rcpt = line_up(&recipients, &orig_rcpt);
    let envelope = sluice_spool::Envelope {
        id,
        arrival: crate::timefmt::now_millis(),
        sender,
        recipients,
        flags,
        dsn,
        orig_rcpt,
        login: origin.login().unwrap_or_default().to_string(),
    };
    let body = Arc::new(body);
    match intake.commit(&envelope, &body, Entry::Accepted).await {
        Ok(body_ref) => {
            intake.log_queued(&origin, &envelope, body.len());
            let id = envelope.id;
            intake
                .handoff
                .hand_off(Stored {
                    envelope,
                    body_ref,
                    body,
                })
                .await;
            Ok(Accepted::Queued(id))
        }
        Err(refusal) => {
            intake.logger.emit(&Event::Reject(Reject::Queue {
                stage: "queue".into(),
                queue_id: Qid(envelope.id),
                cause: refusal.cause().into(),
                error: refusal.to_string().into(),
                from: envelope.sender.as_str().into(),
            }));
            Err(refusal)
        }
    }
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

/// The address each of `recipients` was given as, in their order (empty
/// when as given), from the (recipient, given) pairs; no list at all when
/// no alias expanded to any of them, so such records are as before.
fn line_up(recipients: &[String], pairs: &[(String, String)]) -> Vec<String> {
    if pairs.is_empty() {
        return Vec::new();
    }
    let given = |r: &String| {
        pairs
            .iter()
            .find(|(to, _)| to == r)
            .map_or_else(String::new, |(_, given)| given.clone())
    };
    let lined: Vec<String> = recipients.iter().map(given).collect();
    match lined.iter().all(String::is_empty) {
        true => Vec::new(),
        false => lined,
    }
}
