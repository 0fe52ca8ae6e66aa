//! The simulated world around a `QueueCore`: the simulation plays the
//! driver (`scheduler.rs`) itself, synchronously. It owns the clock, a
//! real spool in a temporary directory, the workers (the job each is on
//! and the one handed to it), the answers still to come (envelopes read
//! back, notices stored, lookups, grown leases: each delivered by a later
//! step, which one chosen by the seed) and the cluster's caps; it carries
//! out every action the core returns and checks what it can only see
//! there (a worker started over the allowance, a recipient handed out
//! after it was final, an answer to no request).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_spool::{Envelope, Spool, SpoolConfig};

use super::model::{FakeCaps, Records, Rng, Write};
use crate::config::hop::NextHop;
use crate::config::Config;
use crate::log::Logger;
use crate::message::flags::MARK_DELAY_WARNED;
use crate::message::status::{Enhanced, Outcome, Relay, Reply};
use crate::queue::admin::{AdminRequest, Op};
use crate::queue::core::AdminState;
use crate::queue::dispatch::QueueCore;
use crate::queue::job::{Feedback, Job, JobReport, WorkerId};
use crate::queue::step::{Action, Clock, Input, ReadBack, Ticket};
use crate::queue::QueuedMessage;
use crate::record::bounce::dsn::Notice;
use crate::routing::domains::LocalDomains;
use crate::routing::Router;

/// The recipients' domains: bracketed SMTP, a slow one, LMTP, and two
/// routed by MX (looked up for rollup).
const DOMAINS: [&str; 5] = ["c.test", "slow.test", "box.test", "d.test", "e.test"];

/// The wall clock at the simulation's start (Unix milliseconds).
const EPOCH_MS: u64 = 1_800_000_000_000;

pub(super) fn config(data_dir: &std::path::Path) -> Config {
    let mut config = Config {
        data_dir: data_dir.to_path_buf(),
        ..Config::default()
    };
    let routes = [
        ("c.test", "smtp:[127.0.0.1]:1"),
        ("slow.test", "smtp:[127.0.0.2]:1"),
        ("box.test", "lmtp:[127.0.0.3]:24"),
    ];
    for (domain, hop) in routes {
        config.transport.insert(domain.into(), hop.parse().unwrap());
    }
    config.queue.active_limit = 8;
    config.queue.minimal_backoff_secs = 60;
    config.queue.maximal_backoff_secs = 600;
    config.queue.maximal_lifetime_secs = 3000;
    config.delivery.initial_concurrency = 1;
    config.delivery.default_concurrency = 3;
    config.delivery.recipients_per_transaction = 2;
    config.spool.body_cache_mib = 0;
    config
}

fn router(config: &Config) -> Router {
    Router::new(&config.transport, None, LocalDomains::none())
}

fn spool_config(dir: &std::path::Path) -> SpoolConfig {
    SpoolConfig {
        dir: dir.join("spool"),
        sync: false,
        segment_bytes: 1 << 20,
        reserve_bytes: 0,
    }
}

/// The group the MX-routed domains may share (a lookup's answer).
fn group() -> Arc<NextHop> {
    let hop = crate::queue::rollup::group_hop(&[(10, "mx.test")], 25);
    Arc::new(hop.expect("a group hop"))
}

/// A worker as the simulation plays it.
struct Worker {
    dest: Arc<str>,
    /// The job it is on (none: idle).
    job: Option<Job>,
    /// The job handed to it, not yet taken (its channel holds one).
    inbox: Option<Job>,
    /// Its sender was dropped: it ends once idle.
    closed: bool,
}

/// An answer the driver would deliver later.
enum Pending {
    Input(Box<Input>),
    /// A delay warning was stored: the message is marked warned.
    Warned(u64),
}

