//! Jobs and job reports: the only things that cross between the scheduler
//! and the delivery agents (the in-process form of Postfix's qmgr ↔
//! delivery agent protocol).

use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope};
use tokio::sync::mpsc;

use super::Event;
use crate::message::status::{Outcome, Relay, Reply};

pub type WorkerId = u64;

/// How the next hop took an attempt: feeds the destination's window
/// (Postfix's positive and negative feedback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// A session worked, whatever the recipients' outcomes.
    Ok,
    /// The peer said 421 (too busy): the window shrinks, the destination
    /// is not dead.
    Throttled,
    /// No connection could be made at all (feeds the dead-destination
    /// logic).
    ConnectFailed,
}

/// One message's recipients for one next hop.
pub struct Job {
    pub msg: u64,
    pub envelope: Arc<Envelope>,
    /// The body if still in memory; otherwise it is read from the spool.
    pub body: Option<Arc<Vec<u8>>>,
    pub body_ref: BodyRef,
    /// Indices into `envelope.recipients`.
    pub rcpts: Vec<u16>,
}

/// What a worker tells the scheduler.
pub enum JobReport {
    /// A job is finished: one outcome per recipient of the job.
    Done {
        dest: Arc<str>,
        worker: WorkerId,
        msg: u64,
        results: Vec<(u16, Outcome)>,
        feedback: Feedback,
        /// The worker waits for another job on the same connection.
        wants_more: bool,
    },
    /// The worker has ended; jobs it had been given but not started come back.
    Exit {
        dest: Arc<str>,
        worker: WorkerId,
        returned: Vec<Job>,
    },
}

/// A worker's way to report; waits when the scheduler is saturated.
#[derive(Clone)]
pub struct Reporter(pub(super) mpsc::Sender<Event>);

impl Reporter {
    pub async fn send(&self, report: JobReport) {
        let _ = self.0.send(Event::Report(report)).await;
    }
}

/// Every recipient of `job` deferred with the same reply.
pub fn defer_all(job: &Job, relay: &Relay, reply: &Reply) -> Vec<(u16, Outcome)> {
    let deferred = |relay, reply| Outcome::Deferred { relay, reply };
    all(job, deferred, relay, reply)
}

/// Every recipient of `job` bounced with the same reply (a definite
/// answer such as a domain that does not exist).
pub fn bounce_all(job: &Job, relay: &Relay, reply: &Reply) -> Vec<(u16, Outcome)> {
    let bounced = |relay, reply| Outcome::Bounced { relay, reply };
    all(job, bounced, relay, reply)
}

fn all(
    job: &Job,
    make: fn(Relay, Reply) -> Outcome,
    relay: &Relay,
    reply: &Reply,
) -> Vec<(u16, Outcome)> {
    job.rcpts
        .iter()
        .map(|&r| (r, make(relay.clone(), reply.clone())))
        .collect()
}
