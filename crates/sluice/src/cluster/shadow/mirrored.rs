//! The intake's store on a node with shadow copies: each message is
//! written to the local store and copied to a peer at the same time, and
//! `250` waits for both disks ([`Mirrored`], an `intake::store::Store`
//! layered on another, the local spool).
//!
//! Trusts: the local store's answer and the peer's acknowledgement
//! (`client.rs`). Invariants: a message refused here leaves no copy that
//! would be delivered, on either side (a peer's copy of a message the
//! local spool refused is dropped through the outcome stream; a local
//! message refused for want of a peer's copy is forgotten); a copy no
//! peer took refuses the message only with `shadow_required`, and never
//! a claimed copy being adopted (its sender was answered long ago).

use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope};

use super::Shadow;
use crate::intake::store::{Entry, Store, StoreError};
use crate::log::Logger;
use crate::log::{Event, Qid};

/// `S` (the local spool) mirrored on a peer through `Shadow`.
pub struct Mirrored<S> {
    local: S,
    shadow: Arc<Shadow>,
    logger: Logger,
}

impl<S: Store> Mirrored<S> {
    pub fn new(local: S, shadow: Arc<Shadow>, logger: Logger) -> Mirrored<S> {
        Mirrored {
            local,
            shadow,
            logger,
        }
    }
}

impl<S: Store> Store for Mirrored<S> {
    async fn store(
        &self,
        envelope: &Envelope,
        body: &Arc<Vec<u8>>,
        entry: Entry,
    ) -> Result<BodyRef, StoreError> {
        let local = self.local.store(envelope, body, entry);
        let (local, copy) = tokio::join!(local, self.shadow.copy(envelope, body));
        let body_ref = match local {
            Ok(r) => r,
            Err(e) => {
                // Refused: the peer's copy must not outlive the refusal.
                if copy.is_ok() {
                    self.shadow.outcome(envelope.id, &[], true, 0);
                }
                return Err(e);
            }
        };
        if let Err(e) = copy {
            if self.shadow.required() && entry == Entry::Accepted {
                self.local.forget(envelope.id);
                return Err(StoreError::NoReplica(e.to_string()));
            }
            self.logger.emit(&Event::ShadowNotCopied {
                queue_id: Qid(envelope.id),
                error: e.to_string().into(),
            });
        }
        Ok(body_ref)
    }

    fn forget(&self, id: u64) {
        // The spool tells the peers (its outcome observer).
        self.local.forget(id);
    }
}
