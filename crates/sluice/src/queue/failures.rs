//! What the scheduler does with recipients that will not be delivered:
//! queue-lifetime expiry, bounces (stored through `bounce`, then the failed
//! recipients are recorded final), and the null sender's undeliverable
//! mail, which is logged and dropped (no bounce of a bounce).
//!
//! Invariant: failed recipients are recorded in the spool only after their
//! bounce is stored, so a crash can duplicate a bounce, never lose one.

use super::scheduler::{delay, Message, RcptState, Scheduler};
use super::{Event, QueuedMessage};
use crate::bounce;
use crate::log;
use crate::log::{qid, Logger};
use crate::message::status::Failure;
use crate::timefmt;

impl Scheduler {
    /// Returns failed recipients to the sender (or logs why not).
    pub(super) fn bounce(&mut self, id: u64, failed: Vec<(u16, Failure)>) {
        let Some(msg) = self.messages.get_mut(&id) else {
            return;
        };
        let indices: Vec<u16> = failed.iter().map(|(i, _)| *i).collect();
        if msg.envelope.sender.is_empty() {
            for (i, f) in &failed {
                log!(
                    self.logger,
                    "bounce",
                    "{}: to=<{}>: undeliverable mail from the null sender discarded, no bounce sent ({} {})",
                    qid(id),
                    msg.envelope.recipients[*i as usize],
                    f.status,
                    f.diagnostic
                );
            }
            self.bounce_stored(id, indices);
            return;
        }
        msg.bounce_pending = true;
        self.bounces_out += 1;
        let (env, body, body_ref) = (msg.envelope.clone(), msg.body.clone(), msg.body_ref);
        let (spool, logger, events) =
            (self.spool.clone(), self.logger.clone(), self.events.clone());
        let hostname = self.config.hostname.clone();
        tokio::spawn(async move {
            let kind = bounce::dsn::Notice::Failed;
            let stored = bounce::store(
                &hostname,
                &env,
                (body, body_ref),
                &failed,
                kind,
                &spool,
                &logger,
            )
            .await;
            let recipients = indices;
            let _ = events
                .send(Event::BounceStored {
                    msg: id,
                    recipients,
                })
                .await;
            let done = vec![false; stored.envelope.recipients.len()];
            let queued = QueuedMessage {
                envelope: stored.envelope,
                body_ref: stored.body_ref,
                body: Some(stored.body),
                done,
            };
            let _ = events.send(Event::Queued(queued)).await;
        });
    }

    /// Once per message, when its mail is still deferred after
    /// `delay_warning_secs`: a DSN with Action: delayed to the sender (not
    /// to the null sender). It waits for nothing: the recipients stay
    /// deferred. After a restart the warning may be sent again (the flag
    /// lives in memory), never lost for a message that is still young.
    pub(super) fn warn_if_delayed(&mut self, id: u64) {
        let after = self.config.queue.delay_warning_secs;
        let Some(msg) = self.messages.get_mut(&id) else {
            return;
        };
        let age_secs = timefmt::now_millis().saturating_sub(msg.envelope.arrival) / 1000;
        if after == 0 || msg.warned || msg.envelope.sender.is_empty() || age_secs < after {
            return;
        }
        let delayed: Vec<(u16, Failure)> = msg
            .rcpts
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                RcptState::Deferred { relay, reason } => {
                    Some((i as u16, Failure::delayed(relay, reason)))
                }
                _ => None,
            })
            .collect();
        if delayed.is_empty() {
            return;
        }
        msg.warned = true;
        let (env, body, body_ref) = (msg.envelope.clone(), msg.body.clone(), msg.body_ref);
        let (spool, logger, events) =
            (self.spool.clone(), self.logger.clone(), self.events.clone());
        let hostname = self.config.hostname.clone();
        tokio::spawn(async move {
            let kind = bounce::dsn::Notice::Delayed;
            let stored = bounce::store(
                &hostname,
                &env,
                (body, body_ref),
                &delayed,
                kind,
                &spool,
                &logger,
            )
            .await;
            let done = vec![false; stored.envelope.recipients.len()];
            let queued = QueuedMessage {
                envelope: stored.envelope,
                body_ref: stored.body_ref,
                body: Some(stored.body),
                done,
            };
            let _ = events.send(Event::Queued(queued)).await;
        });
    }

    pub(super) fn bounce_stored(&mut self, id: u64, recipients: Vec<u16>) {
        let Some(msg) = self.messages.get_mut(&id) else {
            return;
        };
        msg.bounce_pending = false;
        let complete = msg.all_final() && msg.in_flight == 0 && msg.failed.is_empty();
        self.spool.record_outcome(id, recipients, complete);
        if complete {
            self.remove(id);
        } else if msg.in_flight == 0 {
            self.finish_round(id);
        }
    }
}

/// Past the queue lifetime, deferred recipients become failures.
pub(super) fn expire(msg: &mut Message, max_life: u64, logger: &Logger) {
    let age_secs = timefmt::now_millis().saturating_sub(msg.envelope.arrival) / 1000;
    if age_secs < max_life {
        return;
    }
    for (i, state) in msg.rcpts.iter_mut().enumerate() {
        if let RcptState::Deferred { relay, reason } = state {
            let failure = Failure::expired(age_secs, relay, reason);
            log!(
                logger,
                "qmgr",
                "{}: to=<{}>, relay=none, delay={}, dsn=4.4.7, status=expired ({})",
                qid(msg.envelope.id),
                msg.envelope.recipients[i],
                delay(&msg.envelope),
                failure.diagnostic
            );
            msg.failed.push((i as u16, failure));
            *state = RcptState::Bounced;
        }
    }
}