pub(super) struct World {
    pub core: QueueCore,
    pub spool: Spool,
    pub records: Records,
    pub rng: Rng,
    pub crashes: usize,
    config: Config,
    caps: Arc<FakeCaps>,
    rt: tokio::runtime::Runtime,
    start: Instant,
    elapsed: Duration,
    workers: BTreeMap<WorkerId, Worker>,
    pending: Vec<Pending>,
    tickets: BTreeSet<Ticket>,
    next_ticket: Ticket,
    ids: Vec<u64>,
    next_id: u64,
    /// The destination keys the caps may cap.
    keys: Vec<Arc<str>>,
    dir: tempfile::TempDir,
}

impl World {
    pub fn new(seed: u64) -> World {
        let dir = tempfile::Builder::new()
            .prefix("sluice-sim-")
            .tempdir()
            .unwrap();
        let (spool, _, _) = Spool::open(spool_config(dir.path())).unwrap();
        let config = config(dir.path());
        let mut keys: Vec<Arc<str>> = DOMAINS
            .iter()
            .filter_map(|d| router(&config).route("", &format!("r@{d}")))
            .map(|hop| hop.key().into())
            .collect();
        keys.push(group().key().into());
        let start = Instant::now();
        let clock = Clock {
            at: start,
            unix_ms: EPOCH_MS,
        };
        let caps = Arc::new(FakeCaps::default());
        let core = new_core(&config, &caps, clock);
        World {
            core,
            spool,
            records: Records::default(),
            rng: Rng::new(seed),
            crashes: 0,
            config,
            caps,
            rt: tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap(),
            start,
            elapsed: Duration::ZERO,
            workers: BTreeMap::new(),
            pending: Vec::new(),
            tickets: BTreeSet::new(),
            next_ticket: 0,
            ids: Vec::new(),
            next_id: 1 << 40,
            keys,
            dir,
        }
    }

    fn clock(&self) -> Clock {
        Clock {
            at: self.start + self.elapsed,
            unix_ms: EPOCH_MS + self.elapsed.as_millis() as u64,
        }
    }

    /// Workers (live or closing), and those on a job.
    pub fn workers(&self) -> (usize, usize) {
        let busy = self.workers.values().filter(|w| w.job.is_some()).count();
        (self.workers.len(), busy)
    }

    /// Hands `input` to the core and carries out its actions, as the
    /// driver's `step` does: jobs a worker could not take go back after.
    fn feed(&mut self, input: Input) {
        let looked_at = match &input {
            Input::Leased(key) => Some(key.clone()),
            Input::Report(JobReport::Done { dest, .. } | JobReport::Exit { dest, .. }) => {
                Some(dest.clone())
            }
            _ => None,
        };
        let mut unsent = Vec::new();
        for action in self.core.handle(self.clock(), input) {
            self.execute(action, &mut unsent);
        }
        if let Some(key) = looked_at {
            if let Err(e) = self.core.check_shed(&key) {
                self.records.errors.push(e);
            }
        }
        for (dest, job) in unsent {
            self.feed(Input::Unsent { dest, job });
        }
    }

