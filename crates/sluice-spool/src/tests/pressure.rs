//! Back-pressure: sessions beyond what the writer's queue holds wait their
//! turn without blocking a thread and without polling.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::*;
use crate::space::Disk;

/// Counts how often the future inside is polled.
struct CountPolls<F> {
    inner: Pin<Box<F>>,
    polls: u32,
}

impl<F: Future> Future for CountPolls<F> {
    type Output = (F::Output, u32);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polls += 1;
        let polls = self.polls;
        self.inner.as_mut().poll(cx).map(|out| (out, polls))
    }
}

fn counted<F: Future>(inner: F) -> CountPolls<F> {
    CountPolls {
        inner: Box::pin(inner),
        polls: 0,
    }
}

#[test]
fn many_more_concurrent_stores_than_the_queue_holds_all_complete_without_polling() {
    let dir = temp_dir("pressure");
    // Timers on: a store that slept and retried would work, only poll more.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let n = 25 * writer::QUEUE_CAPACITY;
    let polls = rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let spool = spool.clone();
                tokio::spawn(counted(async move {
                    let env = envelope(&spool, 1);
                    spool.store(env.clone(), Arc::new(vec![b'p'; 2000])).await?;
                    spool.record_outcome(env.id, vec![0], true);
                    Ok::<_, SpoolError>(())
                }))
            })
            .collect();
        let mut most = 0;
        for task in tasks {
            let (result, polls) = task.await.unwrap();
            result.unwrap();
            most = most.max(polls);
        }
        most
    });
    assert_eq!(spool.stats().messages.load(Ordering::SeqCst), n as u64);
    // Wait for a permit, wait for the reply, done: a few wake-ups each,
    // however long the queue ahead was.
    assert!(polls <= 4, "a store was polled {polls} times");
    spool.shutdown();
    drop(spool);
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert!(recovered.is_empty(), "every outcome landed");
    spool.shutdown();
}

/// A disk whose first free-space probe (the writer's, for its first batch
/// with a store) reports that it started and then waits to be released:
/// the writer is held mid-commit while the test fills its queue.
fn held_disk() -> (Disk, tokio::sync::oneshot::Receiver<()>, mpsc::Sender<()>) {
    let (started, started_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(Some((started, release)));
    let disk = Disk {
        free_bytes: Arc::new(move |_| {
            if let Some((started, release)) = gate.lock().unwrap().take() {
                started.send(()).unwrap();
                let _ = release.recv();
            }
            Ok(1 << 30)
        }),
        fail_writes: Arc::default(),
    };
    (disk, started_rx, release_tx)
}

#[test]
fn stores_that_find_the_queue_full_of_outcomes_wait_for_the_next_batch() {
    let dir = temp_dir("pressure-full");
    let (disk, started, release) = held_disk();
    let (spool, _, _) = Spool::open_with(config(&dir), disk).unwrap();
    let outcomes = writer::QUEUE_CAPACITY - writer::STORE_PERMITS + 4;
    let stores = writer::STORE_PERMITS - 1;
    let (done_tx, done) = mpsc::channel();
    let runner = {
        let spool = spool.clone();
        std::thread::spawn(move || {
            let rt = runtime(); // no timers: nothing may sleep and retry
            let most = rt.block_on(async {
                let spawn_store = |spool: Spool| {
                    tokio::spawn(counted(async move {
                        let env = envelope(&spool, 1);
                        spool.store(env, Arc::new(b"held\r\n".to_vec())).await
                    }))
                };
                let first = spawn_store(spool.clone());
                // The writer takes the first store and is held writing it.
                started.await.unwrap();
                // Outcomes (for no live message) fill more than their half.
                for _ in 0..outcomes {
                    spool.record_outcome(1, vec![0], true);
                }
                let rest: Vec<_> = (0..stores).map(|_| spawn_store(spool.clone())).collect();
                while spool.queue.store_permits.available_permits() > 0 {
                    tokio::task::yield_now().await; // every store has tried
                }
                release.send(()).unwrap();
                let mut most = 0;
                for task in std::iter::once(first).chain(rest) {
                    let (result, polls) = task.await.unwrap();
                    result.unwrap();
                    most = most.max(polls);
                }
                most
            });
            done_tx.send(most).unwrap();
        })
    };
    let most = done
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("stores that found the queue full never completed");
    runner.join().unwrap();
    assert!(most <= 5, "a store was polled {most} times");
    let stored = spool.stats().messages.load(Ordering::SeqCst);
    assert_eq!(stored, (stores + 1) as u64);
    spool.shutdown();
}

#[test]
fn a_store_after_the_writer_stopped_is_refused_not_left_waiting() {
    let dir = temp_dir("pressure-stopped");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    spool.shutdown();
    for _ in 0..writer::STORE_PERMITS + 1 {
        let env = envelope(&spool, 1);
        let result = rt.block_on(spool.store(env, Arc::new(b"late\r\n".to_vec())));
        assert!(matches!(result, Err(SpoolError::Stopped)), "{result:?}");
    }
}
