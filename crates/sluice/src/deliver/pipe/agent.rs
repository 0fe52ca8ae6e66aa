//! The pipe agent: the queue's jobs for a `NAME:nexthop` pipe
//! destination, each message's recipients run through the transport's
//! command in groups of at most `max_recipients` (one command per
//! group), each group's recipients taking that command's outcome. Logged
//! as `relay=NAME`.
//!
//! The transport is looked up in the configuration the agent was built
//! with: a destination whose transport is gone (a reload removed it) or
//! is no pipe defers, as Postfix defers mail for a transport master.cf
//! lacks.

use std::sync::Arc;
use std::time::Duration;

use sluice_spool::Spool;

use super::content::{self, Envelope};
use super::expand::{self, Rcpt, Values};
use super::{PipeCommand, PipeOutcome};
use crate::config::hop::NextHop;
use crate::config::transports::{Service, TransportConfig};
use crate::config::Config;
use crate::message::body;
use crate::message::reply::{Enhanced, Relay, Reply};
use crate::message::status::Outcome;
use crate::queue::{
    bounce_all, defer_all, run_worker, Attempt, DeliveryAgent, Feedback, Job, WorkerSession,
    WorkerStart,
};

pub struct PipeAgent {
    pub config: Arc<Config>,
    pub spool: Spool,
}

impl DeliveryAgent for PipeAgent {
    fn spawn(&self, start: WorkerStart) {
        let (name, nexthop) = match &*start.hop {
            NextHop::Pipe { transport, nexthop } => (transport.clone(), nexthop.clone()),
            other => (Arc::from(other.key().as_str()), String::new()),
        };
        let worker = PipeWorker {
            transport: self.config.transports.get(&*name).cloned(),
            relay: Relay::Pipe(name.to_string()),
            name,
            nexthop,
            delimiter: self.config.recipient_delimiter.clone(),
            spool: self.spool.clone(),
        };
        let idle = Duration::from_secs(self.config.delivery.connection_idle_secs.max(1));
        tokio::spawn(run_worker(worker, start, idle, usize::MAX));
    }
}

struct PipeWorker {
    name: Arc<str>,
    /// None: not defined in the configuration the agent was built with.
    transport: Option<TransportConfig>,
    nexthop: String,
    relay: Relay,
    delimiter: String,
    spool: Spool,
}

impl WorkerSession for PipeWorker {
    async fn attempt(&mut self, job: &Job) -> Attempt {
        let results = match body::load(&self.spool, &job.body, job.body_ref).await {
            Ok(body) => self.deliver(job, &body).await,
            Err(e) => {
                let text = format!("cannot read queue file: {e}");
                defer_all(job, &self.relay, &own(451, (4, 3, 0), text))
            }
        };
        Attempt {
            results,
            feedback: Feedback::Ok,
        }
    }

    async fn close(self) {}
}

impl PipeWorker {
    async fn deliver(&self, job: &Job, body: &[u8]) -> Vec<(u16, Outcome)> {
        let t = match &self.transport {
            Some(t) if t.service == Service::Pipe && t.user.is_some() => t,
            _ => {
                let text = format!(
                    "mail system configuration error: transport {} is not a pipe",
                    self.name
                );
                return defer_all(job, &self.relay, &own(451, (4, 3, 5), text));
            }
        };
        if t.size_limit != 0 && body.len() as u64 > t.size_limit {
            let text = "message too large".to_string();
            return bounce_all(job, &self.relay, &own(550, (5, 2, 3), text));
        }
        let mut results = Vec::with_capacity(job.rcpts.len());
        for group in job.rcpts.chunks(t.pipe().recipients().max(1)) {
            let outcome = self.one_command(t, job, group, body).await;
            results.extend(group.iter().map(|&r| (r, outcome.clone())));
        }
        results
    }

    /// Runs the command once for the recipients `group` of `job`.
    async fn one_command(
        &self,
        t: &TransportConfig,
        job: &Job,
        group: &[u16],
        body: &[u8],
    ) -> Outcome {
        let env = &job.envelope;
        let rcpts: Vec<Rcpt<'_>> = group
            .iter()
            .map(|&r| {
                let address = env.recipients[r as usize].as_str();
                let original = env
                    .orig_rcpt
                    .get(r as usize)
                    .filter(|o| !o.is_empty())
                    .map_or(address, String::as_str);
                Rcpt { address, original }
            })
            .collect();
        let first = rcpts.first().map_or("", |r| r.address);
        if t.flags.delivered_to && content::delivered_loop(body, first) {
            let text = format!("mail forwarding loop for {first}");
            return bounced(&self.relay, own(550, (5, 4, 6), text));
        }
        let null = t.null_sender.as_deref().unwrap_or("MAILER-DAEMON");
        let sender = if env.sender.is_empty() {
            null
        } else {
            &env.sender
        };
        let queue_id = crate::log::qid(env.id);
        let values = Values {
            sender,
            nexthop: &self.nexthop,
            queue_id: &queue_id,
            size: body.len() as u64,
            sasl_username: &env.login,
            delimiter: &self.delimiter,
        };
        let user = t.user.as_ref().expect("checked by deliver");
        let command = PipeCommand {
            argv: expand::expand(&t.argv, &values, &rcpts, t.flags),
            uid: user.uid,
            gid: t.group.as_ref().map_or(user.gid, |g| g.gid),
            env: Vec::new(),
            cwd: None,
            time_limit: Duration::from_secs(t.time_limit_secs.max(1)),
            label: None,
        };
        let stdin = content::input(
            body,
            &Envelope {
                sender,
                recipient: first,
                original: rcpts.first().map_or("", |r| r.original),
                now: crate::timefmt::now_millis() / 1000,
            },
            t.flags,
        );
        match super::run(&command, &stdin).await {
            PipeOutcome::Sent { output } => {
                let text = match output.is_empty() {
                    true => format!("delivered via {} service", self.name),
                    false => format!("delivered via {} service ({output})", self.name),
                };
                Outcome::Delivered {
                    relay: self.relay.clone(),
                    reply: Reply::own(250, Some(Enhanced::SENT), text),
                    notified: false,
                }
            }
            PipeOutcome::Deferred(reply) => Outcome::Deferred {
                relay: self.relay.clone(),
                reply,
            },
            PipeOutcome::Bounced(reply) => bounced(&self.relay, reply),
        }
    }
}

fn bounced(relay: &Relay, reply: Reply) -> Outcome {
    Outcome::Bounced {
        relay: relay.clone(),
        reply,
    }
}

fn own(code: u16, (c, s, d): (u8, u8, u8), text: String) -> Reply {
    Reply::own(code, Enhanced::new(c, s, d), text)
}
