//! The words every delivery line shares (`orig_to` and the delay), and
//! the lines the scheduler writes itself for recipients no agent sees:
//! discarded, and deferred for want of a route.

use sluice_spool::Envelope;

use crate::event;
use crate::log::{qid, Logger};
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

/// `, orig_to=<…>` after `to=<…>`, or nothing.
pub struct OrigTo<'a>(pub Option<&'a str>);

impl std::fmt::Display for OrigTo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(given) => write!(f, ", orig_to=<{given}>"),
            None => Ok(()),
        }
    }
}

/// A recipient routed to `discard`: delivered to nobody.
pub fn discarded(logger: &Logger, env: &Envelope, i: usize) {
    let id = env.id;
    let (to, delay) = (&env.recipients[i], delay(env));
    let orig = orig_to(env, i);
    event!(
        logger,
        "discard",
        "delivery",
        {
            queue_id: qid(id),
            to: to,
            orig_to: orig,
            relay: "none",
            transport: "discard",
            delay: delay,
            dsn: "2.0.0",
            status: "sent",
            reason: "discarded",
        },
        "{}: to=<{to}>{}, relay=none, delay={delay:.2}, dsn=2.0.0, status=sent (discarded)",
        qid(id),
        OrigTo(orig)
    );
}

/// A recipient with no route (an address without a domain): deferred
/// with `reason`.
pub fn unroutable(logger: &Logger, env: &Envelope, i: usize, reason: &Reply) {
    let id = env.id;
    let (to, delay) = (&env.recipients[i], delay(env));
    let orig = orig_to(env, i);
    event!(
        logger,
        "qmgr",
        "delivery",
        {
            queue_id: qid(id),
            to: to,
            orig_to: orig,
            relay: "none",
            transport: "none",
            delay: delay,
            dsn: "4.4.0",
            status: "deferred",
            reason: reason,
        },
        "{}: to=<{to}>{}, relay=none, delay={delay:.2}, dsn=4.4.0, status=deferred ({reason})",
        qid(id),
        OrigTo(orig)
    );
}
