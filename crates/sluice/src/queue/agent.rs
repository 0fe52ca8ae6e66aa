//! Delivery agents as the queue sees them: something that can start a
//! worker for a next hop. The worker loop itself is shared here; an agent
//! supplies only what one attempt means ([`WorkerSession`]).
//!
//! A worker is started with a first job, reports each job's outcomes, then
//! waits (up to the idle time) for the next job to the same next hop, so a
//! busy destination reuses its connection. When it ends it hands back jobs
//! it was given but did not start, and the scheduler requeues them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::job::{Feedback, Job, JobReport, Reporter, WorkerId};
use crate::config::hop::NextHop;
use crate::message::status::Outcome;

/// Everything a new worker needs.
pub struct WorkerStart {
    pub id: WorkerId,
    /// Destination key (the next hop's canonical name).
    pub dest: Arc<str>,
    pub hop: Arc<NextHop>,
    pub first: Job,
    /// Further jobs; closed by the scheduler when it wants the worker gone.
    pub jobs: mpsc::Receiver<Job>,
    pub reports: Reporter,
}

/// Starts workers; implemented by the SMTP and Maildir agents (and fakes).
pub trait DeliveryAgent: Send + Sync + 'static {
    fn spawn(&self, start: WorkerStart);
    /// The administrator flushed the queue: forget what says "do not try
    /// yet" (e.g. dead hosts), as `postqueue -f` does.
    fn flushed(&self) {}
}

/// One job's result.
pub struct Attempt {
    pub results: Vec<(u16, Outcome)>,
    pub feedback: Feedback,
}

/// What one worker does per job, and how it ends (e.g. SMTP QUIT).
pub trait WorkerSession: Send + 'static {
    fn attempt(&mut self, job: &Job) -> impl Future<Output = Attempt> + Send;
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// The worker loop: attempt, report, wait for more, hand back the rest.
pub async fn run_worker<S: WorkerSession>(
    mut session: S,
    start: WorkerStart,
    idle: Duration,
    messages_per_connection: usize,
) {
    let WorkerStart {
        id,
        dest,
        first,
        mut jobs,
        reports,
        ..
    } = start;
    let mut job = first;
    let mut sent = 0usize;
    loop {
        let attempt = session.attempt(&job).await;
        sent += 1;
        let wants_more = attempt.feedback == Feedback::Ok && sent < messages_per_connection.max(1);
        reports
            .send(JobReport::Done {
                dest: dest.clone(),
                worker: id,
                msg: job.msg,
                results: attempt.results,
                feedback: attempt.feedback,
                wants_more,
            })
            .await;
        if !wants_more {
            break;
        }
        match tokio::time::timeout(idle, jobs.recv()).await {
            Ok(Some(next)) => job = next,
            _ => break,
        }
    }
    jobs.close();
    let mut returned = Vec::new();
    while let Ok(job) = jobs.try_recv() {
        returned.push(job);
    }
    session.close().await;
    reports
        .send(JobReport::Exit {
            dest,
            worker: id,
            returned,
        })
        .await;
}
