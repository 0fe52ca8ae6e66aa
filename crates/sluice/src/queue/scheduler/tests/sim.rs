//! A deterministic simulation of the scheduler (issue 36): seeded random
//! interleavings of arrivals, outcomes of every kind (delivered, deferred,
//! bounced; connection failures and throttling), workers that end and
//! hand jobs back, reloads, administrator commands and time passing (a
//! paused clock), driving `Scheduler::handle` directly as the run loop
//! does, and checking after every step the invariants the modules state
//! in their heads:
//! - a message is active or parked, never both; a bounce being stored
//!   belongs to an active message with nothing in flight;
//! - the jobs out equal what the messages count in flight; the cached
//!   body bytes equal the bodies kept; each destination's window is
//!   within its limit, its idle workers are live;
//! - the active queue plus the envelopes being read back stay within
//!   `queue.active_limit` (memory bounded by the configuration);
//! - no recipient is recorded final twice, no message is recorded
//!   complete twice, and no worker is handed a recipient already
//!   recorded final (nothing delivered twice; there are no crashes here);
//! - a message recorded complete is no longer in the queue;
//! - no destination starves: queued jobs have a worker, or wait for a
//!   dead mark, a lookup or a pacing slot, and never beside an idle
//!   worker.
//!
//! - every envelope read back and every bounce handed to the intake comes
//!   back (the counts of those outstanding return to zero).
//!
//! `SIM_STEPS` (default 4,000 per seed) and `SIM_SEEDS` (default 4) make
//! it run longer; `SIM_TRACE` prints each input and the queue's counts. A
//! failure prints the seed and the shortest prefix of its inputs that
//! still fails.
//!
//! Determinism: the inputs are the seed's, the clock is paused and never
//! moves but by an input, message IDs are the simulation's and the
//! destinations' map has a fixed hasher in tests, so a run repeats
//! exactly, with one known exception: bounces are stored on the intake's
//! tasks, so several stored at once may take their IDs (and their place
//! in the line for room) in either order. They are routed to `discard`,
//! which keeps the effect small, but a long run can diverge after such a
//! step; the shrinking then falls back to the whole sequence.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::*;
use crate::queue::admin::{AdminRequest, Op};
use crate::queue::dispatch::QueueCore;

/// A small, fast, seedable generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// What the spool was told, per message.
#[derive(Default)]
struct Records {
    finals: HashMap<u64, HashSet<u16>>,
    complete: HashSet<u64>,
    errors: Vec<String>,
}

impl QueueCore {
    /// The invariants of the head comment that the queue's core holds.
    fn check(&self, records: &Records) -> Result<(), String> {
        self.messages.check()?;
        self.dests.check()?;
        for (id, _) in self.messages.iter() {
            if self.admission.contains(id) {
                return Err(format!("{id:x} both active and parked"));
            }
            if records.complete.contains(&id) {
                return Err(format!("{id:x} recorded complete, still active"));
            }
        }
        for (id, _) in self.admission.iter() {
            if records.complete.contains(&id) {
                return Err(format!("{id:x} recorded complete, still parked"));
            }
        }
        for id in self.notices.ids() {
            match self.messages.get(id) {
                Some(m) if m.in_flight() == 0 => {}
                Some(_) => return Err(format!("{id:x} bouncing with jobs out")),
                None => return Err(format!("{id:x} bouncing, not active")),
            }
        }
        let now = self.clock.at;
        for (key, d) in self.dests.iter() {
            // No destination starves: queued jobs have a worker coming,
            // or a reason to wait (dead, looked up, paced).
            let waits = d.resolving || d.wake_pending || d.dead_until.is_some_and(|u| u > now);
            if !d.queue.is_empty() && d.workers.is_empty() && !waits {
                return Err(format!("{key}: {} jobs queued, no worker", d.queue.len()));
            }
            if !d.queue.is_empty() && !d.idle.is_empty() {
                return Err(format!("{key}: jobs queued beside an idle worker"));
            }
        }
        let held = self.admission.loading() + self.messages.len();
        if held > self.admission.limit() {
            return Err(format!(
                "{held} active or loading over the limit {}",
                self.admission.limit()
            ));
        }
        Ok(())
    }
}

