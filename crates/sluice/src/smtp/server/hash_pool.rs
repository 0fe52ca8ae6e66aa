//! The password-hashing pool: every AUTH password check (argon2 or
//! SHA-512-crypt) runs on one of a few threads of its own, one per core,
//! fed through a bounded queue.
//!
//! Why not tokio's blocking pool: it grows to hundreds of threads, and an
//! argon2 check holds ~19 MiB while it runs, so a flood of AUTH attempts
//! from many clients took the daemon to gigabytes (security review H3).
//! Here at most one check per core runs and at most [`QUEUE_PER_THREAD`]
//! per core wait; one more is refused at once ([`Busy`], answered
//! `454 4.7.0`), so hashing memory is bounded by the core count whatever
//! the number of sessions. Sessions waiting for a slot hold no memory
//! beyond their own.
//!
//! Trust: the password is hostile (any bytes, any length up to the
//! command line limit); the hash comes from the administrator's table.
//! Invariant: every job queued gets exactly one answer (a dropped answer
//! channel is a failed check, never a success).

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

use tokio::sync::oneshot;

/// Checks waiting per hashing thread before more are refused.
pub const QUEUE_PER_THREAD: usize = 16;

/// The pool is full: try again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("password checks are queued to their limit")]
pub struct Busy;

struct Job {
    hash: String,
    password: String,
    answer: oneshot::Sender<bool>,
}

fn pool() -> &'static SyncSender<Job> {
    static POOL: OnceLock<SyncSender<Job>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let (tx, rx) = sync_channel::<Job>(threads * QUEUE_PER_THREAD);
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        for n in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("sluice-hash-{n}"))
                .spawn(move || loop {
                    let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    let ok = super::auth::check_hash(&job.hash, &job.password);
                    let _ = job.answer.send(ok);
                })
                .expect("spawn a hashing thread");
        }
        tx
    })
}

/// Checks `password` against `hash` on the pool; `Busy` at once when the
/// queue is full.
pub async fn check(hash: String, password: String) -> Result<bool, Busy> {
    let (answer, answered) = oneshot::channel();
    match pool().try_send(Job {
        hash,
        password,
        answer,
    }) {
        Ok(()) => Ok(answered.await.unwrap_or(false)),
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => Err(Busy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn checks_are_answered_and_a_full_queue_is_refused_at_once() {
        let hash = super::super::auth::hash_password("right").unwrap();
        assert_eq!(check(hash.clone(), "right".into()).await, Ok(true));
        assert_eq!(check(hash.clone(), "wrong".into()).await, Ok(false));
        // Far more checks at once than the pool holds: some are refused,
        // none waits unbounded, every accepted one is answered.
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let many = threads * QUEUE_PER_THREAD * 4;
        let mut all = tokio::task::JoinSet::new();
        for _ in 0..many {
            all.spawn(check(hash.clone(), "wrong".into()));
        }
        let mut results = Vec::new();
        while let Some(r) = all.join_next().await {
            results.push(r.unwrap());
        }
        assert!(results.contains(&Err(Busy)), "a full queue refuses");
        assert!(results.contains(&Ok(false)), "queued checks are answered");
        assert!(!results.contains(&Ok(true)));
    }
}
