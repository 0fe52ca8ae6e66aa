//! Where the intake writes what it takes: the storage boundary between
//! the intake and whatever keeps a message durable before `250`.
//!
//! The intake owns the trait, [`Store`]; the daemon (its composition
//! root) chooses the implementation: [`LocalSpool`] alone, or a store
//! layered on it that also mirrors each message on a cluster peer
//! (`cluster::shadow::Mirrored`). The intake therefore does not know the
//! cluster, and the cluster's failure decisions (a copy no peer took, a
//! local write that failed after the peer's succeeded) stay in the
//! cluster.
//!
//! Trusts: the implementation's `Ok` (the message is synced where that
//! store promises). Invariants: `Ok` from [`Store::store`] means the
//! message is on disk and will be recovered at start; an `Err` leaves
//! nothing behind that would be delivered (a store that wrote some part
//! and then refused drops it, see [`Store::forget`]).
//!
//! The intake's last stage is here too ([`run`]): the envelope made from
//! the submission (recipients lined up with the addresses they were given
//! as, the login that submitted it), the write, the log line that starts
//! the message's story (`received`, Postfix's `client=`), the hand-off to
//! the queue.
//!
//! Cost on the relay hot path: [`Storage`] is an enum, so the single-node
//! store ([`Storage::Local`]) is called without a trait object and its
//! future lives inside the caller's (no allocation per message). Only a
//! layered store ([`Storage::Layered`], a cluster node's) goes through a
//! `dyn` call whose future is boxed: one allocation per message, beside
//! the frame, the channel and the peer's round trip its copy costs anyway.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope, Spool, SpoolError};

use super::{Accepted, Intake, Origin, Refusal, Stored, Submission};
use crate::log::{Event, Qid, Reject};

/// How a message reaches the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Taken at a door of this node: its sender waits for the answer, and
    /// may be refused.
    Accepted,
    /// A copy claimed from a dead peer ([`Intake::adopt`]): its sender was
    /// answered `250` long ago, so it is never refused for want of a
    /// replica.
    Adopted,
}

/// Why a message could not be stored. Each maps to a [`Refusal`] (and so
/// to the reply the sender gets).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The local spool refused or failed: `452 4.3.1` when full, `554
    /// 5.3.4` for an envelope too large to record, `451 4.3.0` otherwise.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// A replica was required (`cluster.shadow_required`) and no peer took
    /// one: `451 4.3.0`, the sender tries again later.
    #[error("no replica: {0}")]
    NoReplica(String),
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Refusal {
        match e {
            StoreError::Spool(e) => Refusal::Spool(e),
            StoreError::NoReplica(why) => Refusal::Shadow(why),
        }
    }
}

/// A durable store for accepted messages (KumoMTA's `Spool` trait is the
/// model: a small interface with stated costs).
///
/// Cost contract, since every message takes this path before `250`:
/// - [`store`](Store::store) is awaited once per message on the
///   session's task. It may wait for disk (a group commit's `fdatasync`)
///   and the network (a peer's acknowledgement), bounded by the
///   implementation's own timeouts; it must not block the thread
///   (no synchronous I/O, no lock held across an await) and should not
///   allocate beyond what the write itself needs (the body is shared,
///   `Arc`, never copied);
/// - [`forget`](Store::forget) is synchronous, called only on a refusal
///   after a partial success (rare); it must not wait for I/O, but may
///   block briefly while the spool writer's bounded queue is full, as
///   [`Spool::record_outcome`] does.
pub trait Store: Send + Sync {
    /// Stores `envelope` (with its `id` already set) and `body`, synced
    /// before it resolves; where the body is, for the queue.
    fn store(
        &self,
        envelope: &Envelope,
        body: &Arc<Vec<u8>>,
        entry: Entry,
    ) -> impl Future<Output = Result<BodyRef, StoreError>> + Send;

    /// Drops a message stored under `id` that is refused after all (it is
    /// never delivered; its space is reclaimed).
    fn forget(&self, id: u64);
}

/// The node's own spool, alone: what a single node stores into.
#[derive(Clone)]
pub struct LocalSpool(Spool);

impl LocalSpool {
    pub fn new(spool: Spool) -> LocalSpool {
        LocalSpool(spool)
    }
}

impl Store for LocalSpool {
    async fn store(
        &self,
        envelope: &Envelope,
        body: &Arc<Vec<u8>>,
        _entry: Entry,
    ) -> Result<BodyRef, StoreError> {
        Ok(self.0.store(envelope.clone(), body.clone()).await?)
    }

    fn forget(&self, id: u64) {
        self.0.record_outcome(id, Vec::new(), true);
    }
}

/// A [`Store`] behind a trait object: the same calls, the future boxed.
/// Every `Store` is one ([`Storage::Layered`] holds it).
pub trait DynStore: Send + Sync {
    fn store_boxed<'a>(
        &'a self,
        envelope: &'a Envelope,
        body: &'a Arc<Vec<u8>>,
        entry: Entry,
    ) -> Pin<Box<dyn Future<Output = Result<BodyRef, StoreError>> + Send + 'a>>;

    fn forget(&self, id: u64);
}

impl<S: Store> DynStore for S {
    fn store_boxed<'a>(
        &'a self,
        envelope: &'a Envelope,
        body: &'a Arc<Vec<u8>>,
        entry: Entry,
    ) -> Pin<Box<dyn Future<Output = Result<BodyRef, StoreError>> + Send + 'a>> {
        Box::pin(Store::store(self, envelope, body, entry))
    }

    fn forget(&self, id: u64) {
        Store::forget(self, id)
    }
}

