//! The content-filter stage: the milters of the message's door
//! (`smtpd.milters` for SMTP, `smtpd.non_smtpd_milters` for sendmail;
//! notices are ours and not filtered), through `milter/`.
//!
//! Trust: the filters are the administrator's; what they change is
//! taken. Invariant: a filter that fails is logged and the message goes
//! on as the filter's default action says (`milter/`).

use super::milter::{Client, MilterError, Verdict};
use super::{Intake, Origin, Submission};
use crate::log::qid;
use crate::log::{Event, Qid};

/// The content filters for the message's door, if any (notices are ours
/// and not filtered); a filter that fails is logged.
pub(super) async fn run(intake: &Intake, sub: &mut Submission) -> Verdict {
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
