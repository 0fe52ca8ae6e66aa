//! The fuzz harness shared by every crate's `fuzz` test module (the other
//! crates include this file with `#[path]`): runs a fuzz target's
//! properties with proptest, either once (a normal `cargo test`) or over
//! and over until a time budget runs out (a long fuzzing run).
//!
//! * Normal mode: each property runs `PROPTEST_CASES` cases (default 256)
//!   from a fixed seed, so `cargo test` stays fast and reproducible.
//! * Budget mode (`SLUICE_FUZZ_SECS=600`): the properties take turns in
//!   batches of `PROPTEST_CASES` cases, each batch from a fresh seed, until
//!   the time is up; progress goes to stderr every 10 s and a watchdog
//!   aborts the run if one case takes more than 60 s (a hang).
//!
//! Either way the last line is `fuzz-summary target=… cases=… secs=…
//! rate=…/s result=…`, which `scripts/fuzz` collects. A failure (or hang)
//! names its property and the command that replays its batch, in normal
//! mode: `PROPTEST_RNG_SEED=<seed> … cargo test -p <crate> --lib
//! fuzz_<target>`; proptest also prints the shrunk, minimal failing input.
//! Each crate's test for target `<target>` is named `fuzz_<target>`.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseResult, TestRunner};

/// The seed of normal mode, when `PROPTEST_RNG_SEED` does not give one.
const FIXED_SEED: u64 = 0x5154_4943_455f_4655; // "SLUICE_FU"
/// How long one case may run before the watchdog calls it a hang.
const HANG: Duration = Duration::from_secs(60);
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

type RunFn = dyn Fn(&Config, &AtomicU64) -> Result<(), String>;

/// One property of a target: a strategy and a test, type-erased.
pub struct Prop {
    name: &'static str,
    run: Box<RunFn>,
}

/// Bytes that print as a byte string (`b"MAIL\r\n"`), not as a list of
/// numbers one a line, so a failing input can be read and pasted.
#[derive(Clone, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\" ({} bytes)", self.0.escape_ascii(), self.0.len())
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// A property: `test` must pass for every value `strategy` makes.
pub fn prop<S>(
    name: &'static str,
    strategy: S,
    test: impl Fn(S::Value) -> TestCaseResult + 'static,
) -> Prop
where
    S: Strategy + 'static,
    S::Value: Debug,
{
    Prop {
        name,
        run: Box::new(move |config, cases| {
            let mut runner = TestRunner::new(config.clone());
            runner
                .run(&strategy, |value| {
                    cases.fetch_add(1, Ordering::Relaxed);
                    test(value)
                })
                .map_err(|e| e.to_string())
        }),
    }
}

/// Runs `props` as the fuzz target `target`; panics (fails the test) on
/// the first property that fails.
pub fn run_target(target: &str, props: Vec<Prop>) {
    let budget = std::env::var("SLUICE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map(Duration::from_secs_f64);
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    let base_seed = match (config.rng_seed, budget) {
        (RngSeed::Fixed(seed), _) => seed,
        (RngSeed::Random, None) => FIXED_SEED,
        (RngSeed::Random, Some(_)) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    let cases = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let batch_now = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let watchdog = budget.map(|_| {
        let watchdog = Watchdog {
            target: target.to_string(),
            props: props.iter().map(|p| p.name).collect(),
            base_seed,
            cases: cases.clone(),
            batch: batch_now.clone(),
            done: done.clone(),
            start,
        };
        std::thread::spawn(move || watchdog.watch())
    });
    if let Some(budget) = budget {
        eprintln!(
            "fuzz {target}: {} properties, {} cases a batch, for {:.0} s, base seed {base_seed}",
            props.len(),
            config.cases,
            budget.as_secs_f64()
        );
    }

    let mut failure = None;
    let mut batch: u64 = 0;
    loop {
        let prop = &props[(batch % props.len() as u64) as usize];
        // In normal mode every property runs once, from the same seed.
        let seed = match budget {
            Some(_) => base_seed.wrapping_add(batch),
            None => base_seed,
        };
        config.rng_seed = RngSeed::Fixed(seed);
        batch_now.store(batch, Ordering::Relaxed);
        if let Err(why) = (prop.run)(&config, &cases) {
            failure = Some(format!(
                "property {} failed (replay: {}): {why}",
                prop.name,
                replay(target, seed, config.cases)
            ));
            break;
        }
        batch += 1;
        let more = match budget {
            Some(budget) => start.elapsed() < budget,
            None => batch < props.len() as u64,
        };
        if !more {
            break;
        }
    }
    done.store(true, Ordering::Relaxed);
    if let Some(w) = watchdog {
        let _ = w.join();
    }

    let secs = start.elapsed().as_secs_f64();
    let n = cases.load(Ordering::Relaxed);
    let result = if failure.is_some() { "FAIL" } else { "ok" };
    eprintln!(
        "fuzz-summary target={target} cases={n} secs={secs:.1} rate={:.0}/s result={result}",
        n as f64 / secs.max(1e-9)
    );
    if let Some(why) = failure {
        panic!("fuzz target {target}: {why}");
    }
}

/// The command that runs a batch again: normal mode, from its seed.
fn replay(target: &str, seed: u64, cases: u32) -> String {
    let cases = match cases {
        0 => String::new(),
        n => format!("PROPTEST_CASES={n} "),
    };
    format!(
        "PROPTEST_RNG_SEED={seed} {cases}cargo test -p {} --lib fuzz_{target}",
        env!("CARGO_PKG_NAME")
    )
}

/// Budget mode's watchdog: prints progress every [`PROGRESS_EVERY`], and
/// aborts the process if no new case starts for [`HANG`], naming the
/// property and the seed that replays it: a decoder that loops must not
/// pass for a slow one.
struct Watchdog {
    target: String,
    props: Vec<&'static str>,
    base_seed: u64,
    cases: Arc<AtomicU64>,
    batch: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    start: Instant,
}

impl Watchdog {
    fn watch(self) {
        let target = &self.target;
        let (mut last, mut since, mut shown) = (0, Instant::now(), Instant::now());
        while !self.done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let now = self.cases.load(Ordering::Relaxed);
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() > HANG {
                let batch = self.batch.load(Ordering::Relaxed);
                let prop = self.props[(batch % self.props.len() as u64) as usize];
                eprintln!(
                    "fuzz-summary target={target} cases={now} secs={:.1} rate=0/s result=HANG",
                    self.start.elapsed().as_secs_f64()
                );
                eprintln!(
                    "fuzz {target}: no new case for {HANG:?}: property {prop} hangs (replay: {})",
                    replay(target, self.base_seed.wrapping_add(batch), 0)
                );
                std::process::abort();
            }
            if shown.elapsed() >= PROGRESS_EVERY {
                shown = Instant::now();
                eprintln!(
                    "fuzz {target}: {now} cases in {:.0} s",
                    self.start.elapsed().as_secs_f64()
                );
            }
        }
    }
}
