//! The Maildir delivery agent: each recipient of a job written into its
//! mailbox on the blocking pool (file writes block), then all of them
//! made durable together: by the group committer (`commit.rs`, shared by
//! every worker of the agent) or, with `local.maildir_sync = "each"`, each
//! with its own syncs.
//!
//! The mailbox path is looked up again at delivery time (the table may
//! have changed since RCPT); an unknown mailbox bounces, a table that
//! cannot answer defers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_spool::Spool;

use super::commit::{Committer, ToWrite};
use super::dirs::MaildirPolicy;
use super::write::{finish, stage, SyncStats};
use super::MaildirError;
use crate::config::Config;
use crate::message::body;
use crate::message::reply::{Enhanced, Relay, Reply};
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
    /// Group commit (`local.maildir_sync = "batch"`); None: each message
    /// synced on its own.
    pub committer: Option<Arc<Committer>>,
    pub stats: Arc<SyncStats>,
}

impl DeliveryAgent for MaildirAgent {
    fn spawn(&self, start: WorkerStart) {
        let d = &self.config.delivery;
        let idle = Duration::from_secs(d.connection_idle_secs.max(1));
        let worker = MaildirWorker {
            hostname: self.config.hostname.as_str().into(),
            mailboxes: self.mailboxes.clone(),
            spool: self.spool.clone(),
            policy: self.policy.clone(),
            committer: self.committer.clone(),
            stats: self.stats.clone(),
        };
        tokio::spawn(run_worker(worker, start, idle, d.messages_per_connection));
    }
}

struct MaildirWorker {
    /// Shared by every message the worker writes.
    hostname: Arc<str>,
    mailboxes: Arc<VirtualMailboxes>,
    spool: Spool,
    policy: Arc<MaildirPolicy>,
    committer: Option<Arc<Committer>>,
    stats: Arc<SyncStats>,
}

impl WorkerSession for MaildirWorker {
    async fn attempt(&mut self, job: &Job) -> Attempt {
        let results = match body::load(&self.spool, &job.body, job.body_ref).await {
            Ok(body) => self.deliver(job, body).await,
            Err(e) => {
                let text = format!("cannot read queue file: {e}");
                defer_all(job, &Relay::Maildir, &own(451, (4, 3, 0), text))
            }
        };
        Attempt {
            results,
            feedback: crate::queue::Feedback::Ok,
        }
    }

    async fn close(self) {}
}

/// A recipient's Maildir, found.
struct Target {
    rcpt: u16,
    address: String,
    dir: PathBuf,
}

impl MaildirWorker {
    /// Looks every recipient up, writes the message once per mailbox,
    /// then makes all of them durable together.
    async fn deliver(&self, job: &Job, body: Arc<Vec<u8>>) -> Vec<(u16, Outcome)> {
        let mut results = Vec::with_capacity(job.rcpts.len());
        let mut targets = Vec::with_capacity(job.rcpts.len());
        for &r in &job.rcpts {
            let address = job.envelope.recipients[r as usize].clone();
            match self.mailboxes.maildir_of(&address).await {
                Ok(Some(dir)) => targets.push(Target {
                    rcpt: r,
                    address,
                    dir,
                }),
                Ok(None) => results.push((
                    r,
                    Outcome::Bounced {
                        relay: Relay::Maildir,
                        reply: own(
                            550,
                            (5, 1, 1),
                            "user unknown in virtual mailbox table".into(),
                        ),
                    },
                )),
                Err(err) => results.push((
                    r,
                    deferred(own(
                        451,
                        (4, 3, 0),
                        format!("temporary lookup failure: {err}"),
                    )),
                )),
            }
        }
        if !targets.is_empty() {
            results.extend(self.write(job, targets, body).await);
        }
        results
    }

    async fn write(
        &self,
        job: &Job,
        targets: Vec<Target>,
        body: Arc<Vec<u8>>,
    ) -> Vec<(u16, Outcome)> {
        let sender: Arc<str> = job.envelope.sender.as_str().into();
        let items: Vec<ToWrite> = targets
            .iter()
            .map(|t| ToWrite {
                maildir: t.dir.clone(),
                hostname: self.hostname.clone(),
                sender: sender.clone(),
                recipient: t.address.clone(),
                body: body.clone(),
            })
            .collect();
        let done = match &self.committer {
            Some(committer) => committer.deliver(items).await,
            None => self.each(items).await,
        };
        let outcome = |t: &Target, done: Result<String, MaildirError>| match done {
            Ok(name) => Outcome::Delivered {
                relay: Relay::Maildir,
                reply: Reply::own(
                    250,
                    None,
                    format!("delivered to maildir {}/new/{name}", t.dir.display()),
                ),
                notified: false,
            },
            Err(err) => deferred(err.reply()),
        };
        targets
            .iter()
            .zip(done)
            .map(|(t, d)| (t.rcpt, outcome(t, d)))
            .collect()
    }

    /// `maildir_sync = "each"`: every message written, synced and renamed
    /// on its own, on the blocking pool.
    async fn each(&self, items: Vec<ToWrite>) -> Vec<Result<String, MaildirError>> {
        let n = items.len();
        let (policy, stats) = (self.policy.clone(), self.stats.clone());
        let done = tokio::task::spawn_blocking(move || {
            let (mut ok, mut syncs) = (0, 0);
            let results: Vec<_> = items
                .iter()
                .map(|it| {
                    let (h, s) = (&*it.hostname, &*it.sender);
                    let staged = stage(&policy, &it.maildir, h, s, &it.recipient, &it.body, true)?;
                    syncs += 2 + staged.dirs_synced;
                    let done = finish(staged, &policy);
                    ok += u64::from(done.is_ok());
                    done
                })
                .collect();
            stats.count(ok, syncs);
            results
        })
        .await;
        done.unwrap_or_else(|e| {
            let failed = || MaildirError::Io("(all)".into(), std::io::Error::other(e.to_string()));
            (0..n).map(|_| Err(failed())).collect()
        })
    }
}

fn deferred(reply: Reply) -> Outcome {
    Outcome::Deferred {
        relay: Relay::Maildir,
        reply,
    }
}

/// Our own reply with status `class.subject.detail`.
fn own(code: u16, (c, s, d): (u8, u8, u8), text: String) -> Reply {
    Reply::own(code, Enhanced::new(c, s, d), text)
}