    fn execute(&mut self, action: Action, unsent: &mut Vec<(Arc<str>, Job)>) {
        match action {
            Action::Record {
                id,
                rcpts,
                complete,
            } => self.records.record(id, rcpts, complete),
            Action::Attempt { id, attempt } => self
                .records
                .queued
                .push_back(Write::Attempt { id, attempt }),
            Action::Marks { id, marks } => {
                self.records.queued.push_back(Write::Marks { id, marks })
            }
            Action::ReadBack(batch) => {
                let loaded = batch
                    .into_iter()
                    .map(|(id, body)| (id, self.spool.read_envelope(body).map_err(ReadBack::Io)))
                    .collect();
                self.pending
                    .push(Pending::Input(Box::new(Input::Loaded(loaded))));
            }
            Action::Start {
                worker,
                dest,
                first,
                ..
            } => self.start(worker, dest, first),
            Action::Hand { dest, worker, job } => match self.workers.get_mut(&worker) {
                Some(w) if !w.closed && w.inbox.is_none() => w.inbox = Some(job),
                _ => unsent.push((dest, job)),
            },
            Action::Close(worker) => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    w.closed = true;
                }
            }
            Action::Notice {
                original,
                kind,
                stored_for,
                ..
            } => {
                let msg = original.0.id;
                if kind == Notice::Delayed {
                    self.pending.push(Pending::Warned(msg));
                }
                if let Some(recipients) = stored_for {
                    let stored = Input::BounceStored { msg, recipients };
                    self.pending.push(Pending::Input(Box::new(stored)));
                }
            }
            Action::Resolve { dest, .. } => {
                let group = (self.rng.below(2) == 0).then(group);
                let resolved = Input::Resolved { dest, group };
                self.pending.push(Pending::Input(Box::new(resolved)));
            }
            Action::SaveHolds(save) => self.save(save),
            Action::Answer { ticket, after, .. } => {
                if !self.tickets.remove(&ticket) {
                    let e = format!("an answer to ticket {ticket}, not asked or answered");
                    self.records.errors.push(e);
                }
                if let Some(save) = after {
                    self.save(save);
                }
            }
            Action::Flushed | Action::Backlog(_) | Action::FlowLimits { .. } => {}
            Action::Drained(_) => self.records.errors.push("drained, never asked".into()),
        }
    }

    fn save(&mut self, save: crate::queue::core::HoldSave) {
        if let Err(e) = save() {
            self.records.errors.push(format!("cannot save holds: {e}"));
        }
    }

    /// A worker starts: never over the destination's allowance.
    fn start(&mut self, worker: WorkerId, dest: Arc<str>, first: Job) {
        if let Some(allowed) = self.caps.allowed(&dest) {
            let held = self.workers.values().filter(|w| w.dest == dest).count();
            if held >= allowed {
                let e = format!("{dest}: worker {worker} started holding {held} of {allowed}");
                self.records.errors.push(e);
            }
        }
        self.records.take_job(&first);
        let w = Worker {
            dest,
            job: Some(first),
            inbox: None,
            closed: false,
        };
        self.workers.insert(worker, w);
    }

    /// One input chosen by the seed, then the end of the round; its name,
    /// for a reproduction.
    pub fn step(&mut self) -> &'static str {
        let what = match self.rng.below(32) {
            0..=5 => self.arrive(),
            6..=15 => self.report(),
            16..=19 if !self.pending.is_empty() => self.answer(),
            20 => self.worker_ends(),
            21 => self.admin(),
            22 if self.rng.below(8) == 0 => self.reload(),
            23 if self.rng.below(12) == 0 => self.crash(),
            24 => self.lease(),
            25 => {
                self.feed(Input::Timers);
                "timers"
            }
            26 | 27 => {
                let n = self.rng.below(self.records.queued.len() + 1);
                self.records.flush(&self.spool, n);
                "writer commits"
            }
            _ => {
                let secs = [1, 5, 30, 61, 400][self.rng.below(5)];
                self.elapsed += Duration::from_secs(secs);
                "time passes"
            }
        };
        self.feed(Input::RoundEnd);
        self.pick_up();
        what
    }

    fn arrive(&mut self) -> &'static str {
        // A store waits for everything queued ahead of it.
        let all = self.records.queued.len();
        self.records.flush(&self.spool, all);
        let n = 1 + self.rng.below(3);
        let recipients = (0..n)
            .map(|i| format!("r{i}@{}", DOMAINS[self.rng.below(DOMAINS.len())]))
            .collect();
        // One message in eight is already past the queue lifetime.
        let old = [0, 0, 0, 0, 0, 0, 0, 10_000_000][self.rng.below(8)];
        self.next_id += 1;
        let envelope = Envelope {
            id: self.next_id,
            arrival: self.clock().unix_ms - old,
            sender: ["a@b.test", ""][usize::from(self.rng.below(8) == 0)].into(),
            recipients,
            flags: 0,
            dsn: None,
            orig_rcpt: Vec::new(),
            login: String::new(),
            ..Default::default()
        };
        let body = Arc::new(vec![b'x'; 64]);
        let store = self.spool.store(envelope.clone(), body.clone());
        let body_ref = self.rt.block_on(store).expect("stored");
        self.records.stored(envelope.id, n);
        self.ids.push(envelope.id);
        self.feed(Input::Queued(QueuedMessage {
            envelope,
            body_ref,
            body: Some(body),
            done: vec![false; n],
        }));
        "arrival"
    }

    /// A busy worker reports its job with random outcomes.
    fn report(&mut self) -> &'static str {
        let busy: Vec<WorkerId> = (self.workers.iter())
            .filter(|(_, w)| w.job.is_some())
            .map(|(&id, _)| id)
            .collect();
        if busy.is_empty() {
            return "report (none busy)";
        }
        let id = busy[self.rng.below(busy.len())];
        let w = self.workers.get_mut(&id).expect("busy");
        let (job, dest) = (w.job.take().expect("busy"), w.dest.clone());
        let results = job
            .rcpts
            .iter()
            .map(|&r| (r, outcome(self.rng.below(6))))
            .collect();
        let feedback = match self.rng.below(8) {
            0 => Feedback::Throttled,
            1 => Feedback::ConnectFailed,
            _ => Feedback::Ok,
        };
        let wants_more = feedback == Feedback::Ok && self.rng.below(3) > 0;
        self.feed(Input::Report(JobReport::Done {
            dest,
            worker: id,
            msg: job.msg,
            results,
            feedback,
            wants_more,
        }));
        if !wants_more {
            self.exit(id);
        }
        "report"
    }

    /// Worker `id` ends, handing back the jobs it had not started.
    fn exit(&mut self, id: WorkerId) {
        let Some(w) = self.workers.remove(&id) else {
            return;
        };
        let returned = w.job.into_iter().chain(w.inbox).collect();
        self.feed(Input::Report(JobReport::Exit {
            dest: w.dest,
            worker: id,
            returned,
        }));
    }

    /// An idle worker ends (its connection dropped, or its sender did).
    fn worker_ends(&mut self) -> &'static str {
        let idle: Vec<WorkerId> = (self.workers.iter())
            .filter(|(_, w)| w.job.is_none())
            .map(|(&id, _)| id)
            .collect();
        if idle.is_empty() {
            return "worker ends (none idle)";
        }
        let k = self.rng.below(idle.len());
        self.exit(idle[k]);
        "idle worker ends"
    }

    /// Idle workers take the job handed to them; closed idle ones end
    /// (now or at a later step).
    fn pick_up(&mut self) {
        let ids: Vec<WorkerId> = self.workers.keys().copied().collect();
        for id in ids {
            let w = self.workers.get_mut(&id).expect("listed");
            if w.job.is_some() {
                continue;
            }
            if let Some(job) = w.inbox.take() {
                self.records.take_job(&job);
                w.job = Some(job);
            } else if w.closed && self.rng.below(2) == 0 {
                self.exit(id);
            }
        }
    }

    /// One of the answers still to come arrives.
    fn answer(&mut self) -> &'static str {
        let k = self.rng.below(self.pending.len());
        match self.pending.remove(k) {
            Pending::Warned(id) => {
                let marks = MARK_DELAY_WARNED;
                self.records.queued.push_back(Write::Marks { id, marks });
                "warning stored"
            }
            Pending::Input(input) => {
                let input = *input;
                if let Input::Leased(key) = &input {
                    let n = self.records.leasing.get_mut(&**key).expect("counted");
                    *n -= 1;
                    if *n == 0 {
                        self.records.leasing.remove(&**key);
                    }
                }
                let what = match &input {
                    Input::Loaded(_) => "envelopes read back",
                    Input::BounceStored { .. } => "bounce stored",
                    Input::Resolved { .. } => "mail hosts looked up",
                    Input::Leased(_) => "lease grown",
                    _ => "answer",
                };
                self.feed(input);
                what
            }
        }
    }

    fn admin(&mut self) -> &'static str {
        let ops = [Op::Delete, Op::Hold, Op::Release, Op::Bounce, Op::Requeue];
        let ids = match self.ids.is_empty() || self.rng.below(10) == 0 {
            true => None,
            false => Some(vec![self.ids[self.rng.below(self.ids.len())]]),
        };
        let request = match self.rng.below(8) {
            5 => AdminRequest::Flush(ids),
            6 => AdminRequest::Snapshot,
            7 => AdminRequest::Stats,
            n => AdminRequest::Apply(ops[n], ids),
        };
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.tickets.insert(ticket);
        self.feed(Input::Admin { ticket, request });
        "admin"
    }

    fn reload(&mut self) -> &'static str {
        let config = Arc::new(self.config.clone());
        let router = router(&config);
        let fresh_agents = self.rng.below(2) == 0;
        self.feed(Input::Reconfigure {
            config,
            router,
            fresh_agents,
            resolves: true,
        });
        "reload"
    }

    /// The cluster changes a destination's cap or this node's share; a
    /// grown one is told (`Input::Leased`, later).
    fn lease(&mut self) -> &'static str {
        let key = self.keys[self.rng.below(self.keys.len())].clone();
        let before = self.caps.allowed(&key).unwrap_or(usize::MAX);
        let grant = match self.rng.below(3) {
            0 => None,
            _ => Some((3, [0, 1, 1, 2, 3][self.rng.below(5)])),
        };
        {
            let mut grants = self.caps.grants.lock().unwrap();
            match grant {
                Some(g) => grants.insert(key.to_string(), g),
                None => grants.remove(&*key),
            };
        }
        if self.caps.allowed(&key).unwrap_or(usize::MAX) > before {
            *self.records.leasing.entry(key.to_string()).or_default() += 1;
            self.pending
                .push(Pending::Input(Box::new(Input::Leased(key))));
            return "lease grows";
        }
        "lease shrinks or stays"
    }

    /// A SIGKILL: the core, the answers to come and the workers are gone;
    /// the writer had taken a prefix of what was queued for it. The spool
    /// is opened again and what it recovers goes to a new core.
    fn crash(&mut self) -> &'static str {
        let kept = self.rng.below(self.records.queued.len() + 1);
        self.records.crash(&self.spool, kept);
        // What the writer took reached the file (a crash keeps the page
        // cache); stopping it makes sure of that before reopening.
        self.spool.shutdown();
        self.workers.clear();
        self.pending.clear();
        self.tickets.clear();
        let (spool, mut found, _) = Spool::open(spool_config(self.dir.path())).unwrap();
        self.spool = spool;
        self.records.check_recovered(&found);
        found.sort_by_key(|r| r.id);
        self.core = new_core(&self.config, &self.caps, self.clock());
        self.feed(Input::Recovered(found));
        self.crashes += 1;
        "crash and recovery"
    }
}

/// A new core as the daemon makes one at start-up.
pub(super) fn new_core(config: &Config, caps: &Arc<FakeCaps>, clock: Clock) -> QueueCore {
    let admin = AdminState::load(&config.data_dir);
    let logger = Logger::disabled();
    let mut core = QueueCore::new(
        Arc::new(config.clone()),
        router(config),
        logger,
        admin,
        clock,
    );
    core.set_caps(caps.clone());
    core.set_resolves(true);
    core
}

/// A recipient's outcome, by a roll of a six-sided die.
pub(super) fn outcome(roll: usize) -> Outcome {
    let relay = Relay::Smtp {
        host: "mx".into(),
        addr: "127.0.0.1:1".parse().expect("an address"),
    };
    match roll {
        0..=2 => Outcome::Delivered {
            relay,
            reply: Reply::smtp(250, None, "ok"),
            notified: false,
        },
        3 | 4 => Outcome::Deferred {
            relay,
            reply: Reply::smtp(451, Enhanced::new(4, 3, 0), "try later"),
        },
        _ => Outcome::Bounced {
            relay,
            reply: Reply::smtp(550, Enhanced::new(5, 1, 1), "no such user"),
        },
    }
}
