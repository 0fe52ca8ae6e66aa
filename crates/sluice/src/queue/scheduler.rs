//! The queue's driver: it owns the queue's channel and everything that
//! does I/O for the core (`dispatch.rs`, a state machine that only
//! decides): it turns each event into an `Input` at the current time,
//! hands it to `QueueCore::handle`, and carries out the actions that come
//! back, in order: spool records, workers started, jobs handed to them,
//! envelopes read back and notices stored (on other tasks, whose answers
//! come back as events), administrators answered.
//!
//! It runs on a thread of its own ([`Scheduler::spawn`]) with its own
//! small runtime for waiting, so a spool write that blocks (group commit
//! under load) holds only this thread, never a worker of the shared
//! runtime; what it starts (workers, read-backs, notices, lookups) runs on
//! the shared runtime.
//!
//! Trust: events come from the queue's own handles and workers.
//!
//! Invariants: the actions of one input are carried out before the next
//! input is handled; a job handed to a worker that is gone comes back to
//! the core (`Input::Unsent`) after the other actions of its input; every
//! read-back, notice with `stored_for` and lookup answers with exactly
//! one event; the driver keeps no strong sender to its own channel, so
//! the run ends once every handle and worker is gone.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope, Spool};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use super::admin::AdminReply;
use super::agent::{DeliveryAgent, WorkerStart};
use super::core::AdminState;
use super::dispatch::QueueCore;
use super::job::{Job, JobReport, Reporter, WorkerId};
use super::rollup::SecureMx;
use super::step::{Action, Clock, HoldSave, Input, Original, ReadBack, Ticket};
use super::{DrainReport, Event, QueueHandle};
use crate::config::Config;
use crate::log::{Event as Logged, Logger};
use crate::message::flags;
use crate::message::status::Failure;
use crate::record::bounce;
use crate::record::bounce::dsn::Notice;
use crate::routing::dns::Dns;
use crate::routing::Router;

/// Events handled in one go before timers (retries, drain deadline) are
/// looked at again: sustained input must not starve retries.
const MAX_BURST: usize = 256;

pub struct Scheduler {
    /// The decisions (public to the queue's tests and simulation).
    pub(super) core: QueueCore,
    spool: Spool,
    logger: Logger,
    agent: Arc<dyn DeliveryAgent>,
    /// The queue's own channel, for what the driver starts to answer on.
    events: mpsc::WeakSender<Event>,
    /// Where notices (bounces, delay warnings) go in, as all mail does.
    intake: Arc<crate::intake::Intake>,
    /// Local delivery's backlog, published after every round of events.
    flow: Arc<crate::intake::flow::InFlow>,
    dns: Option<Arc<Dns>>,
    secure_mx: Option<SecureMx>,
    /// The job sender of each live worker (dropped: the worker ends once
    /// idle).
    senders: HashMap<WorkerId, mpsc::Sender<Job>>,
    /// Administrators waiting for an answer.
    tickets: HashMap<Ticket, oneshot::Sender<AdminReply>>,
    next_ticket: Ticket,
    drain_done: Option<oneshot::Sender<DrainReport>>,
    /// The drain is over: the run ends.
    over: bool,
    /// The runtime what the driver starts runs on, when the driver has a
    /// thread of its own (otherwise the one it runs on).
    shared: Option<Handle>,
}

/// The time now as the core sees it (the tokio clock, which tests pause).
fn clock() -> Clock {
    Clock {
        at: tokio::time::Instant::now().into_std(),
        unix_ms: crate::timefmt::now_millis(),
    }
}

impl Scheduler {
    pub fn new(
        config: Arc<Config>,
        router: Router,
        spool: Spool,
        logger: Logger,
        agent: Arc<dyn DeliveryAgent>,
        queue: &QueueHandle,
        intake: Arc<crate::intake::Intake>,
    ) -> Scheduler {
        let admin = AdminState::load(&config.data_dir);
        let flow = queue.flow();
        let q = &config.queue;
        flow.configure(q.in_flow_limit, q.in_flow_delay_ms);
        let core = QueueCore::new(config, router, logger.clone(), admin, clock());
        Scheduler {
            core,
            spool,
            logger,
            agent,
            events: queue.sender().downgrade(),
            intake,
            flow,
            dns: None,
            secure_mx: None,
            senders: HashMap::new(),
            tickets: HashMap::new(),
            next_ticket: 0,
            drain_done: None,
            over: false,
            shared: None,
        }
    }

    /// Runs the driver on a thread of its own (see the head comment);
    /// what it starts goes to the runtime this is called on. The receiver
    /// resolves when the run has ended.
    pub fn spawn(mut self, rx: mpsc::Receiver<Event>) -> std::io::Result<oneshot::Receiver<()>> {
        self.shared = Some(Handle::current());
        let (ended, end) = oneshot::channel();
        std::thread::Builder::new()
            .name("sluice-qmgr".into())
            .spawn(move || {
                let own = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .expect("a runtime for the queue's driver");
                own.block_on(self.run(rx));
                let _ = ended.send(());
            })?;
        Ok(end)
    }

