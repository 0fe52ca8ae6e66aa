//! The active queue: messages in memory with their envelopes, each
//! recipient's state, the jobs out with workers, and the bodies kept in
//! memory (up to `spool.body_cache_mib`).
//!
//! Invariants (checked by `check` in the simulation): the jobs out over
//! all messages (`jobs_out`) plus those a drain gave up on (`abandoned`)
//! equal the sum of every message's `in_flight`; `body_bytes` is the sum
//! of the cached bodies' lengths and at most the limit; a counter never
//! goes below zero (debug builds panic: a bug, not something to repair).

use std::collections::HashMap;
use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope};

use crate::message::status::{Failure, Relay, Reply};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RcptState {
    Pending,
    InFlight,
    /// `dest`: the destination that deferred it (none: no route).
    Deferred {
        relay: Relay,
        reply: Reply,
        dest: Option<Arc<str>>,
    },
    Delivered,
    Bounced,
}

impl RcptState {
    /// Delivered or bounced: nothing more will happen to it.
    pub fn is_final(&self) -> bool {
        matches!(self, RcptState::Delivered | RcptState::Bounced)
    }
}

pub struct Message {
    pub envelope: Arc<Envelope>,
    pub body_ref: BodyRef,
    /// Counted in `Messages::body_bytes`: set only when inserted.
    body: Option<Arc<Vec<u8>>>,
    pub rcpts: Vec<RcptState>,
    /// Jobs out with workers (changed through `Messages` only).
    in_flight: usize,
    pub attempts: u32,
    /// Permanently failed recipients waiting for their bounce.
    pub failed: Vec<(u16, Failure)>,
    /// The sender has had a delay warning.
    pub warned: bool,
}

impl Message {
    /// Every recipient delivered or bounced.
    pub fn all_final(&self) -> bool {
        self.rcpts.iter().all(RcptState::is_final)
    }

    /// Jobs of this message not yet reported.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub fn body(&self) -> Option<&Arc<Vec<u8>>> {
        self.body.as_ref()
    }

    /// What a notice about this message is made from.
    pub fn original(&self) -> (Arc<Envelope>, Option<Arc<Vec<u8>>>, BodyRef) {
        (self.envelope.clone(), self.body.clone(), self.body_ref)
    }
}

/// The active messages by queue ID, and what they hold.
pub struct Messages {
    map: HashMap<u64, Message>,
    /// Jobs handed to workers (or queued on a destination) and not yet
    /// reported, over all messages.
    jobs_out: usize,
    /// Jobs a drain dropped unstarted: their messages still count them,
    /// since no round may end during a drain.
    abandoned: usize,
    body_bytes: usize,
    body_limit: usize,
}

impl Messages {
    pub fn new(body_limit: usize) -> Messages {
        Messages {
            map: HashMap::new(),
            jobs_out: 0,
            abandoned: 0,
            body_bytes: 0,
            body_limit,
        }
    }

    /// A reload's new body cache size (bodies already kept stay).
    pub fn set_body_limit(&mut self, limit: usize) {
        self.body_limit = limit;
    }

    /// A message becomes active: recipients `done` are final already; its
    /// body is kept if it fits the cache.
    pub fn insert(
        &mut self,
        envelope: Envelope,
        body_ref: BodyRef,
        body: Option<Arc<Vec<u8>>>,
        done: &[bool],
        (attempts, warned): (u32, bool),
    ) {
        let id = envelope.id;
        let rcpts = done
            .iter()
            .map(|&d| match d {
                true => RcptState::Delivered,
                false => RcptState::Pending,
            })
            .collect();
        let body = match body {
            Some(b) if self.body_bytes + b.len() <= self.body_limit => {
                self.body_bytes += b.len();
                Some(b)
            }
            _ => None,
        };
        let msg = Message {
            envelope: Arc::new(envelope),
            body_ref,
            body,
            rcpts,
            in_flight: 0,
            attempts,
            failed: Vec::new(),
            warned,
        };
        if let Some(old) = self.map.insert(id, msg) {
            // Never: a message is active once (`admission.rs`).
            debug_assert!(false, "message {id:x} activated twice");
            self.forget_body(&old);
        }
    }

    /// A message leaves memory (its cached body no longer counts).
    pub fn remove(&mut self, id: u64) -> Option<Message> {
        let msg = self.map.remove(&id)?;
        self.forget_body(&msg);
        Some(msg)
    }

    fn forget_body(&mut self, msg: &Message) {
        if let Some(body) = &msg.body {
            debug_assert!(self.body_bytes >= body.len(), "body cache below zero");
            self.body_bytes -= body.len();
        }
    }

    pub fn get(&self, id: u64) -> Option<&Message> {
        self.map.get(&id)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Message> {
        self.map.get_mut(&id)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.map.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.map.keys().copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &Message)> {
        self.map.iter().map(|(id, m)| (*id, m))
    }

    /// `n` jobs of message `id` go out.
    pub fn jobs_sent(&mut self, id: u64, n: usize) {
        if let Some(msg) = self.map.get_mut(&id) {
            msg.in_flight += n;
            self.jobs_out += n;
        }
    }

    /// One job of message `id` is back (reported, or taken back before it
    /// started).
    pub fn job_back(&mut self, id: u64) {
        debug_assert!(self.jobs_out > 0, "jobs out below zero");
        self.jobs_out -= 1;
        if let Some(msg) = self.map.get_mut(&id) {
            debug_assert!(msg.in_flight > 0, "{id:x}: in flight below zero");
            msg.in_flight -= 1;
        }
    }

    /// A drain dropped `n` jobs nobody started: not waited for, still
    /// counted by their messages.
    pub fn jobs_abandoned(&mut self, n: usize) {
        debug_assert!(self.jobs_out >= n, "jobs out below zero");
        self.jobs_out -= n;
        self.abandoned += n;
    }

    pub fn jobs_out(&self) -> usize {
        self.jobs_out
    }

    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// The invariants of the head comment, for the simulation.
    #[cfg(test)]
    pub fn check(&self) -> Result<(), String> {
        let in_flight: usize = self.map.values().map(|m| m.in_flight).sum();
        if in_flight != self.jobs_out + self.abandoned {
            return Err(format!(
                "in flight {in_flight} != jobs out {} + abandoned {}",
                self.jobs_out, self.abandoned
            ));
        }
        let bytes: usize = self
            .map
            .values()
            .filter_map(|m| m.body.as_ref())
            .map(|b| b.len())
            .sum();
        if bytes != self.body_bytes {
            return Err(format!("body bytes {bytes} != {}", self.body_bytes));
        }
        for (id, m) in &self.map {
            let in_flight = m.rcpts.contains(&RcptState::InFlight);
            if m.in_flight == 0 && in_flight && self.abandoned == 0 {
                return Err(format!("{id:x}: a recipient in flight with no job out"));
            }
        }
        Ok(())
    }
}
