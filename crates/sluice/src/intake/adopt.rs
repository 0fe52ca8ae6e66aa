//! The intake's second door, for copies claimed from a dead cluster peer
//! (`cluster::shadow`'s claims): [`Intake::adopt`] stores and queues one
//! as a message of this node, under a new queue ID, and says so in its own
//! event (`adopted`, the new ID's first line in the log, as `received` is
//! for mail taken at a door).
//!
//! Trusts: the claim. The copy's origin checked, filtered and signed the
//! message before it answered `250`; none of that is done again (a filter
//! that refused it now would lose mail already acknowledged).
//! Invariant: an adopted copy is never refused for want of a replica
//! ([`Entry::Adopted`]); `Ok` means it is on disk and queued.

use std::sync::Arc;

use sluice_spool::Envelope;

use super::store::Entry;
use super::{Intake, Refusal, Stored};
use crate::log::{Event, Qid};

/// A copy claimed from a dead peer, its finished recipients taken out.
pub struct ClaimedCopy {
    /// The node that took the message first.
    pub origin: String,
    /// Its queue ID there.
    pub origin_id: u64,
    /// Its envelope (the ID is replaced by one of this node's).
    pub envelope: Envelope,
    pub body: Vec<u8>,
}

impl Intake {
    /// Queues a claimed copy as a message of this node, under a new queue
    /// ID; returns that ID.
    pub(crate) async fn adopt(&self, copy: ClaimedCopy) -> Result<u64, Refusal> {
        let ClaimedCopy {
            origin,
            origin_id,
            mut envelope,
            body,
        } = copy;
        envelope.id = self.new_id();
        let body = Arc::new(body);
        let body_ref = self.commit(&envelope, &body, Entry::Adopted).await?;
        let id = envelope.id;
        self.logger.emit(&Event::Adopted {
            queue_id: Qid(id),
            origin: origin.into(),
            origin_queue_id: Qid(origin_id),
            from: envelope.sender.as_str().into(),
            size: body.len() as u64,
            nrcpt: envelope.recipients.len() as u64,
        });
        (self.handoff)
            .hand_off(Stored {
                envelope,
                body_ref,
                body,
            })
            .await;
        Ok(id)
    }
}
