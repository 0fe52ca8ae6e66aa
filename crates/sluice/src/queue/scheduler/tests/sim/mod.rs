//! A deterministic simulation of the queue's core (issue 36): seeded
//! random interleavings of arrivals, outcomes of every kind (delivered,
//! deferred, bounced; connection failures and throttling), workers that
//! end and hand jobs back, answers (envelopes read back, bounces stored,
//! mail hosts looked up) arriving in any order, reloads, administrator
//! commands, cluster leases that grow and shrink, crashes with recovery
//! from the real spool, and time passing on a fake clock. The simulation
//! calls `QueueCore::handle` and plays the driver itself (`world.rs`),
//! checking after every step the invariants the modules state in their
//! heads (`model.rs`):
//! - a message is active or parked, never both; a bounce being stored
//!   belongs to an active message with nothing in flight;
//! - the jobs out equal what the messages count in flight; the cached
//!   body bytes equal the bodies kept; each destination's window is
//!   within its limit, its idle workers are live;
//! - the active queue plus the envelopes being read back stay within
//!   `queue.active_limit` (memory bounded by the configuration);
//! - nothing is delivered twice: within one epoch (between crashes) no
//!   recipient is recorded final twice and no message complete twice;
//!   across a crash a recipient is redone only if its final record was
//!   not durable; no worker is handed a recipient already final;
//! - nothing is lost: every message stored and not complete is in the
//!   queue, and recovery finds exactly the live messages with exactly
//!   their durable outcomes; a message recorded complete is gone;
//! - no destination starves: queued jobs have a worker, or wait for a
//!   dead mark, a lookup, a pacing slot or the cluster's allowance, and
//!   never beside an idle worker;
//! - under a cluster cap, no worker starts while the destination holds
//!   its allowance, and one looked at over it keeps no idle connection;
//! - every administrator's request is answered once.
//!
//! `SIM_STEPS` (default 2,500 per seed) and `SIM_SEEDS` (default 4, from
//! `SIM_FIRST`, default 0) make it run longer; `SIM_TRACE` prints each input and the queue's counts. A
//! failure prints the seed and the shortest prefix of its inputs that
//! still fails.
//!
//! Determinism: everything comes from the seed. The clock moves only by
//! an input, message IDs are the simulation's, answers are delivered when
//! and in the order the seed says, no task or thread decides anything
//! (the spool's writer only stores; what a crash keeps is the seed's
//! choice, `model.rs`), and the destinations' map has a fixed hasher in
//! tests, so a run repeats exactly (`a_seed_repeats_exactly`).

mod model;
mod world;

use world::World;

/// What a run did: its trace (each input and the counts after it), the
/// recipients recorded final, the messages complete, the crashes.
struct Run {
    trace: Vec<String>,
    finals: usize,
    completes: usize,
    crashes: usize,
}

/// Runs `steps` inputs from `seed`, or the failure and the inputs up to it.
fn run(seed: u64, steps: usize) -> Result<Run, (String, Vec<&'static str>)> {
    let mut w = World::new(seed);
    let mut inputs = Vec::new();
    let mut trace = Vec::new();
    let verbose = std::env::var_os("SIM_TRACE").is_some();
    for _ in 0..steps {
        inputs.push(w.step());
        let (a, p, _) = w.core.counts();
        let (workers, busy) = w.workers();
        let line = format!(
            "{} active {a} parked {p} workers {workers} busy {busy} out {} finals {} complete {}",
            inputs.last().expect("one"),
            w.core.messages.jobs_out(),
            w.records.finals,
            w.records.completes,
        );
        if verbose {
            eprintln!("{} {line}", inputs.len());
        }
        trace.push(line);
        let checked = match w.records.errors.first() {
            Some(e) => Err(e.clone()),
            None => w.core.check(&w.records),
        };
        if let Err(e) = checked {
            return Err((e, inputs));
        }
    }
    Ok(Run {
        trace,
        finals: w.records.finals,
        completes: w.records.completes,
        crashes: w.crashes,
    })
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn random_interleavings_keep_every_invariant() {
    let steps = env_number("SIM_STEPS", 2_500);
    let seeds = env_number("SIM_SEEDS", 4) as u64;
    let first = env_number("SIM_FIRST", 0) as u64;
    let started = std::time::Instant::now();
    for seed in first..first + seeds {
        let (error, inputs) = match run(seed, steps) {
            Ok(r) => {
                // Not vacuous: mail went through, and crashes happened.
                assert!(
                    r.completes > 0 && r.finals > 0,
                    "seed {seed}: nothing delivered"
                );
                eprintln!(
                    "seed {seed}: {steps} inputs, {} complete, {} final, {} crashes",
                    r.completes, r.finals, r.crashes
                );
                continue;
            }
            Err(failed) => failed,
        };
        // The shortest prefix of the same inputs that still fails (a
        // seed's inputs are the same however many are taken).
        let (mut low, mut high) = (1, inputs.len());
        while low < high {
            let mid = (low + high) / 2;
            match run(seed, mid) {
                Err(_) => high = mid,
                Ok(_) => low = mid + 1,
            }
        }
        let (error, shortest) = run(seed, high).err().unwrap_or((error, inputs));
        let last = &shortest[shortest.len().saturating_sub(30)..];
        panic!(
            "seed {seed} fails after {} inputs (no shorter prefix fails): {error}\n\
             reproduce: SIM_FIRST={seed} SIM_SEEDS=1 SIM_STEPS={} SIM_TRACE=1\n\
             the last inputs: {last:?}",
            shortest.len(),
            shortest.len()
        );
    }
    eprintln!("{seeds} seeds x {steps} inputs in {:?}", started.elapsed());
}

#[test]
fn a_seed_repeats_exactly() {
    let first = run(7, 1_500).map_err(|(e, _)| e).unwrap();
    let again = run(7, 1_500).map_err(|(e, _)| e).unwrap();
    assert!(first.crashes > 0, "the run crashed at least once");
    assert_eq!(first.trace, again.trace);
    assert_eq!(
        (first.finals, first.completes),
        (again.finals, again.completes)
    );
}
