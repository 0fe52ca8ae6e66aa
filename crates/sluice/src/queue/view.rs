//! The queue as the administrator sees it, read only: `mailq`'s snapshot
//! of every message (`Snap`, `Place`) and the dashboard's statistics
//! (`QueueStats`: counts, busiest destinations, why mail waits grouped by
//! destination and enhanced status code). Nothing here changes the queue;
//! the operations that do are `admin.rs`'s.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope};

use super::compact::Deferral;
use super::core::{AdminState, Admission, Destinations, Messages, RcptState};
use crate::message::status::Enhanced;

/// The queue at a glance.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QueueStats {
    pub active: usize,
    pub deferred: usize,
    pub hold: usize,
    /// The 20 destinations with the most mail queued, in flight or
    /// deferred.
    pub destinations: Vec<DestinationStats>,
    /// The 10 commonest causes mail is waiting for, commonest first.
    pub reasons: Vec<ReasonStats>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DestinationStats {
    pub name: String,
    pub queued: usize,
    pub in_flight: usize,
    pub window: usize,
    /// Waiting messages last deferred by it (a message counts once, for
    /// its first deferred recipient).
    pub deferred: usize,
}

/// One cause mail waits for: deferrals by one destination with one
/// enhanced status code, however their texts are worded ("connect to …
/// refused" and "… is not responding" are one cause).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReasonStats {
    /// None: no route (or not known since a restart).
    pub destination: Option<String>,
    /// RFC 3463 status (`4.0.0` when the text has none).
    pub dsn: String,
    /// The commonest text of the cause (its first 80 characters).
    pub text: String,
    pub messages: usize,
}

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// In memory, being delivered or about to be.
    Active,
    /// On disk, waiting for a retry (or for room).
    Deferred,
    /// On hold: kept, not delivered.
    Hold,
}

/// One message as the queue knows it.
pub struct Snap {
    pub id: u64,
    pub place: Place,
    pub body_ref: BodyRef,
    /// The envelope, when in memory (otherwise read it from the spool).
    pub envelope: Option<Arc<Envelope>>,
    /// Per recipient: final already.
    pub done: Vec<bool>,
    /// Per recipient, for active mail: the last deferral reason.
    pub reasons: Vec<Option<String>>,
    /// For waiting mail: the reason it was last deferred.
    pub last_reason: Option<String>,
    pub attempts: u32,
    /// For waiting mail: when it was last tried and when it will be
    /// next (Unix seconds), if known.
    pub last_attempt: Option<u64>,
    pub next_retry: Option<u64>,
}

/// What `view` reads: the queue's state, borrowed.
pub(super) struct Queue<'a> {
    pub messages: &'a Messages,
    pub admission: &'a Admission,
    pub dests: &'a Destinations,
    pub admin: &'a AdminState,
}

