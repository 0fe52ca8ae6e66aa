//! A full disk: stores stop at the reserve, while outcome records (and so
//! completion and reclaiming) keep working, and failed outcome writes are
//! retried without waiting for new traffic.

use std::sync::atomic::{AtomicU32, AtomicU64};

use super::*;
use crate::space::Disk;

const MIB: u64 = 1 << 20;

/// A disk whose free space the test sets.
fn fake_disk(free: &Arc<AtomicU64>) -> Disk {
    let free = free.clone();
    Disk {
        free_bytes: Arc::new(move |_| Ok(free.load(Ordering::SeqCst))),
        fail_writes: Arc::new(AtomicU32::new(0)),
    }
}

#[test]
fn stores_stop_at_the_reserve_but_outcomes_still_land_and_free_space() {
    let dir = temp_dir("full");
    let rt = runtime();
    let free = Arc::new(AtomicU64::new(1 << 30));
    let mut cfg = config(&dir);
    cfg.reserve_bytes = 4 * MIB;
    let (spool, _, _) = Spool::open_with(cfg.clone(), fake_disk(&free)).unwrap();
    let stored: Vec<_> = (0..6)
        .map(|i| store(&rt, &spool, 1, vec![b'a' + i; 30_000]))
        .collect();
    assert_eq!(stored[5].1.segment, 2);

    // 10,000 bytes above the reserve: a 30,000-byte message does not fit.
    free.store(4 * MIB + 10_000, Ordering::SeqCst);
    let env = envelope(&spool, 1);
    let result = rt.block_on(spool.store(env, Arc::new(vec![b'x'; 30_000])));
    assert!(matches!(result, Err(SpoolError::Full)), "{result:?}");
    for (env, _) in &stored {
        spool.record_outcome(env.id, vec![0], true);
    }
    wait_until("both full segments are reclaimed", || {
        !segment_path(&dir, 1).exists() && !segment_path(&dir, 2).exists()
    });
    assert_eq!(spool.stats().outcomes.load(Ordering::SeqCst), 6);

    free.store(1 << 30, Ordering::SeqCst);
    let (last, _) = store(&rt, &spool, 1, b"room again\r\n".to_vec());
    spool.shutdown();
    drop(spool);
    let (spool, recovered, _) = Spool::open(cfg).unwrap();
    assert_eq!(ids(&recovered), vec![last.id]);
    spool.shutdown();
}

#[test]
fn a_reserve_larger_than_the_disk_refuses_every_store_but_records_outcomes() {
    let dir = temp_dir("reserve-max");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let (first, _) = store(&rt, &spool, 2, b"one\r\n".to_vec());
    let (second, _) = store(&rt, &spool, 2, b"two\r\n".to_vec());
    spool.shutdown();
    drop(spool);

    let mut cfg = config(&dir);
    cfg.reserve_bytes = u64::MAX;
    let (spool, recovered, _) = Spool::open(cfg).unwrap();
    assert_eq!(ids(&recovered), vec![first.id, second.id]);
    let env = envelope(&spool, 1);
    let result = rt.block_on(spool.store(env, Arc::new(b"three\r\n".to_vec())));
    assert!(matches!(result, Err(SpoolError::Full)), "{result:?}");
    spool.record_outcome(first.id, vec![0, 1], true);
    spool.record_outcome(second.id, vec![1], false);
    spool.shutdown();
    drop(spool);

    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(ids(&recovered), vec![second.id]);
    assert_eq!(recovered[0].done.to_vec(), vec![false, true]);
    spool.shutdown();
}

#[test]
fn outcomes_that_failed_to_write_are_retried_on_their_own() {
    let dir = temp_dir("retry");
    let rt = runtime();
    let free = Arc::new(AtomicU64::new(1 << 30));
    let disk = fake_disk(&free);
    let (spool, _, _) = Spool::open_with(config(&dir), disk.clone()).unwrap();
    let (env, _) = store(&rt, &spool, 1, b"body\r\n".to_vec());
    disk.fail_writes.store(1, Ordering::SeqCst);
    spool.record_outcome(env.id, vec![0], true);
    // No further command arrives to carry the retry.
    wait_until("the outcome is written", || {
        spool.stats().outcomes.load(Ordering::SeqCst) == 1
    });
    assert_eq!(
        disk.fail_writes.load(Ordering::SeqCst),
        0,
        "it did fail once"
    );
    spool.shutdown();
    drop(spool);
    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(recovered.is_empty());
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    spool.shutdown();
}

#[test]
fn a_write_that_fails_half_way_is_cut_off_and_later_records_stay_readable() {
    let dir = temp_dir("half-write");
    let rt = runtime();
    let free = Arc::new(AtomicU64::new(1 << 30));
    let disk = fake_disk(&free);
    let (spool, _, _) = Spool::open_with(config(&dir), disk.clone()).unwrap();
    let (first, _) = store(&rt, &spool, 1, b"one\r\n".to_vec());
    disk.fail_writes.store(1, Ordering::SeqCst);
    let env = envelope(&spool, 1);
    let result = rt.block_on(spool.store(env, Arc::new(vec![b'x'; 20_000])));
    assert!(matches!(result, Err(SpoolError::Full)), "{result:?}");
    let (third, _) = store(&rt, &spool, 1, b"three\r\n".to_vec());
    spool.shutdown();
    drop(spool);
    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert_eq!(ids(&recovered), vec![first.id, third.id]);
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(spool.read_body(recovered[1].body).unwrap(), b"three\r\n");
    spool.shutdown();
}