    pub async fn run(mut self, mut rx: mpsc::Receiver<Event>) {
        loop {
            // Timers first: a due retry never waits behind queued events.
            self.step(Input::Timers);
            let wake = self.core.next_wakeup();
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => self.handle(ev),
                    None => return,
                },
                _ = sleep_until(wake) => {}
            }
            for _ in 0..MAX_BURST {
                match rx.try_recv() {
                    Ok(ev) => self.handle(ev),
                    Err(_) => break,
                }
            }
            self.after_events();
            if self.over {
                return;
            }
        }
    }

    /// The end of a round of events (`Input::RoundEnd`).
    pub(super) fn after_events(&mut self) {
        self.step(Input::RoundEnd);
    }

    /// One event from the channel, as an input to the core.
    pub(super) fn handle(&mut self, event: Event) {
        let input = match event {
            Event::Queued(msg) => Input::Queued(msg),
            Event::Recovered(batch) => Input::Recovered(batch),
            Event::Loaded(loaded) => Input::Loaded(loaded),
            Event::Report(report) => {
                if let JobReport::Exit { worker, .. } = &report {
                    self.senders.remove(worker);
                }
                Input::Report(report)
            }
            Event::Admin(request, reply) => {
                let ticket = self.next_ticket;
                self.next_ticket += 1;
                self.tickets.insert(ticket, reply);
                Input::Admin { ticket, request }
            }
            Event::Resolved { dest, group } => Input::Resolved { dest, group },
            Event::BounceStored { msg, recipients } => Input::BounceStored { msg, recipients },
            Event::Leased(key) => Input::Leased(key),
            Event::Reconfigure(r) => {
                let same_agent = std::ptr::eq(
                    Arc::as_ptr(&self.agent) as *const (),
                    Arc::as_ptr(&r.agent) as *const (),
                );
                self.agent = r.agent;
                self.dns = Some(r.resolver);
                self.secure_mx = r.secure_mx;
                self.intake = r.intake;
                Input::Reconfigure {
                    config: r.config,
                    router: r.router,
                    fresh_agents: !same_agent,
                    resolves: true,
                }
            }
            Event::Drain { deadline, done } => {
                self.drain_done = Some(done);
                Input::Drain {
                    deadline: deadline.into_std(),
                }
            }
        };
        self.step(input);
    }

    /// Hands `input` to the core and carries out its actions; jobs that
    /// found their worker gone go back to the core afterwards.
    fn step(&mut self, input: Input) {
        // Workers, read-backs, notices and lookups go to the shared runtime.
        let shared = self.shared.clone();
        let _entered = shared.as_ref().map(Handle::enter);
        let mut unsent = Vec::new();
        for action in self.core.handle(clock(), input) {
            if let Some(back) = self.execute(action) {
                unsent.push(back);
            }
        }
        for (dest, job) in unsent {
            self.step(Input::Unsent { dest, job });
        }
    }

    /// Carries out one action; a job a worker could not take is returned.
    fn execute(&mut self, action: Action) -> Option<(Arc<str>, Job)> {
        match action {
            Action::Record {
                id,
                rcpts,
                complete,
            } => self.spool.record_outcome(id, rcpts, complete),
            Action::Attempt { id, attempt } => self.spool.record_attempt(id, attempt),
            Action::Marks { id, marks } => self.spool.record_marks(id, marks),
            Action::ReadBack(batch) => self.read_back(batch),
            Action::Start {
                worker,
                dest,
                hop,
                first,
            } => self.start(worker, dest, hop, first),
            Action::Hand { dest, worker, job } => {
                let sent = match self.senders.get(&worker) {
                    Some(tx) => tx.try_send(job).map_err(|e| e.into_inner()),
                    None => Err(job),
                };
                // The worker is on its way out; its exit report follows.
                return sent.err().map(|job| (dest, job));
            }
            Action::Close(worker) => {
                self.senders.remove(&worker);
            }
            Action::Notice {
                original,
                kind,
                list,
                stored_for,
            } => self.notice(original, kind, list, stored_for),
            Action::Resolve { dest, host, port } => self.resolve(dest, host, port),
            Action::SaveHolds(save) => self.save_holds(save, None),
            Action::Answer {
                ticket,
                reply,
                after,
            } => {
                let to = self.tickets.remove(&ticket)?;
                match after {
                    Some(save) => self.save_holds(save, Some((to, reply))),
                    None => {
                        let _ = to.send(reply);
                    }
                }
            }
            Action::Flushed => self.agent.flushed(),
            Action::Backlog(n) => self.flow.publish(n),
            Action::FlowLimits { limit, delay_ms } => self.flow.configure(limit, delay_ms),
            Action::Drained(report) => {
                if let Some(done) = self.drain_done.take() {
                    let _ = done.send(report);
                }
                self.over = true;
            }
        }
        None
    }

    fn start(
        &mut self,
        id: WorkerId,
        dest: Arc<str>,
        hop: Arc<crate::config::hop::NextHop>,
        first: Job,
    ) {
        let Some(events) = self.events.upgrade() else {
            return;
        };
        let (tx, jobs) = mpsc::channel(1);
        self.senders.insert(id, tx);
        self.agent.spawn(WorkerStart {
            id,
            dest,
            hop,
            first,
            jobs,
            reports: Reporter(events),
        });
    }

    /// Reads parked messages' envelopes on the blocking pool.
    fn read_back(&self, batch: Vec<(u64, BodyRef)>) {
        let (spool, Some(events)) = (self.spool.clone(), self.events.upgrade()) else {
            return;
        };
        tokio::task::spawn_blocking(move || {
            let ids: Vec<u64> = batch.iter().map(|(id, _)| *id).collect();
            let read = || {
                batch
                    .into_iter()
                    .map(|(id, body)| (id, spool.read_envelope(body).map_err(ReadBack::Io)))
                    .collect()
            };
            // Whatever happens, every ID comes back, so the core's count
            // of loads is always paid back and admission never stalls.
            let loaded: Vec<(u64, Result<Envelope, ReadBack>)> =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|_| {
                    ids.into_iter()
                        .map(|id| (id, Err(ReadBack::Panicked)))
                        .collect()
                });
            let _ = events.blocking_send(Event::Loaded(loaded));
        });
    }

    /// Stores a notice through the intake off the driver's thread.
    fn notice(
        &self,
        (env, body, body_ref): Original,
        kind: Notice,
        list: Vec<(u16, Failure)>,
        stored_for: Option<Vec<u16>>,
    ) {
        let (spool, intake) = (self.spool.clone(), self.intake.clone());
        let events = self.events.upgrade();
        tokio::spawn(async move {
            let warned = (kind == Notice::Delayed).then_some(env.id);
            // The intake stores the notice and queues it like any mail.
            let stored = bounce::store(&intake, &env, (body, body_ref), &list, kind).await;
            if let Some(id) = warned.filter(|_| stored) {
                // Only once the warning is safe: a crash in between may
                // repeat it, never lose it. The mark goes out with the
                // spool's next commit (a clean stop flushes it).
                spool.record_marks(id, flags::MARK_DELAY_WARNED);
            }
            if let (Some(recipients), Some(events)) = (stored_for, events) {
                let msg = env.id;
                let _ = events.send(Event::BounceStored { msg, recipients }).await;
            }
        });
    }

    /// Looks up a domain's mail hosts for rollup (none without a resolver:
    /// the domain stays on its own).
    fn resolve(&self, dest: Arc<str>, host: String, port: u16) {
        let Some(events) = self.events.upgrade() else {
            return;
        };
        let (dns, secure_mx) = (self.dns.clone(), self.secure_mx.clone());
        let sts = self.core.config.delivery.mta_sts;
        tokio::spawn(async move {
            let group = match dns {
                Some(dns) => {
                    super::rollup::lookup(&dns, secure_mx.as_ref(), sts, &host, port).await
                }
                None => None,
            };
            let _ = events.send(Event::Resolved { dest, group }).await;
        });
    }

    /// Saves the hold list on the blocking pool, then answers, if asked.
    fn save_holds(&self, save: HoldSave, then: Option<(oneshot::Sender<AdminReply>, AdminReply)>) {
        let logger = self.logger.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = save() {
                let error = e.to_string().into();
                logger.emit(&Logged::HoldListUnsaved { error });
            }
            if let Some((to, reply)) = then {
                let _ = to.send(reply);
            }
        });
    }

    /// Messages in memory, messages waiting on disk, and body bytes
    /// cached (for tests and stats).
    pub fn counts(&self) -> (usize, usize, usize) {
        self.core.counts()
    }

    /// Lets the scheduler look up MX hosts for rollup.
    pub fn set_resolver(&mut self, dns: Arc<Dns>, secure_mx: Option<SecureMx>) {
        self.dns = Some(dns);
        self.secure_mx = secure_mx;
        self.core.set_resolves(true);
    }

    /// Joins a cluster: its caps apply from now on, and a grown grant
    /// pumps the destination again (`leases.rs`).
    pub fn set_cluster(&mut self, cluster: Arc<crate::cluster::Cluster>) {
        let events = self.events.clone();
        cluster.on_grant(Box::new(move |key| {
            // Never dropped for a full queue of events: the destination
            // would wait for its next mail.
            let Some(events) = events.upgrade() else {
                return;
            };
            tokio::spawn(async move {
                let _ = events.send(Event::Leased(key)).await;
            });
        }));
        self.core.set_caps(cluster);
    }
}

async fn sleep_until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
