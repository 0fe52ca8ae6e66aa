//! The queue manager ("qmgr"): one task owns the in-memory queue and hands
//! jobs to delivery agents.
//!
//! Data flow: the SMTP server (or recovery, or a bounce) hands a spooled
//! message to [`QueueHandle::enqueue`]; the [`Scheduler`] (a driver
//! doing the I/O for `dispatch::QueueCore`, which decides) groups its open
//! recipients by next hop into [`Job`]s, queues them per destination and
//! starts workers through a [`DeliveryAgent`] (SMTP, Maildir, or a fake in
//! tests) within each destination's concurrency window. Workers report
//! [`JobReport`]s back; outcomes are recorded in the spool; deferred
//! recipients are retried with backoff until the queue lifetime ends.
//!
//! The queue knows no sockets and no files: agents do. Everything it needs
//! below it (message types, config, routing, bounces, the spool) is
//! imported; the agents and the daemon import it, never the reverse.
//!
//! Invariants: see [`scheduler`]. Channels are bounded: a full queue
//! channel makes senders wait (back-pressure), it never grows.

pub mod admin;
mod admission;
pub mod agent;
mod compact;
mod core;
mod destination;
mod dispatch;
mod failures;
pub mod job;
mod leases;
mod lines;
mod reconfig;
mod requests;
mod results;
pub mod retry;
mod rollup;
pub mod scheduler;
mod step;
mod view;

use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope};
use tokio::sync::{mpsc, oneshot};

pub use agent::{run_worker, Attempt, DeliveryAgent, WorkerSession, WorkerStart};
pub use job::{bounce_all, defer_all, Feedback, Job, JobReport, Reporter, WorkerId};
pub use reconfig::Reconfig;
pub use rollup::SecureMx;
pub use scheduler::Scheduler;

/// Events waiting for the scheduler at most (then senders wait).
pub const EVENT_CAPACITY: usize = 4096;

/// A spooled message handed to the queue (newly received, recovered from
/// the spool, or a bounce).
pub struct QueuedMessage {
    pub envelope: Envelope,
    pub body_ref: BodyRef,
    /// The body if it is still in memory; the queue may drop it.
    pub body: Option<Arc<Vec<u8>>>,
    /// Per recipient: already final (from recovery).
    pub done: Vec<bool>,
}

/// What the scheduler reacts to.
pub enum Event {
    Queued(QueuedMessage),
    /// Messages found in the spool at start-up (envelopes still on disk).
    Recovered(Vec<sluice_spool::Recovered>),
    /// Envelopes read back for parked messages (see `admission.rs`).
    Loaded(Vec<(u64, Result<Envelope, step::ReadBack>)>),
    Report(JobReport),
    /// An administrator's request (`admin.rs`).
    Admin(admin::AdminRequest, oneshot::Sender<admin::AdminReply>),
    /// A domain's mail hosts were looked up for MX rollup (`rollup.rs`):
    /// its group's next hop (an MX host set), or `None` to stay on its own.
    Resolved {
        dest: Arc<str>,
        group: Option<Arc<crate::config::hop::NextHop>>,
    },
    /// The bounce for these recipients of `msg` is safely spooled.
    BounceStored {
        msg: u64,
        recipients: Vec<u16>,
    },
    /// The cluster granted more connections to this destination
    /// (`leases.rs`).
    Leased(Arc<str>),
    /// A reload: new settings, routes and agents (`reconfig.rs`).
    Reconfigure(Box<Reconfig>),
    /// Stop dispatching, let deliveries in flight finish (until the
    /// deadline), record their outcomes, then reply and end.
    Drain {
        deadline: tokio::time::Instant,
        done: oneshot::Sender<DrainReport>,
    },
}

/// What a drain achieved, for the shutdown log line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DrainReport {
    /// Jobs whose outcomes came back and were recorded.
    pub finished_jobs: usize,
    /// Jobs still out when the deadline passed (delivered again after restart).
    pub abandoned_jobs: usize,
}

/// The way into the queue; cheap to clone.
#[derive(Clone)]
pub struct QueueHandle {
    tx: mpsc::Sender<Event>,
    /// Local delivery's backlog, published by the scheduler for in-flow
    /// pacing (`intake/flow.rs`).
    flow: Arc<crate::intake::flow::InFlow>,
}

/// The intake hands every stored message to the queue through this.
impl crate::intake::Handoff for QueueHandle {
    fn hand_off(
        &self,
        msg: crate::intake::Stored,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        let done = vec![false; msg.envelope.recipients.len()];
        Box::pin(self.enqueue(QueuedMessage {
            envelope: msg.envelope,
            body_ref: msg.body_ref,
            body: Some(msg.body),
            done,
        }))
    }
}

impl QueueHandle {
    /// A handle and the receiver the scheduler runs on.
    pub fn channel() -> (QueueHandle, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(EVENT_CAPACITY);
        let flow = Arc::default();
        (QueueHandle { tx, flow }, rx)
    }

    /// Queues a spooled message; waits while the queue is saturated.
    pub async fn enqueue(&self, msg: QueuedMessage) {
        let _ = self.tx.send(Event::Queued(msg)).await;
    }

    /// Hands the messages recovered at start-up to the queue.
    pub async fn recovered(&self, batch: Vec<sluice_spool::Recovered>) {
        let _ = self.tx.send(Event::Recovered(batch)).await;
    }

    /// Asks the queue to do what an administrator wants; `None` if the
    /// queue has stopped.
    pub async fn admin(&self, request: admin::AdminRequest) -> Option<admin::AdminReply> {
        let (reply, wait) = oneshot::channel();
        self.tx.send(Event::Admin(request, reply)).await.ok()?;
        wait.await.ok()
    }

    /// Hands the queue a reloaded configuration; returns once the
    /// scheduler has it (false if the queue has stopped).
    pub async fn reconfigure(&self, reconfig: Reconfig) -> bool {
        self.tx
            .send(Event::Reconfigure(Box::new(reconfig)))
            .await
            .is_ok()
    }

    /// Asks the scheduler to drain and waits for its report.
    pub async fn drain(&self, deadline: tokio::time::Instant) -> DrainReport {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Event::Drain { deadline, done }).await.is_err() {
            return DrainReport::default();
        }
        wait.await.unwrap_or_default()
    }

    pub(crate) fn sender(&self) -> mpsc::Sender<Event> {
        self.tx.clone()
    }

    /// The in-flow gauge the scheduler publishes to.
    pub fn flow(&self) -> Arc<crate::intake::flow::InFlow> {
        self.flow.clone()
    }
}
