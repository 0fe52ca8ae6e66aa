//! What the scheduler does with recipients that will not be delivered:
//! queue-lifetime expiry, bounces (stored through `bounce`, then the failed
//! recipients are recorded final), and the null sender's undeliverable
//! mail, which is logged and dropped (no bounce of a bounce).
//!
//! Invariant: failed recipients are recorded in the spool only after their
//! bounce is stored, so a crash can duplicate a bounce, never lose one;
//! likewise a delay warning is marked sent (a spool mark, kept across
//! restarts) only after it is stored.

use sluice_proto::dsn::{NOTIFY_DELAY, NOTIFY_FAILURE, NOTIFY_SUCCESS};
use sluice_spool::Envelope;

use super::core::{Message, RcptState};
use super::dispatch::QueueCore;
use super::lines::{delay, orig_to};
use super::step::{Action, Original};
use crate::log::{Event, Logger, Qid, Shown};
use crate::message::status::Failure;
use crate::record::bounce::dsn::Notice;

impl QueueCore {
    /// Returns failed recipients to the sender (or logs why not).
    pub(super) fn bounce(&mut self, id: u64, failed: Vec<(u16, Failure)>) {
        let Some(msg) = self.messages.get_mut(id) else {
            return;
        };
        let indices: Vec<u16> = failed.iter().map(|(i, _)| *i).collect();
        if msg.envelope.sender.is_empty() {
            for (i, f) in &failed {
                let to = &msg.envelope.recipients[*i as usize];
                let why = "undeliverable mail from the null sender discarded, no bounce sent";
                skipped(&self.logger, id, to, ("null_sender", why), f);
            }
            self.bounce_stored(id, indices);
            return;
        }
        // NOTIFY=NEVER, or a NOTIFY list without FAILURE: no bounce.
        let (failed, unwanted): (Vec<_>, Vec<_>) = failed
            .into_iter()
            .partition(|(i, _)| wants(&msg.envelope, *i, NOTIFY_FAILURE));
        for (i, f) in &unwanted {
            let to = &msg.envelope.recipients[*i as usize];
            let why = "no bounce sent, the sender asked for none (NOTIFY)";
            skipped(&self.logger, id, to, ("notify", why), f);
        }
        if failed.is_empty() {
            self.bounce_stored(id, indices);
            return;
        }
        let original = msg.original();
        self.notices.bounce_out(id);
        self.spawn_notice(original, Notice::Failed, failed, Some(indices));
    }

    /// Has the driver hand a notice (`kind`) about `list`, recipients of
    /// `original`, to the intake; it is stored and queued like any mail.
    /// With `stored_for`, the core then hears that the notice is safe (the
    /// bounced recipients are recorded final only then; a notice refused
    /// for good counts as sent, and is logged).
    pub(super) fn spawn_notice(
        &mut self,
        original: Original,
        kind: Notice,
        list: Vec<(u16, Failure)>,
        stored_for: Option<Vec<u16>>,
    ) {
        self.out.push(Action::Notice {
            original,
            kind,
            list,
            stored_for,
        });
    }

    /// Once per message, when its mail is still deferred after
    /// `delay_warning_secs`: a DSN with Action: delayed to the sender (not
    /// to the null sender). It waits for nothing: the recipients stay
    /// deferred. Once the warning is stored, the message is marked in the
    /// spool ([`crate::message::flags::MARK_DELAY_WARNED`]), so a restart does not send it
    /// again; only a crash between the two can.
    pub(super) fn warn_if_delayed(&mut self, id: u64) {
        let after = self.config.queue.delay_warning_secs;
        let Some(msg) = self.messages.get_mut(id) else {
            return;
        };
        let age_secs = self.clock.unix_ms.saturating_sub(msg.envelope.arrival) / 1000;
        if after == 0 || msg.warned || msg.envelope.sender.is_empty() || age_secs < after {
            return;
        }
        let delayed: Vec<(u16, Failure)> = msg
            .rcpts
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                RcptState::Deferred { relay, reply, .. }
                    if wants(&msg.envelope, i as u16, NOTIFY_DELAY) =>
                {
                    Some((i as u16, Failure::delayed(relay, reply)))
                }
                _ => None,
            })
            .collect();
        if delayed.is_empty() {
            return;
        }
        msg.warned = true;
        let original = msg.original();
        self.spawn_notice(original, Notice::Delayed, delayed, None);
    }

    pub(super) fn bounce_stored(&mut self, id: u64, recipients: Vec<u16>) {
        self.notices.bounce_back(id);
        let Some(msg) = self.messages.get(id) else {
            return;
        };
        let round_over = msg.in_flight() == 0;
        let complete = msg.all_final() && round_over && msg.failed.is_empty();
        self.record(id, recipients, complete);
        if complete {
            self.remove(id);
        } else if round_over {
            self.finish_round(id);
        }
    }
}

/// Logs that no bounce goes to the sender of `id` about `to`: `why` is
/// the event's word (`null_sender`, `notify`) and the line's words.
fn skipped(logger: &Logger, id: u64, to: &str, why: (&str, &str), f: &Failure) {
    let line = format!("{}: to=<{to}>: {} ({f})", Qid(id), why.1);
    logger.emit(&Event::NoticeSkipped {
        queue_id: Qid(id),
        to: to.into(),
        why: why.0.into(),
        dsn: Shown::Value(&f.status),
        line: line.into(),
    });
}

/// Whether recipient `i`'s sender asked for a notice of this kind
/// (`NOTIFY_FAILURE`, `NOTIFY_DELAY` or `NOTIFY_SUCCESS`): without a
/// NOTIFY parameter, failures and delays are reported and successes not
/// (RFC 3461 §4.1).
pub(super) fn wants(env: &Envelope, i: u16, kind: u8) -> bool {
    let notify = env
        .dsn
        .as_ref()
        .and_then(|d| d.notify.get(i as usize).copied())
        .unwrap_or(0);
    match notify {
        0 => kind != NOTIFY_SUCCESS,
        n => n & kind != 0,
    }
}

/// Past the queue lifetime (at `unix_ms`), deferred recipients become
/// failures.
pub(super) fn expire(msg: &mut Message, max_life: u64, unix_ms: u64, logger: &Logger) {
    let age_secs = unix_ms.saturating_sub(msg.envelope.arrival) / 1000;
    if age_secs < max_life {
        return;
    }
    for (i, state) in msg.rcpts.iter_mut().enumerate() {
        if let RcptState::Deferred { relay, reply, .. } = state {
            let failure = Failure::expired(age_secs, relay, reply);
            let (to, delay) = (&msg.envelope.recipients[i], delay(&msg.envelope));
            let orig = orig_to(&msg.envelope, i);
            logger.emit(&Event::Delivery {
                queue_id: Qid(msg.envelope.id),
                to: to.into(),
                orig_to: orig.map(Into::into),
                relay: "none".into(),
                transport: "none".into(),
                delay,
                dsn: Shown::Text("4.4.7".into()),
                status: "expired".into(),
                reason: Shown::Value(&failure.reply),
            });
            msg.failed.push((i as u16, failure));
            *state = RcptState::Bounced;
        }
    }
}
