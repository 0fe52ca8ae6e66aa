//! The signing stage: a DKIM signature for mail from a trusted origin
//! (an authenticated client, mynetworks, a local user, our notices), by
//! the keys of `dkim.rs`, with the local-account rule of `local_sign.rs`.
//!
//! Trust: the From: is the sender's; the keys and the sender login map
//! are the administrator's. Invariant: a message that already passed
//! through us is signed only if its submitter authenticated.

use super::{Intake, Origin, Submission};
use crate::log::{Event, Qid};
use crate::message::body;

/// The `DKIM-Signature:` field for a message from a trusted origin, or
/// nothing: no key covers its From: domain, it comes from an ordinary
/// local account and its From: is not one the account owns
/// (`local_sign.rs`), or it already passed through us and its submitter
/// did not authenticate (a loop never turns hostile mail into signed
/// mail, security review H2). An authenticated client's From: is not
/// checked against the sender login map: `reject_sender_login_mismatch`
/// holds its envelope to the map, as Postfix's, and OpenDKIM beside
/// Postfix signs its mail the same way (docs/CONFIG.md).
pub(super) async fn run(intake: &Intake, sub: &Submission) -> String {
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