/// The store an intake writes to, as the daemon chose it.
#[derive(Clone)]
pub enum Storage {
    /// The local spool alone (no allocation per message).
    Local(LocalSpool),
    /// A store layered on the local spool (a cluster node's mirror on a
    /// peer), which the intake does not know by name.
    Layered(Arc<dyn DynStore>),
}

impl Store for Storage {
    async fn store(
        &self,
        envelope: &Envelope,
        body: &Arc<Vec<u8>>,
        entry: Entry,
    ) -> Result<BodyRef, StoreError> {
        match self {
            Storage::Local(local) => local.store(envelope, body, entry).await,
            Storage::Layered(store) => store.store_boxed(envelope, body, entry).await,
        }
    }

    fn forget(&self, id: u64) {
        match self {
            Storage::Local(local) => Store::forget(local, id),
            Storage::Layered(store) => store.forget(id),
        }
    }
}

impl Intake {
    /// Stores a message through the chosen [`Storage`]; a failure as the
    /// [`Refusal`] the sender gets.
    pub(super) async fn commit(
        &self,
        envelope: &Envelope,
        body: &Arc<Vec<u8>>,
        entry: Entry,
    ) -> Result<BodyRef, Refusal> {
        Ok(self.store.store(envelope, body, entry).await?)
    }
}

/// Stores the message (synced before this returns), logs it and hands it
/// to the queue.
pub(super) async fn run(intake: &Intake, sub: Submission) -> Result<Accepted, Refusal> {
    let Submission {
        id,
        origin,
        sender,
        recipients,
        orig_rcpt,
        flags,
        dsn,
        body,
        flaws: _,
        hold: _,
        redirect: _,
        bcc: _,
        filter,
    } = sub;
    let orig_rcpt = line_up(&recipients, &orig_rcpt);
    // The filter is told who the client was (XFORWARD); no one else is.
    let xforward = match (&origin, filter.hop()) {
        (Origin::Smtp(client), Some(_)) => super::xforward::attributes(id, client),
        _ => String::new(),
    };
    let envelope = sluice_spool::Envelope {
        id,
        arrival: crate::timefmt::now_millis(),
        sender,
        recipients,
        flags,
        dsn,
        orig_rcpt,
        login: origin.login().unwrap_or_default().to_string(),
        filter: filter.spool_text(),
        xforward,
    };
    let body = Arc::new(body);
    match intake.commit(&envelope, &body, Entry::Accepted).await {
        Ok(body_ref) => {
            intake.log_queued(&origin, &envelope, body.len());
            let id = envelope.id;
            intake
                .handoff
                .hand_off(Stored {
                    envelope,
                    body_ref,
                    body,
                })
                .await;
            Ok(Accepted::Queued(id))
        }
        Err(refusal) => {
            intake.logger.emit(&Event::Reject(Reject::Queue {
                stage: "queue".into(),
                queue_id: Qid(envelope.id),
                cause: refusal.cause().into(),
                error: refusal.to_string().into(),
                from: envelope.sender.as_str().into(),
            }));
            Err(refusal)
        }
    }
}

/// The address each of `recipients` was given as, in their order (empty
/// when as given), from the (recipient, given) pairs, each pair used once
/// (a recipient twice, given as two addresses, has both); no list at all
/// when no alias or rewriting changed any of them, so such records are as
/// before.
fn line_up(recipients: &[String], pairs: &[(String, String)]) -> Vec<String> {
    if pairs.is_empty() {
        return Vec::new();
    }
    let mut used = vec![false; pairs.len()];
    let mut given = |r: &String| {
        let found = pairs
            .iter()
            .enumerate()
            .position(|(i, (to, _))| !used[i] && to == r);
        match found {
            Some(i) => {
                used[i] = true;
                pairs[i].1.clone()
            }
            None => String::new(),
        }
    };
    let lined: Vec<String> = recipients.iter().map(&mut given).collect();
    match lined.iter().all(String::is_empty) {
        true => Vec::new(),
        false => lined,
    }
}

impl Intake {
    /// The message's first line in the log, under the door's name (as
    /// Postfix's smtpd logs `client=`): `grep QUEUEID` starts here.
    pub(super) fn log_queued(&self, origin: &Origin, env: &Envelope, size: usize) {
        let (door, _from) = match origin {
            Origin::Smtp(c) => (
                "smtpd",
                format!("client=[{}]:{}", c.peer.ip(), c.peer.port()),
            ),
            Origin::Local { uid, .. } => (
                "sendmail",
                format!("uid={}", uid.map_or("unknown".into(), |u| u.to_string())),
            ),
            Origin::Notice => ("bounce", "notice".into()),
        };
        let (client_ip, client_port, uid) = match origin {
            Origin::Smtp(c) => (Some(c.peer.ip()), Some(c.peer.port()), None),
            Origin::Local { uid, .. } => (None, None, *uid),
            Origin::Notice => (None, None, None),
        };
        self.logger.emit(&Event::Received {
            queue_id: Qid(env.id),
            origin: door.into(),
            client_ip,
            client_port,
            uid,
            from: env.sender.as_str().into(),
            size: size as u64,
            nrcpt: env.recipients.len() as u64,
        });
    }
}