/// One simulated world: the scheduler, its event channel, the workers it
/// started, and what the spool recorded.
struct World {
    s: Scheduler,
    rx: mpsc::Receiver<Event>,
    queue: QueueHandle,
    spool: Spool,
    config: Config,
    spawned: mpsc::UnboundedReceiver<WorkerStart>,
    tx: mpsc::UnboundedSender<WorkerStart>,
    /// Workers and the job each is on (none: idle, waiting for one).
    workers: Vec<(WorkerStart, Option<Job>)>,
    records: Arc<Mutex<Records>>,
    ids: Vec<u64>,
    next_id: u64,
    _dir: tempfile::TempDir,
}

fn config() -> Config {
    let mut config = Config::default();
    config
        .transport
        .insert("*".into(), "smtp:[127.0.0.1]:1".parse().unwrap());
    config
        .transport
        .insert("slow.test".into(), "smtp:[127.0.0.2]:1".parse().unwrap());
    config
        .transport
        .insert("box.test".into(), "lmtp:[127.0.0.3]:24".parse().unwrap());
    // Where bounces go (the senders' domain): nowhere, at once, so that
    // notices stored on the intake's tasks (IDs and order not the
    // simulation's) leave no trace in what follows.
    config
        .transport
        .insert("b.test".into(), "discard:".parse().unwrap());
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

async fn world() -> World {
    let dir = tempfile::Builder::new()
        .prefix("sluice-sim-")
        .tempdir()
        .unwrap();
    let (spool, _, _) = Spool::open(SpoolConfig {
        dir: dir.path().join("spool"),
        sync: false,
        segment_bytes: 1 << 20,
        reserve_bytes: 0,
    })
    .unwrap();
    let records: Arc<Mutex<Records>> = Arc::default();
    let seen = records.clone();
    spool.observe_outcomes(Arc::new(
        move |id: u64, rcpts: &[u16], complete: bool, _marks: u32| {
            let mut r = seen.lock().unwrap();
            for &i in rcpts {
                if !r.finals.entry(id).or_default().insert(i) {
                    r.errors
                        .push(format!("{id:x}: recipient {i} recorded final twice"));
                }
            }
            if complete && !r.complete.insert(id) {
                r.errors.push(format!("{id:x}: recorded complete twice"));
            }
        },
    ));
    let mut config = config();
    config.data_dir = dir.path().to_path_buf();
    let router = Router::new(&config.transport, None, LocalDomains::none());
    let (tx, spawned) = mpsc::unbounded_channel();
    let (queue, rx) = QueueHandle::channel();
    let s = Scheduler::new(
        Arc::new(config.clone()),
        router,
        spool.clone(),
        Logger::disabled(),
        Arc::new(FakeAgent(tx.clone())),
        &queue,
        intake(&config, &spool, &queue),
    );
    World {
        s,
        rx,
        queue,
        spool,
        config,
        spawned,
        tx,
        workers: Vec::new(),
        records,
        ids: Vec::new(),
        next_id: 1 << 40,
        _dir: dir,
    }
}

const DOMAINS: [&str; 4] = ["c.test", "slow.test", "box.test", "d.test"];

impl World {
    /// Handles what the scheduler's own tasks sent (envelopes read back,
    /// notices stored) until none is outstanding, then the end of the
    /// round as the run loop does it.
    async fn settle(&mut self) -> Result<(), String> {
        // Loads and bounces come back within milliseconds; not within
        // this, never (a load or bounce the scheduler lost count of).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            while let Ok(ev) = self.rx.try_recv() {
                self.s.handle(ev);
                self.s.after_events();
            }
            if self.s.core.admission.loading() == 0 && self.s.core.notices.out() == 0 {
                break;
            }
            // Waits by yielding, never idle: an idle runtime on a paused
            // clock would move the clock to the intake's next timer.
            let ev = loop {
                if let Ok(ev) = self.rx.try_recv() {
                    break ev;
                }
                if std::time::Instant::now() > deadline {
                    return Err(format!(
                        "stuck: {} loads and {} bounces never came back",
                        self.s.core.admission.loading(),
                        self.s.core.notices.out()
                    ));
                }
                tokio::task::yield_now().await;
            };
            self.s.handle(ev);
            self.s.after_events();
        }
        self.s.after_events();
        while let Ok(w) = self.spawned.try_recv() {
            let first = Job {
                msg: w.first.msg,
                envelope: w.first.envelope.clone(),
                body: None,
                body_ref: w.first.body_ref,
                rcpts: w.first.rcpts.clone(),
            };
            self.take_job(&first);
            self.workers.push((w, Some(first)));
        }
        Ok(())
    }

    /// A worker is handed `job`: none of its recipients may be final.
    fn take_job(&self, job: &Job) {
        let mut r = self.records.lock().unwrap();
        let done = r.finals.get(&job.msg).cloned().unwrap_or_default();
        for i in &job.rcpts {
            if done.contains(i) {
                r.errors.push(format!(
                    "{:x}: recipient {i} handed out after final",
                    job.msg
                ));
            }
        }
    }

    async fn arrive(&mut self, rng: &mut Rng) {
        let n = 1 + rng.below(3);
        let recipients = (0..n)
            .map(|i| format!("r{i}@{}", DOMAINS[rng.below(DOMAINS.len())]))
            .collect();
        // Its own IDs (the spool's start at the clock): the backoff's
        // jitter derives from them. One message in eight is already past
        // the queue lifetime (3000 s; the wall clock stands still here).
        self.next_id += 1;
        let old = [0, 0, 0, 0, 0, 0, 0, 10_000_000][rng.below(8)];
        let envelope = Envelope {
            id: self.next_id,
            arrival: timefmt::now_millis() - old,
            sender: ["a@b.test", ""][usize::from(rng.below(8) == 0)].into(),
            recipients,
            flags: 0,
            dsn: None,
            orig_rcpt: Vec::new(),
        };
        let body = Arc::new(vec![b'x'; 64]);
        let store = self.spool.store(envelope.clone(), body.clone());
        let body_ref = never_idle(store).await.unwrap();
        self.ids.push(envelope.id);
        self.s.handle(Event::Queued(QueuedMessage {
            envelope,
            body_ref,
            body: Some(body),
            done: vec![false; n],
        }));
    }

    /// A busy worker reports its job with random outcomes.
    fn report(&mut self, rng: &mut Rng) {
        let busy: Vec<usize> = (0..self.workers.len())
            .filter(|&i| self.workers[i].1.is_some())
            .collect();
        if busy.is_empty() {
            return;
        }
        let k = busy[rng.below(busy.len())];
        let job = self.workers[k].1.take().expect("busy");
        let results = job
            .rcpts
            .iter()
            .map(|&r| {
                let relay = mx();
                let outcome = match rng.below(6) {
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
                };
                (r, outcome)
            })
            .collect();
        let feedback = [
            Feedback::Ok,
            Feedback::Ok,
            Feedback::Throttled,
            Feedback::ConnectFailed,
        ][rng.below(4)];
        let wants_more = feedback == Feedback::Ok && rng.below(3) > 0;
        let w = &self.workers[k].0;
        self.s.handle(Event::Report(JobReport::Done {
            dest: w.dest.clone(),
            worker: w.id,
            msg: job.msg,
            results,
            feedback,
            wants_more,
        }));
        if !wants_more {
            self.exit(k);
        }
    }

    /// Idle workers pick up a job handed to them.
    fn pick_up(&mut self) {
        for k in 0..self.workers.len() {
            if self.workers[k].1.is_none() {
                if let Ok(job) = self.workers[k].0.jobs.try_recv() {
                    self.take_job(&job);
                    self.workers[k].1 = Some(job);
                }
            }
        }
    }

    /// Worker `k` ends, handing back the jobs it had not started.
    fn exit(&mut self, k: usize) {
        let (mut w, job) = self.workers.swap_remove(k);
        let mut returned: Vec<Job> = job.into_iter().collect();
        w.jobs.close();
        while let Ok(job) = w.jobs.try_recv() {
            returned.push(job);
        }
        self.s.handle(Event::Report(JobReport::Exit {
            dest: w.dest.clone(),
            worker: w.id,
            returned,
        }));
    }

    fn admin(&mut self, rng: &mut Rng) {
        let ops = [Op::Delete, Op::Hold, Op::Release, Op::Bounce, Op::Requeue];
        let ids = match self.ids.is_empty() || rng.below(10) == 0 {
            true => None,
            false => Some(vec![self.ids[rng.below(self.ids.len())]]),
        };
        let request = match rng.below(6) {
            5 => AdminRequest::Flush(ids),
            n => AdminRequest::Apply(ops[n], ids),
        };
        let (reply, _wait) = oneshot::channel();
        self.s.handle(Event::Admin(request, reply));
    }

    fn reload(&mut self) {
        let config = self.config.clone();
        let reconfig = crate::queue::Reconfig {
            intake: intake(&config, &self.spool, &self.queue),
            router: Router::new(&config.transport, None, LocalDomains::none()),
            resolver: Arc::new(crate::routing::dns::Dns::new(&config.dns).unwrap()),
            config: Arc::new(config),
            agent: Arc::new(FakeAgent(self.tx.clone())),
            secure_mx: None,
        };
        self.s.handle(Event::Reconfigure(Box::new(reconfig)));
    }

    /// One input chosen by `rng`; its name, for a reproduction.
    async fn step(&mut self, rng: &mut Rng) -> Result<&'static str, String> {
        let what = match rng.below(20) {
            0..=5 => {
                self.arrive(rng).await;
                "arrival"
            }
            6..=12 => {
                self.report(rng);
                "report"
            }
            13 if !self.workers.is_empty() => {
                let k = rng.below(self.workers.len());
                if self.workers[k].1.is_none() {
                    self.exit(k);
                }
                "idle worker ends"
            }
            14 => {
                self.admin(rng);
                "admin"
            }
            15 if rng.below(10) == 0 => {
                self.reload();
                "reload"
            }
            _ => {
                let secs = [1, 5, 30, 61, 400][rng.below(5)];
                tokio::time::advance(Duration::from_secs(secs)).await;
                "time passes"
            }
        };
        self.settle().await?;
        self.pick_up();
        Ok(what)
    }

    fn check(&self) -> Result<(), String> {
        let records = self.records.lock().unwrap();
        if let Some(e) = records.errors.first() {
            return Err(e.clone());
        }
        self.s.core.check(&records)
    }
}

