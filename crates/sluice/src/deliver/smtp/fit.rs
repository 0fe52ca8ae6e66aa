//! Fitting a message to what the next hop offers, before any command is
//! sent: never 8-bit data to a hop without 8BITMIME (MIME downgrade, RFC
//! 6152), never UTF-8 addresses or headers to a hop without SMTPUTF8 (RFC
//! 6531 §3.2: UTF-8 domains are sent as A-labels; a UTF-8 local part, or
//! UTF-8 headers in an SMTPUTF8 message, bounce with 5.6.7).
//!
//! Trust: the envelope and body are the client's, already accepted. The
//! checks cost a scan of the body only when the hop lacks 8BITMIME.

use std::borrow::Cow;

use crate::message::flags;
use crate::message::mime;
use crate::message::status::{Enhanced, Outcome, Relay, Reply};
use crate::queue::Job;
use crate::routing::dns::ascii_name;

/// What to send: the recipients that can go (`narrowed`, when not all of
/// the job's can), the body to send them, and the outcomes of those that
/// cannot.
pub struct Fitted<'a> {
    pub narrowed: Option<Job>,
    pub body: Cow<'a, [u8]>,
    pub refused: Vec<(u16, Outcome)>,
}

/// An address as it can go on the wire without SMTPUTF8: as is if ASCII,
/// with its domain in A-labels if only the domain is UTF-8; `None` if the
/// local part is UTF-8.
pub fn wire_address(addr: &str, smtputf8: bool) -> Option<Cow<'_, str>> {
    if smtputf8 || addr.is_ascii() {
        return Some(Cow::Borrowed(addr));
    }
    let (local, domain) = addr.rsplit_once('@')?;
    if !local.is_ascii() {
        return None;
    }
    let domain = ascii_name(domain).ok()?;
    Some(Cow::Owned(format!("{local}@{domain}")))
}

/// Fits `job` and `body` to a hop offering (or not) 8BITMIME and SMTPUTF8.
pub fn fit<'a>(
    job: &Job,
    body: &'a [u8],
    relay: &Relay,
    eightbit: bool,
    smtputf8: bool,
) -> Fitted<'a> {
    let env = &job.envelope;
    let bounced = |reply: Reply| Outcome::Bounced {
        relay: relay.clone(),
        reply,
    };
    let bounce = |reply: Reply| -> Vec<(u16, Outcome)> {
        job.rcpts
            .iter()
            .map(|&r| (r, bounced(reply.clone())))
            .collect()
    };
    let refuse_all = |reply: Reply| Fitted {
        narrowed: None,
        body: Cow::Borrowed(body),
        refused: bounce(reply),
    };
    let no_utf8 = |text: String| Reply::own(550, Enhanced::new(5, 6, 7), text);
    if !smtputf8 {
        if wire_address(&env.sender, false).is_none() {
            return refuse_all(no_utf8(format!(
                "the sender address needs SMTPUTF8, which {relay} does not offer"
            )));
        }
        if env.flags & flags::SMTPUTF8 != 0 && mime::has_8bit_headers(body) {
            return refuse_all(no_utf8(format!(
                "the message has UTF-8 headers and {relay} does not offer SMTPUTF8"
            )));
        }
    }
    let body = if !eightbit && mime::is_8bit(body) {
        match mime::downgrade(body) {
            Ok(b) => Cow::Owned(b),
            Err(e) => {
                let text = format!("{} ({relay} does not offer 8BITMIME)", e.text());
                return refuse_all(Reply::own(550, e.status(), text));
            }
        }
    } else {
        Cow::Borrowed(body)
    };
    if smtputf8
        || job
            .rcpts
            .iter()
            .all(|&r| env.recipients[r as usize].is_ascii())
    {
        return Fitted {
            narrowed: None,
            body,
            refused: Vec::new(),
        };
    }
    let (mut rcpts, mut refused) = (Vec::new(), Vec::new());
    for &r in &job.rcpts {
        if wire_address(&env.recipients[r as usize], smtputf8).is_some() {
            rcpts.push(r);
        } else {
            let text =
                format!("the recipient address needs SMTPUTF8, which {relay} does not offer");
            refused.push((r, bounced(no_utf8(text))));
        }
    }
    let narrowed = (!refused.is_empty() && !rcpts.is_empty()).then(|| Job {
        msg: job.msg,
        envelope: job.envelope.clone(),
        body: job.body.clone(),
        body_ref: job.body_ref,
        rcpts,
    });
    Fitted {
        narrowed,
        body,
        refused,
    }
}
