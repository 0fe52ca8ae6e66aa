//! Applying a job's outcomes: each recipient's new state, the log line,
//! the delivery metrics, NOTIFY=SUCCESS notices, and the spool record of
//! what became final (with `complete` when the whole message is done), and
//! the end of a delivery round (`finish_round`: bounce, retry or remove).
//! Also the words every delivery line shares: `orig_to` and the delay.
//!
//! A delivery line is Postfix's: `ID: to=<…>, orig_to=<…>, relay=…,
//! delay=…, dsn=…, status=… (…)`, logged by the agent's service (`smtp`,
//! `lmtp`, or `virtual` with `relay=virtual` for a Maildir, as Postfix's
//! virtual(8)); `orig_to` only when an alias expanded to the recipient.

use std::sync::Arc;

use super::compact::Spot;
use super::core::{secs32, Parked, RcptState};
use super::dispatch::QueueCore;
use super::failures::{expire, wants};
use super::lines::{delay, orig_to};
use super::step::Action;
use crate::log::{Event, Qid, Shown};
use crate::message::status::{Failure, Outcome, Relay};
use crate::rates::Tally;
use crate::record::bounce::dsn::Notice;
use sluice_proto::dsn::NOTIFY_SUCCESS;
use sluice_spool::DoneSet;

impl QueueCore {
    /// Applies one job's results (called exactly once per job), from
    /// destination `dest`.
    pub(super) fn apply_results(
        &mut self,
        id: u64,
        dest: Option<&Arc<str>>,
        results: Vec<(u16, Outcome)>,
    ) {
        self.messages.job_back(id);
        let Some(msg) = self.messages.get_mut(id) else {
            return;
        };
        let env = msg.envelope.clone();
        let mut delivered = Vec::new();
        // NOTIFY=SUCCESS: delivered here, or relayed to a hop without DSN.
        let (mut successes, mut relayed) = (Vec::new(), false);
        for (r, outcome) in results {
            let Some(state) = msg.rcpts.get_mut(r as usize) else {
                continue;
            };
            // Labels for the log and metrics only: LMTP relays are named
            // by their service address (`unix:/path`, `inet:host:port`);
            // the line is logged under the transport's service.
            let (transport, _) = outcome.relay().labels();
            let shown = outcome.relay().shown();
            let (to, delay) = (&env.recipients[r as usize], delay(&env));
            let orig = orig_to(&env, r as usize);
            let dsn = outcome.dsn();
            self.logger.emit(&Event::Delivery {
                queue_id: Qid(id),
                to: to.into(),
                orig_to: orig.map(Into::into),
                relay: shown.as_str().into(),
                transport: transport.into(),
                delay,
                dsn: Shown::Value(&dsn),
                status: outcome.status_word().into(),
                reason: Shown::Value(outcome.reply()),
            });
            let status = outcome.status_word();
            metrics::counter!("sluice_deliveries_total", "transport" => transport, "status" => status)
                .increment(1);
            crate::rates::count(match outcome {
                Outcome::Delivered { .. } => Tally::Delivered,
                Outcome::Deferred { .. } => Tally::Deferred,
                Outcome::Bounced { .. } => Tally::Bounced,
            });
            match outcome {
                Outcome::Delivered {
                    relay,
                    reply,
                    notified,
                } => {
                    *state = RcptState::Delivered;
                    delivered.push(r);
                    if env.dsn.is_some() && !notified && wants(&env, r, NOTIFY_SUCCESS) {
                        relayed = !matches!(relay, Relay::Maildir | Relay::Local);
                        successes.push((r, Failure::delivered(&relay, &reply)));
                    }
                }
                Outcome::Deferred { relay, mut reply } => {
                    // Kept for people (queue listing, dashboard, delay
                    // notices, the spool's attempt record).
                    reply.text = crate::message::status::plain_reason(&reply.text);
                    *state = RcptState::Deferred {
                        relay,
                        reply,
                        dest: dest.cloned(),
                    }
                }
                Outcome::Bounced { relay, reply } => {
                    *state = RcptState::Bounced;
                    msg.failed.push((r, Failure::from_bounce(&relay, &reply)));
                }
            }
        }
        let round_over = msg.in_flight() == 0;
        let complete = round_over && msg.failed.is_empty() && msg.all_final();
        if !successes.is_empty() && !env.sender.is_empty() {
            let kind = match relayed {
                true => Notice::Relayed,
                false => Notice::Delivered,
            };
            let original = msg.original();
            self.spawn_notice(original, kind, successes, None);
        }
        if !delivered.is_empty() {
            self.record(id, delivered, complete);
            if complete {
                self.remove(id);
                return;
            }
        }
        if round_over {
            self.finish_round(id);
        }
    }
}

impl QueueCore {
    /// All jobs of a delivery round are back: bounce, retry or remove.
    pub(super) fn finish_round(&mut self, id: u64) {
        if self.admin_round_end(id) {
            return;
        }
        let Some(msg) = self.messages.get_mut(id) else {
            return;
        };
        let max_life = self.config.queue.maximal_lifetime_secs;
        expire(msg, max_life, self.clock.unix_ms, &self.logger);
        let bouncing = self.notices.pending(id);
        if !msg.failed.is_empty() && !bouncing {
            let failed = std::mem::take(&mut msg.failed);
            self.bounce(id, failed);
            return;
        }
        if bouncing {
            return;
        }
        if msg.all_final() {
            self.record(id, Vec::new(), true);
            self.remove(id);
            return;
        }
        self.warn_if_delayed(id);
        // Deferred mail waits on disk: no envelope or body in memory.
        let Some(msg) = self.messages.get(id) else {
            return;
        };
        let attempts = msg.attempts + 1;
        let wait = self.retry_wait(attempts, id);
        let at = self.clock.at + wait;
        let Some(msg) = self.messages.remove(id) else {
            return;
        };
        let done: Vec<bool> = msg.rcpts.iter().map(RcptState::is_final).collect();
        let reason = msg.rcpts.iter().find_map(|s| match s {
            RcptState::Deferred { reply, dest, .. } => Some(self.admission.reason(dest, reply)),
            _ => None,
        });
        // Kept in the spool: a restart goes on counting and waits as well.
        let now = self.clock.unix_ms / 1000;
        let next = now + wait.as_secs_f64().ceil() as u64;
        let attempt = sluice_spool::Attempt {
            count: attempts,
            at: now,
            next,
            // The spool keeps the reply as text (its format since the
            // start): `Reply::parse` reads it back at recovery.
            reason: reason
                .as_ref()
                .map(|d| d.reply.to_string())
                .unwrap_or_default(),
        };
        self.out.push(Action::Attempt { id, attempt });
        let parked = Parked {
            spot: Spot::of(msg.body_ref),
            done: DoneSet::from(done),
            attempts: attempts.min(u16::MAX as u32) as u16,
            warned: msg.warned,
            reason,
            last_at: secs32(now),
            next_at: secs32(next),
        };
        self.park(id, parked, Some(at));
    }
}
