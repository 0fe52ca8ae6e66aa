//! SRS on the way out: a transaction whose recipients include a
//! forwarded one (`routing::forward`) leaves with the SRS address of the
//! message's sender as its MAIL FROM, when the sender is a stranger's.
//!
//! Why here and not at the intake: the spool keeps the message's own
//! sender, so our bounces and delay warnings still go to the original
//! sender, local copies of the same message keep it, and only the
//! transactions that forward carry the SRS address.
//!
//! Trust: the spool's envelope. Invariant: the job's recipients and their
//! indices are unchanged; only the sender of this attempt is.

use std::sync::Arc;

use crate::log::{Event, Logger, Qid};
use crate::queue::Job;
use crate::routing::forward::Forwarding;

/// The job with an SRS sender, or `None` to send it as it is.
pub(super) fn rewrite(forwarding: &Forwarding, job: &Job, logger: &Logger) -> Option<Job> {
    let env = &job.envelope;
    let pairs = job.rcpts.iter().map(|&r| {
        let r = r as usize;
        let rcpt = env.recipients.get(r).map_or("", String::as_str);
        let given = env.orig_rcpt.get(r).map_or("", String::as_str);
        (rcpt, given)
    });
    let srs = forwarding.srs_sender(&env.sender, pairs)?;
    logger.emit(&Event::SrsForward {
        queue_id: Qid(job.msg),
        from: env.sender.as_str().into(),
        srs: srs.as_str().into(),
    });
    let mut envelope = (**env).clone();
    envelope.sender = srs;
    Some(Job {
        msg: job.msg,
        envelope: Arc::new(envelope),
        body: job.body.clone(),
        body_ref: job.body_ref,
        rcpts: job.rcpts.clone(),
    })
}
