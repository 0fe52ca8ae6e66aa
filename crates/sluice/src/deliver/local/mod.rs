//! Local delivery to system accounts (`[system]`, Postfix's local(8)):
//! each recipient of a job through the delivery switch (`expand.rs`) on
//! the blocking pool, its files written with the user's rights
//! (`rights.rs`) in mbox or Maildir form (`mbox.rs`); the `|command`
//! targets the switch allowed are then run here (`command.rs`, on
//! pipe(8)'s async runner), and the addresses it sends on are submitted
//! as new mail (a `Delivered-To:` added) through the intake, one message
//! per envelope sender.
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
pub mod status;

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
use expand::{Delivery, Forward, Switched};
use status::{note, Status};

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
            let envid = env
                .dsn
                .as_ref()
                .map_or(String::new(), |d| unxtext(&d.envid));
            let rcpt = recipient.clone();
            let ran = tokio::task::spawn_blocking(move || {
                let hostname = config.hostname.as_str();
                let parts = (sender.as_str(), original.as_str(), rcpt.as_str());
                let mut d = Delivery::new(&system, &config.system, hostname, parts, &body2);
                d.envid = envid;
                d.run(&rcpt)
            })
            .await;
            let switched = ran.unwrap_or_else(|e| Switched {
                status: Some(Status::Deferred(
                    "4.3.0",
                    format!("local delivery failed: {e}"),
                )),
                ..Switched::default()
            });
            let status = self.finish(job, &recipient, switched, &body).await;
            results.push((r, outcome(status)));
        }
        results
    }

    /// After the switch: its commands run, then its forwards submitted,
    /// unless something deferred the recipient already (a retry would
    /// run or send them again).
    async fn finish(&self, job: &Job, recipient: &str, s: Switched, body: &[u8]) -> Status {
        let mut status = s.status;
        let limit = Duration::from_secs(self.config.system.command_time_limit_secs.max(1));
        for target in &s.commands {
            if status.as_ref().is_some_and(Status::is_deferred) {
                break;
            }
            let ran = command::run(target, body, limit).await;
            note(&mut status, ran);
        }
        let status = match (status, s.forwards.is_empty()) {
            (Some(s), _) => s,
            (None, false) => Status::Delivered("forwarded as new mail".into()),
            (None, true) => Status::Delivered("delivered to nothing".into()),
        };
        if status.is_deferred() || s.forwards.is_empty() {
            return status;
        }
        match self.forward(job, recipient, s.forwards, body).await {
            Ok(()) => status,
            Err(text) => Status::Deferred("4.3.0", text),
        }
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
        Status::Replied(reply) if reply.is_temporary() => Outcome::Deferred { relay, reply },
        Status::Replied(reply) => Outcome::Bounced { relay, reply },
    }
}

/// An RFC 3461 xtext (`+HH` for a byte) decoded; an invalid `+` is kept.
fn unxtext(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'+', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
