//! Local delivery to system accounts (`[system]`, Postfix's local(8)):
//! each recipient of a job through the delivery switch (`expand.rs`) on
//! the blocking pool, its files written with the user's rights
//! (`rights.rs`) in mbox or Maildir form (`mbox.rs`); the addresses the
//! switch sends on are then submitted as new mail (a `Delivered-To:`
//! added) through the intake, one message per envelope sender.
//!
//! Trust: the spool and the configuration; everything a user controls
//! (`.forward`, include files, their home) is read and written with
//! that user's rights. Invariant: a recipient is reported delivered only
//! when every target took the message (the mailboxes synced, the new
//! mail queued); a temporary failure of any defers it whole (local(8)
//! does the same: a retry may duplicate to the targets that took it).

pub mod command;
pub mod expand;
pub mod mbox;
pub mod rights;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use sluice_spool::Spool;

use crate::config::Config;
use crate::intake::{Intake, Origin, Submission};
use crate::message::body;
use crate::message::reply::{Enhanced, Relay, Reply};
use crate::message::status::Outcome;
use crate::queue::{
    defer_all, run_worker, Attempt, DeliveryAgent, Job, WorkerSession, WorkerStart,
};
use crate::routing::system::SystemUsers;
use expand::{Delivery, Forward, Status};

/// Where forwarded mail is submitted: the intake in force, set by the
/// daemon once it is built (agents are built before it) and at reloads.
pub type Reinject = Arc<ArcSwapOption<Intake>>;

pub struct LocalAgent {
    pub config: Arc<Config>,
    pub system: Arc<SystemUsers>,
    pub spool: Spool,
    pub reinject: Reinject,
}

impl DeliveryAgent for LocalAgent {
    fn spawn(&self, start: WorkerStart) {
        let d = &self.config.delivery;
        let idle = Duration::from_secs(d.connection_idle_secs.max(1));
        let worker = LocalWorker {
            config: self.config.clone(),
            system: self.system.clone(),
            spool: self.spool.clone(),
            reinject: self.reinject.clone(),
        };
        tokio::spawn(run_worker(worker, start, idle, d.messages_per_connection));
    }
}

struct LocalWorker {
    config: Arc<Config>,
    system: Arc<SystemUsers>,
    spool: Spool,
    reinject: Reinject,
}

impl WorkerSession for LocalWorker {
    async fn attempt(&mut self, job: &Job) -> Attempt {
        let results = match body::load(&self.spool, &job.body, job.body_ref).await {
            Ok(body) => self.deliver(job, body).await,
            Err(e) => {
                let text = format!("cannot read queue file: {e}");
                defer_all(job, &Relay::Local, &own(451, (4, 3, 0), text))
            }
        };
        Attempt {
            results,
            feedback: crate::queue::Feedback::Ok,
        }
    }

    async fn close(self) {}
}

impl LocalWorker {
    async fn deliver(&self, job: &Job, body: Arc<Vec<u8>>) -> Vec<(u16, Outcome)> {
        let mut results = Vec::with_capacity(job.rcpts.len());
        for &r in &job.rcpts {
            let env = &job.envelope;
            let recipient = env.recipients[r as usize].clone();
            let original = env
                .orig_rcpt
                .get(r as usize)
                .filter(|o| !o.is_empty())
                .cloned()
                .unwrap_or_else(|| recipient.clone());
            let (config, system, body2) = (self.config.clone(), self.system.clone(), body.clone());
            let sender = env.sender.clone();
            let rcpt = recipient.clone();
            let ran = tokio::task::spawn_blocking(move || {
                let hostname = config.hostname.as_str();
                let parts = (sender.as_str(), original.as_str(), rcpt.as_str());
                Delivery::new(&system, &config.system, hostname, parts, &body2).run(&rcpt)
            })
            .await;
            let (status, forwards) = match ran {
                Ok(done) => done,
                Err(e) => (
                    Status::Deferred("4.3.0", format!("local delivery failed: {e}")),
                    Vec::new(),
                ),
            };
            let status = match (status, forwards.is_empty()) {
                (s @ Status::Deferred(..), _) | (s, true) => s,
                (s, false) => match self.forward(job, &recipient, forwards, &body).await {
                    Ok(()) => s,
                    Err(text) => Status::Deferred("4.3.0", text),
                },
            };
            results.push((r, outcome(status)));
        }
        results
    }

    /// Submits the message anew to `forwards`, one message per sender,
    /// with `Delivered-To: recipient` on top.
    async fn forward(
        &self,
        job: &Job,
        recipient: &str,
        forwards: Vec<Forward>,
        body: &[u8],
    ) -> Result<(), String> {
        let Some(intake) = self.reinject.load_full() else {
            return Err("forwarding is not ready (no intake yet)".into());
        };
        let mut by_sender: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for f in forwards {
            by_sender.entry(f.sender).or_default().push(f.to);
        }
        let mut text = format!("Delivered-To: {}\r\n", recipient.to_ascii_lowercase()).into_bytes();
        text.extend_from_slice(body);
        for (sender, recipients) in by_sender {
            let sub = Submission {
                id: intake.new_id(),
                origin: Origin::Notice,
                sender,
                recipients,
                orig_rcpt: Vec::new(),
                flags: job.envelope.flags & !crate::message::flags::BOUNCE,
                dsn: None,
                body: text.clone(),
                flaws: None,
                hold: None,
                redirect: None,
                bcc: Vec::new(),
                // Forwarded copies were filtered on their way in (as our
                // notices are, never again).
                filter: crate::config::content_filter::ContentFilter::NONE,
            };
            intake
                .accept(sub)
                .await
                .map_err(|e| format!("cannot forward: {e}"))?;
        }
        Ok(())
    }
}

fn outcome(status: Status) -> Outcome {
    let relay = Relay::Local;
    match status {
        Status::Delivered(text) => Outcome::Delivered {
            relay,
            reply: Reply::own(250, Enhanced::new(2, 0, 0), text),
            notified: false,
        },
        Status::Bounced(code, text) => Outcome::Bounced {
            relay,
            reply: Reply::own(550, enhanced(code), text),
        },
        Status::Deferred(code, text) => Outcome::Deferred {
            relay,
            reply: Reply::own(451, enhanced(code), text),
        },
    }
}

/// `"5.4.6"` as an enhanced status.
fn enhanced(code: &str) -> Option<Enhanced> {
    let mut it = code.split('.').map(|p| p.parse::<u16>().unwrap_or(0));
    let (c, s, d) = (it.next()?, it.next()?, it.next()?);
    Enhanced::new(c as u8, s as u8, d as u8)
}

fn own(code: u16, (c, s, d): (u8, u8, u8), text: String) -> Reply {
    Reply::own(code, Enhanced::new(c, s, d), text)
}