/// Runs `steps` inputs from `seed`: how many messages were recorded
/// complete and recipients final, or the failure and the inputs up to it.
async fn run(seed: u64, steps: usize) -> Result<(usize, usize), (String, Vec<&'static str>)> {
    let mut w = world().await;
    let start = Instant::now();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut inputs = Vec::new();
    for _ in 0..steps {
        let what = w.step(&mut rng).await;
        inputs.push(*what.as_ref().unwrap_or(&"stuck"));
        if let Err(e) = what {
            return Err((e, inputs));
        }
        if std::env::var_os("SIM_TRACE").is_some() {
            let (a, p, b) = w.s.counts();
            eprintln!(
                "{} {:?} active {a} parked {p} body {b} workers {} out {}",
                inputs.len(),
                inputs.last(),
                w.workers.len(),
                w.s.core.messages.jobs_out()
            );
        }
        if let Err(e) = w.check() {
            return Err((e, inputs));
        }
    }
    let r = w.records.lock().unwrap();
    eprintln!("seed {seed}: {:?} simulated", Instant::now() - start);
    Ok((r.complete.len(), r.finals.values().map(HashSet::len).sum()))
}

/// Awaits `fut` without letting the runtime go idle: an idle runtime on a
/// paused clock moves the clock on to the next timer of whatever else runs
/// on it (a reload's resolver), and the simulation would not repeat.
async fn never_idle<T>(fut: impl std::future::Future<Output = T>) -> T {
    let mut fut = std::pin::pin!(fut);
    loop {
        tokio::select! {
            biased;
            out = &mut fut => return out,
            _ = tokio::task::yield_now() => {}
        }
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(start_paused = true)]
async fn random_interleavings_keep_every_invariant() {
    let steps = env_number("SIM_STEPS", 4_000);
    let seeds = env_number("SIM_SEEDS", 4) as u64;
    for seed in 0..seeds {
        let (error, inputs) = match run(seed, steps).await {
            Ok((complete, finals)) => {
                // Not vacuous: mail went through.
                assert!(complete > 0 && finals > 0, "seed {seed}: nothing delivered");
                eprintln!("seed {seed}: {steps} inputs, {complete} messages complete, {finals} recipients final");
                continue;
            }
            Err(failed) => failed,
        };
        // The shortest prefix of the same inputs that still fails (a
        // seed's inputs are the same however many are taken).
        let (mut low, mut high) = (1, inputs.len());
        while low < high {
            let mid = (low + high) / 2;
            match run(seed, mid).await {
                Err(_) => high = mid,
                Ok(_) => low = mid + 1,
            }
        }
        let shortest = run(seed, high)
            .await
            .err()
            .map(|(_, i)| i)
            .unwrap_or(inputs);
        panic!(
            "seed {seed} fails after {} inputs: {error}\nreproduce: SIM_SEEDS={} SIM_STEPS={}; inputs: {shortest:?}",
            shortest.len(),
            seed + 1,
            shortest.len()
        );
    }
}
