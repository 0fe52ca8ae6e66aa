//! The Maildir delivery agent: each recipient of a job written into its
//! mailbox on the blocking pool (file writes and fsyncs block).
//!
//! The mailbox path is looked up again at delivery time (the table may
//! have changed since RCPT); an unknown mailbox bounces, a table that
//! cannot answer defers.

use std::sync::Arc;
use std::time::Duration;

use sluice_spool::Spool;

use super::dirs::MaildirPolicy;
use super::write::deliver_maildir;
use crate::config::Config;
use crate::message::body;
use crate::message::status::Outcome;
use crate::queue::{
    defer_all, run_worker, Attempt, DeliveryAgent, Job, WorkerSession, WorkerStart,
};
use crate::routing::mailboxes::VirtualMailboxes;

pub struct MaildirAgent {
    pub config: Arc<Config>,
    pub mailboxes: Arc<VirtualMailboxes>,
    pub spool: Spool,
    pub policy: Arc<MaildirPolicy>,
}

impl DeliveryAgent for MaildirAgent {
    fn spawn(&self, start: WorkerStart) {
        let d = &self.config.delivery;
        let idle = Duration::from_secs(d.connection_idle_secs.max(1));
        let worker = MaildirWorker {
            config: self.config.clone(),
            mailboxes: self.mailboxes.clone(),
            spool: self.spool.clone(),
            policy: self.policy.clone(),
        };
        tokio::spawn(run_worker(worker, start, idle, d.messages_per_connection));
    }
}

struct MaildirWorker {
    config: Arc<Config>,
    mailboxes: Arc<VirtualMailboxes>,
    spool: Spool,
    policy: Arc<MaildirPolicy>,
}

impl WorkerSession for MaildirWorker {
    async fn attempt(&mut self, job: &Job) -> Attempt {
        let results = match body::load(&self.spool, &job.body, job.body_ref).await {
            Ok(body) => self.deliver(job, body).await,
            Err(e) => defer_all(
                job,
                "maildir",
                &format!("4.3.0 cannot read queue file: {e}"),
            ),
        };
        Attempt {
            results,
            feedback: crate::queue::Feedback::Ok,
        }
    }

    async fn close(self) {}
}

impl MaildirWorker {
    async fn deliver(&self, job: &Job, body: Arc<Vec<u8>>) -> Vec<(u16, Outcome)> {
        let mut results = Vec::with_capacity(job.rcpts.len());
        for &r in &job.rcpts {
            let rcpt = job.envelope.recipients[r as usize].clone();
            let outcome = match self.mailboxes.maildir_of(&rcpt).await {
                Ok(None) => Outcome::Bounced {
                    relay: "maildir".into(),
                    reason: "5.1.1 user unknown in virtual mailbox table".into(),
                },
                Err(err) => Outcome::Deferred {
                    relay: "maildir".into(),
                    reason: format!("4.3.0 temporary lookup failure: {err}"),
                },
                Ok(Some(dir)) => self.write(dir, job, rcpt, body.clone()).await,
            };
            results.push((r, outcome));
        }
        results
    }

    async fn write(
        &self,
        dir: std::path::PathBuf,
        job: &Job,
        rcpt: String,
        body: Arc<Vec<u8>>,
    ) -> Outcome {
        let hostname = self.config.hostname.clone();
        let sender = job.envelope.sender.clone();
        let shown = dir.display().to_string();
        let policy = self.policy.clone();
        let written = tokio::task::spawn_blocking(move || {
            deliver_maildir(&policy, &dir, &hostname, &sender, &rcpt, &body)
        })
        .await;
        match written {
            Ok(Ok(name)) => Outcome::Delivered {
                relay: "maildir".into(),
                reply: format!("delivered to maildir {shown}/new/{name}"),
                notified: false,
            },
            Ok(Err(err)) => Outcome::Deferred {
                relay: "maildir".into(),
                reason: err.to_string(),
            },
            Err(err) => Outcome::Deferred {
                relay: "maildir".into(),
                reason: format!("4.3.0 delivery task failed: {err}"),
            },
        }
    }
}
