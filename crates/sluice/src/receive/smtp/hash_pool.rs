//! The password-hashing pool: every AUTH password check (argon2 or
//! SHA-512-crypt) runs on one of a few threads of its own, one per core,
//! fed through two bounded queues.
//!
//! Why not tokio's blocking pool: it grows to hundreds of threads, and an
//! argon2 check holds ~19 MiB while it runs, so a flood of AUTH attempts
//! from many clients took the daemon to gigabytes (security review H3).
//! Here at most one check per core runs, each thread reusing one argon2
//! working buffer of its own (`password::check_hash_in`), so hashing memory is
//! bounded by the core count whatever the number of sessions.
//!
//! Two lanes: checks for clients in `mynetworks` ([`Lane::Trusted`]) are
//! taken before any stranger's, so a flood from outside cannot keep the
//! site's own users out. Each lane holds at most [`QUEUE_PER_THREAD`] per
//! core waiting; one more is refused at once ([`Busy`], answered
//! `454 4.7.0` and counted against the client like a failure). Sessions
//! waiting for a slot hold no memory beyond their own.
//!
//! Trust: the password is hostile (any bytes, any length up to the
//! command line limit); the hash comes from the administrator's table.
//! Invariant: every job queued gets exactly one answer (a dropped answer
//! channel is a failed check, never a success).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock};

use tokio::sync::oneshot;

/// Checks waiting per hashing thread, per lane, before more are refused.
pub const QUEUE_PER_THREAD: usize = 16;

/// The pool is full: try again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("password checks are queued to their limit")]
pub struct Busy;

/// Whose check it is: the site's own clients go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A client in `mynetworks`.
    Trusted,
    /// Anyone else.
    Stranger,
}

struct Job {
    hash: String,
    password: String,
    answer: oneshot::Sender<bool>,
}

#[derive(Default)]
struct Queues {
    trusted: VecDeque<Job>,
    strangers: VecDeque<Job>,
}

struct Pool {
    queues: Mutex<Queues>,
    ready: Condvar,
    limit: usize,
}

impl Pool {
    fn push(&self, lane: Lane, job: Job) -> Result<(), Busy> {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let queue = match lane {
            Lane::Trusted => &mut q.trusted,
            Lane::Stranger => &mut q.strangers,
        };
        if queue.len() >= self.limit {
            return Err(Busy);
        }
        queue.push_back(job);
        drop(q);
        self.ready.notify_one();
        Ok(())
    }

    fn take(&self) -> Job {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(job) = q.trusted.pop_front().or_else(|| q.strangers.pop_front()) {
                return job;
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A hashing thread: one argon2 buffer for its whole life.
    fn work(&self) {
        let mut blocks = Vec::new();
        loop {
            let job = self.take();
            let ok = super::password::check_hash_in(&job.hash, &job.password, &mut blocks);
            let _ = job.answer.send(ok);
        }
    }
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            queues: Mutex::new(Queues::default()),
            ready: Condvar::new(),
            limit: threads * QUEUE_PER_THREAD,
        }));
        for n in 0..threads {
            std::thread::Builder::new()
                .name(format!("sluice-hash-{n}"))
                .spawn(move || pool.work())
                .expect("spawn a hashing thread");
        }
        pool
    })
}

/// Checks `password` against `hash` on the pool; `Busy` at once when
/// `lane`'s queue is full.
pub async fn check(lane: Lane, hash: String, password: String) -> Result<bool, Busy> {
    let (answer, answered) = oneshot::channel();
    pool().push(
        lane,
        Job {
            hash,
            password,
            answer,
        },
    )?;
    Ok(answered.await.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn checks_are_answered_and_a_full_queue_is_refused_at_once() {
        let hash = super::super::password::hash_password("right").unwrap();
        assert_eq!(
            check(Lane::Stranger, hash.clone(), "right".into()).await,
            Ok(true)
        );
        assert_eq!(
            check(Lane::Stranger, hash.clone(), "wrong".into()).await,
            Ok(false)
        );
        // Far more checks at once than the pool holds: some are refused,
        // none waits unbounded, every accepted one is answered; a trusted
        // client's check queued behind the flood still gets its answer.
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let many = threads * QUEUE_PER_THREAD * 4;
        let mut all = tokio::task::JoinSet::new();
        for _ in 0..many {
            all.spawn(check(Lane::Stranger, hash.clone(), "wrong".into()));
        }
        tokio::task::yield_now().await;
        let trusted = tokio::spawn(check(Lane::Trusted, hash.clone(), "right".into()));
        let mut results = Vec::new();
        let mut answered_before_trusted = 0;
        while let Some(r) = all.join_next().await {
            let r = r.unwrap();
            if !trusted.is_finished() && r == Ok(false) {
                answered_before_trusted += 1;
            }
            results.push(r);
        }
        assert_eq!(
            trusted.await.unwrap(),
            Ok(true),
            "the trusted lane is served"
        );
        assert!(results.contains(&Err(Busy)), "a full queue refuses");
        assert!(results.contains(&Ok(false)), "queued checks are answered");
        assert!(!results.contains(&Ok(true)));
        // The flood's queue was full when the trusted check came; it was
        // taken before the queue drained (at most the checks already
        // running, one per thread, plus one race per thread, came first).
        assert!(
            answered_before_trusted < threads * QUEUE_PER_THREAD,
            "trusted waited behind {answered_before_trusted} stranger checks"
        );
    }
}