impl Queue<'_> {
    /// Held messages waiting on disk (the others are being delivered).
    fn held_waiting(&self) -> usize {
        let waiting = |id: &u64| self.admission.contains(*id);
        self.admin.held().filter(waiting).count()
    }

    pub(super) fn stats(&self) -> QueueStats {
        let hold = self.admin.held_count();
        // Waiting messages by their deferral (each reason is shared, so
        // counted per reason first, then grouped), at most 100,000.
        let mut by_reason: HashMap<*const Deferral, (&Deferral, usize)> = HashMap::new();
        for (id, p) in self.admission.iter().take(100_000) {
            if let Some(r) = p.reason.as_deref().filter(|_| !self.admin.is_held(id)) {
                by_reason.entry(std::ptr::from_ref(r)).or_insert((r, 0)).1 += 1;
            }
        }
        let mut deferred_at: HashMap<&str, usize> = HashMap::new();
        for (r, n) in by_reason.values() {
            if let Some(name) = r.dest.as_deref() {
                *deferred_at.entry(name).or_default() += n;
            }
        }
        let mut destinations: Vec<DestinationStats> = self
            .dests
            .iter()
            .map(|(name, d)| DestinationStats {
                name: name.to_string(),
                queued: d.queue.len(),
                in_flight: d.workers.len(),
                window: d.window,
                deferred: deferred_at.remove(&**name).unwrap_or(0),
            })
            .collect();
        // Those left have no entry now (only deferred mail).
        destinations.extend(deferred_at.into_iter().map(|(name, n)| DestinationStats {
            name: name.to_string(),
            queued: 0,
            in_flight: 0,
            window: 0,
            deferred: n,
        }));
        destinations.retain(|d| d.queued + d.in_flight + d.deferred > 0);
        destinations.sort_by_key(|d| std::cmp::Reverse(d.queued + d.in_flight + d.deferred));
        destinations.truncate(20);
        QueueStats {
            active: self.messages.len(),
            // (A message held while being delivered is active, not
            // waiting on disk.)
            deferred: self.admission.len() - self.held_waiting(),
            hold,
            destinations,
            reasons: causes(by_reason.into_values()),
        }
    }

    pub(super) fn snapshot(&self) -> Vec<Snap> {
        let mut out = Vec::with_capacity(self.messages.len() + self.admission.len());
        for (id, m) in self.messages.iter() {
            let reasons = m
                .rcpts
                .iter()
                .map(|s| match s {
                    RcptState::Deferred { reply, .. } => Some(reply.to_string()),
                    _ => None,
                })
                .collect();
            out.push(Snap {
                id,
                place: Place::Active,
                body_ref: m.body_ref,
                envelope: Some(m.envelope.clone()),
                done: m.rcpts.iter().map(RcptState::is_final).collect(),
                reasons,
                last_reason: None,
                attempts: m.attempts,
                last_attempt: None,
                next_retry: None,
            });
        }
        for (id, p) in self.admission.iter() {
            out.push(Snap {
                id,
                place: if self.admin.is_held(id) {
                    Place::Hold
                } else {
                    Place::Deferred
                },
                body_ref: p.spot.body_ref(id),
                envelope: None,
                done: p.done.to_vec(),
                reasons: Vec::new(),
                last_reason: p.reason.as_ref().map(|r| r.reply.to_string()),
                attempts: p.attempts.into(),
                last_attempt: (p.last_at != 0).then_some(p.last_at.into()),
                next_retry: (p.next_at != 0 && !self.admin.is_held(id)).then_some(p.next_at.into()),
            });
        }
        out.sort_by_key(|s| s.id);
        out
    }
}

/// The ten commonest causes among `reasons` (each with its messages): by
/// destination and enhanced status code, each shown with its commonest
/// text (cut to 80 characters).
fn causes<'a>(reasons: impl Iterator<Item = (&'a Deferral, usize)>) -> Vec<ReasonStats> {
    type Cause<'a> = (Option<&'a str>, Enhanced);
    let mut groups: HashMap<Cause<'a>, (usize, String, usize)> = HashMap::new();
    for (r, n) in reasons {
        let key = (r.dest.as_deref(), r.reply.status_or(Enhanced::DEFERRED));
        let text = r.reply.to_string();
        let group = groups.entry(key).or_insert((0, String::new(), 0));
        group.0 += n;
        // The commonest text (of equals, the first in sort order).
        if n > group.2 || (n == group.2 && text < group.1) {
            (group.1, group.2) = (text, n);
        }
    }
    let mut out: Vec<ReasonStats> = groups
        .into_iter()
        .map(|((dest, dsn), (messages, text, _))| ReasonStats {
            destination: dest.map(str::to_string),
            dsn: dsn.to_string(),
            text: text.chars().take(80).collect(),
            messages,
        })
        .collect();
    out.sort_by(|a, b| {
        (b.messages, &a.destination, &a.dsn).cmp(&(a.messages, &b.destination, &b.dsn))
    });
    out.truncate(10);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_group_by_destination_and_status_not_wording() {
        let dead: Option<Arc<str>> = Some("smtp:[192.0.2.1]:25".into());
        let d = |dest: &Option<Arc<str>>, text: &str| Deferral {
            reply: crate::message::status::Reply::parse(text, 451),
            dest: dest.clone(),
        };
        let refused = d(&dead, "4.4.1 connect to 192.0.2.1[192.0.2.1]:25: refused");
        let dead_mark = d(&dead, "4.4.1 smtp:[192.0.2.1]:25 is not responding");
        let full = d(&dead, "4.2.2 192.0.2.1 said: 452 4.2.2 mailbox full");
        let no_route = d(&None, "4.3.0 no route");
        let got = causes([(&refused, 1), (&dead_mark, 5), (&full, 2), (&no_route, 1)].into_iter());
        let row = |dest: Option<&str>, dsn: &str, text: &str, messages| ReasonStats {
            destination: dest.map(str::to_string),
            dsn: dsn.into(),
            text: text.into(),
            messages,
        };
        assert_eq!(
            got,
            [
                row(dead.as_deref(), "4.4.1", &dead_mark.reply.to_string(), 6),
                row(dead.as_deref(), "4.2.2", &full.reply.to_string(), 2),
                row(None, "4.3.0", "4.3.0 no route", 1),
            ]
        );
    }
}
