//! The words every delivery line shares (`orig_to` and the delay), and
//! the lines the scheduler writes itself for recipients no agent sees:
//! discarded, and deferred for want of a route.

use sluice_spool::Envelope;

use crate::log::{Event, Logger, Qid, Shown};
use crate::message::status::Reply;

/// Seconds since arrival, to the hundredth (`delay=` of a delivery line;
/// a number in the JSON log).
pub fn delay(env: &Envelope) -> f64 {
    let ms = crate::timefmt::now_millis().saturating_sub(env.arrival);
    (ms / 10) as f64 / 100.0
}

/// The address recipient `i` was given as, when an alias expanded it to
/// another (compared as Postfix does, ignoring case).
pub fn orig_to(env: &Envelope, i: usize) -> Option<&str> {
    let given = env.orig_rcpt.get(i).filter(|o| !o.is_empty())?;
    let to = env.recipients.get(i)?;
    (!given.eq_ignore_ascii_case(to)).then_some(given.as_str())
}

/// A recipient routed to `discard`: delivered to nobody.
pub fn discarded(logger: &Logger, env: &Envelope, i: usize) {
    let reason = Shown::Text("discarded".into());
    unrelayed(logger, env, i, ("discard", "2.0.0", "sent"), reason);
}

/// A recipient with no route (an address without a domain, a transport
/// not defined, a routing table that failed): deferred with `reason`,
/// whose enhanced status is the line's DSN (`4.4.0` without one).
pub fn unroutable(logger: &Logger, env: &Envelope, i: usize, reason: &Reply) {
    let dsn = reason
        .status
        .map_or_else(|| "4.4.0".to_string(), |s| s.to_string());
    let reason = Shown::Value(reason);
    unrelayed(logger, env, i, ("none", &dsn, "deferred"), reason);
}

/// The delivery line of recipient `i` that no agent tried (`relay=none`):
/// its transport, DSN code and status, and why.
fn unrelayed(
    logger: &Logger,
    env: &Envelope,
    i: usize,
    (transport, dsn, status): (&str, &str, &str),
    reason: Shown<'_>,
) {
    logger.emit(&Event::Delivery {
        queue_id: Qid(env.id),
        to: env.recipients[i].as_str().into(),
        orig_to: orig_to(env, i).map(Into::into),
        relay: "none".into(),
        transport: transport.into(),
        delay: delay(env),
        dsn: Shown::Text(dsn.into()),
        status: status.into(),
        reason,
    });
}
