//! Compaction: live messages in an oldest segment that is mostly dead, or
//! that holds back dead segments behind it, are copied forward, so they no
//! longer pin their segment and every newer one; a backlog that is all live
//! is left alone; old body references keep working and recovery takes the
//! newest copy with every outcome recorded for it.

use super::*;

/// Stores and completes `n` messages of 8 KiB each; returns the most
/// segment files seen along the way.
fn churn(rt: &tokio::runtime::Runtime, spool: &Spool, dir: &Path, n: usize) -> usize {
    let mut most = 0;
    for _ in 0..n {
        let (env, _) = store(rt, spool, 1, vec![b'z'; 8 << 10]);
        spool.record_outcome(env.id, vec![0], true);
        most = most.max(count_segments(dir));
    }
    most
}

#[test]
fn one_deferred_message_does_not_pin_every_newer_segment() {
    let dir = temp_dir("pin-one");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let text = b"deferred for days\r\n".repeat(50);
    let (deferred, old_ref) = store(&rt, &spool, 3, text.clone());
    spool.record_outcome(deferred.id, vec![0], false);
    let most = churn(&rt, &spool, &dir, 200);
    assert!(most <= 4, "{most} segments at once (200 x 8 KiB stored)");
    assert!(spool.stats().compacted.load(Ordering::SeqCst) >= 1);
    assert!(!segment_path(&dir, old_ref.segment).exists(), "moved away");
    assert_eq!(spool.read_body(old_ref).unwrap(), text, "old reference");
    spool.record_outcome(deferred.id, vec![2], false);
    churn(&rt, &spool, &dir, 1);
    spool.shutdown();
    drop(spool);
    assert!(
        count_segments(&dir) <= 3,
        "{} segments",
        count_segments(&dir)
    );

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(ids(&recovered), vec![deferred.id], "exactly once");
    assert_eq!(spool.read_envelope(recovered[0].body).unwrap(), deferred);
    assert_eq!(recovered[0].done.to_vec(), vec![true, false, true]);
    assert_eq!(spool.read_body(recovered[0].body).unwrap(), text);
    spool.shutdown();
}

#[test]
fn a_mostly_live_segment_is_copied_only_once_most_of_it_is_done() {
    let dir = temp_dir("mostly-live");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let live: Vec<_> = (0..3)
        .map(|i| store(&rt, &spool, 1, vec![b'a' + i; 30_000]))
        .collect();
    assert!(live.iter().all(|(_, b)| b.segment == 1));
    // Newer mail that stays live: emptying segment 1 would free only it.
    for _ in 0..20 {
        store(&rt, &spool, 1, vec![b'z'; 8 << 10]);
    }
    assert_eq!(spool.stats().compacted.load(Ordering::SeqCst), 0);
    assert!(segment_path(&dir, 1).exists());

    for (env, _) in &live[..2] {
        spool.record_outcome(env.id, vec![0], true);
    }
    wait_until("the last live message is copied forward", || {
        !segment_path(&dir, 1).exists()
    });
    assert_eq!(spool.stats().compacted.load(Ordering::SeqCst), 1);
    assert_eq!(spool.read_body(live[2].1).unwrap(), vec![b'c'; 30_000]);
    spool.shutdown();
}

#[test]
fn recovery_takes_the_newest_copy_and_unites_every_outcome() {
    let dir = temp_dir("copies");
    std::fs::create_dir_all(&*dir).unwrap();
    let env = Envelope {
        id: 42,
        arrival: 1,
        sender: "a@b.example".into(),
        recipients: (0..4).map(|i| format!("r{i}@c.example")).collect(),
        flags: 0,
        dsn: None,
        orig_rcpt: Vec::new(),
        login: String::new(),
        filter: String::new(),
        xforward: String::new(),
    };
    // Segment 1: an outcome whose message record is further on (its
    // original segment was reclaimed after a copy).
    let mut one = Vec::new();
    let legacy = Salt::legacy();
    record::encode_outcome(&legacy, 42, &[2], &mut one);
    // Segment 2: a copy and an outcome; segment 3: a newer copy and another.
    let mut two = Vec::new();
    record::encode_message(&legacy, &env, b"old copy", &mut two).unwrap();
    record::encode_outcome(&legacy, 42, &[0], &mut two);
    let mut three = Vec::new();
    record::encode_message(&legacy, &env, b"new copy", &mut three).unwrap();
    record::encode_outcome(&legacy, 42, &[1], &mut three);
    for (n, bytes) in [(1, one), (2, two), (3, three)] {
        std::fs::write(segment_path(&dir, n), bytes).unwrap();
    }

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(ids(&recovered), vec![42], "exactly once");
    assert_eq!(recovered[0].done.to_vec(), vec![true, true, true, false]);
    assert_eq!(recovered[0].body.segment, 3);
    assert_eq!(spool.read_body(recovered[0].body).unwrap(), b"new copy");
    spool.shutdown();
}

#[test]
fn compaction_goes_on_in_bounded_steps_while_idle() {
    let dir = temp_dir("steps");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let deferred: Vec<_> = (0..10)
        .map(|i| store(&rt, &spool, 1, vec![b'0' + i; 1000]))
        .collect();
    let filler: Vec<_> = (0..7)
        .map(|_| store(&rt, &spool, 1, vec![b'f'; 8 << 10]))
        .collect();
    assert!(filler.iter().all(|(_, b)| b.segment == 1));
    store(&rt, &spool, 1, b"in segment 2".to_vec());
    // Only these outcomes arrive; each step copies at most 4 records, so
    // the other steps must run without further commands.
    for (env, _) in &filler {
        spool.record_outcome(env.id, vec![0], true);
    }
    wait_until("segment 1 is emptied and reclaimed", || {
        !segment_path(&dir, 1).exists()
    });
    assert_eq!(spool.stats().compacted.load(Ordering::SeqCst), 10);
    for (i, (_, body)) in deferred.iter().enumerate() {
        assert_eq!(spool.read_body(*body).unwrap(), vec![b'0' + i as u8; 1000]);
    }
    spool.shutdown();
}

#[test]
fn a_fully_live_oldest_segment_is_copied_when_dead_segments_follow_it() {
    let dir = temp_dir("live-then-dead");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    // A burst for a next hop that is down: segment 1 is all live.
    let live: Vec<_> = (0..3)
        .map(|i| store(&rt, &spool, 1, vec![b'a' + i; 30_000]))
        .collect();
    assert!(live.iter().all(|(_, b)| b.segment == 1));
    // Everything after it is delivered: segments 2, 3, … hold nothing
    // live. 60 x 8 KiB is about eight segments.
    let most = churn(&rt, &spool, &dir, 60);
    wait_until("segment 1 and the dead ones after it are reclaimed", || {
        (1..=3).all(|n| !segment_path(&dir, n).exists())
    });
    assert!(spool.stats().compacted.load(Ordering::SeqCst) >= 3);
    assert!(most <= 5, "{most} segments at once");
    for (i, (_, body)) in live.iter().enumerate() {
        let expect = vec![b'a' + i as u8; 30_000];
        assert_eq!(spool.read_body(*body).unwrap(), expect, "old reference");
    }
    spool.shutdown();
    drop(spool);

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    let expect: Vec<u64> = live.iter().map(|(e, _)| e.id).collect();
    assert_eq!(ids(&recovered), expect, "each exactly once");
    for (r, (env, _)) in recovered.iter().zip(&live) {
        assert_eq!(&spool.read_envelope(r.body).unwrap(), env);
    }
    spool.shutdown();
}

#[test]
fn a_backlog_that_is_all_live_is_never_copied() {
    let dir = temp_dir("all-live");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    // Workload Q in miniature: the next hop is down, nothing completes.
    let stored: Vec<_> = (0..40)
        .map(|_| store(&rt, &spool, 1, vec![b'q'; 8 << 10]))
        .collect();
    let newest = stored.last().unwrap().1.segment;
    assert!(newest >= 4, "{newest}");
    // Dead segments that do not follow the oldest directly do not count:
    // segment 2 is live, so copying segment 1 would free only itself.
    for (env, _) in stored.iter().filter(|(_, b)| b.segment >= 3) {
        spool.record_outcome(env.id, vec![0], true);
    }
    store(&rt, &spool, 1, vec![b'q'; 10]);
    spool.shutdown();
    assert_eq!(spool.stats().compacted.load(Ordering::SeqCst), 0);
    drop(spool);
    for n in 1..=newest {
        assert!(segment_path(&dir, n).exists(), "segment {n}");
    }
}

#[test]
fn marks_survive_reopen_and_compaction() {
    let dir = temp_dir("marks");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let (marked, old_ref) = store(&rt, &spool, 2, b"warned\r\n".to_vec());
    let (plain, _) = store(&rt, &spool, 1, b"not warned\r\n".to_vec());
    spool.record_marks(marked.id, 1);
    spool.record_marks(marked.id, 4);
    spool.record_outcome(plain.id, vec![0], true);
    churn(&rt, &spool, &dir, 200);
    assert!(!segment_path(&dir, old_ref.segment).exists(), "moved away");
    spool.shutdown();
    drop(spool);

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(ids(&recovered), vec![marked.id]);
    assert_eq!(recovered[0].marks, 5, "both marks, after the copy");
    // A restart compacts no further here; a new mark joins the old ones.
    spool.record_marks(marked.id, 2);
    spool.shutdown();
    drop(spool);
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(recovered[0].marks, 7);
    spool.shutdown();
}

/// The newest attempt is what a restart finds (count, times, reason);
/// compaction carries the count and times, and a spool without attempt
/// records (as an older build wrote) recovers none.
#[test]
fn the_newest_attempt_survives_reopen_and_compaction() {
    use crate::Attempt;
    let dir = temp_dir("attempts");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let (tried, old_ref) = store(&rt, &spool, 1, b"deferred\r\n".to_vec());
    let (never, _) = store(&rt, &spool, 1, b"never tried\r\n".to_vec());
    let attempt = |count, reason: &str| Attempt {
        count,
        at: 1_800_000_000 + u64::from(count),
        next: 1_800_000_600 + u64::from(count),
        reason: reason.into(),
    };
    spool.record_attempt(tried.id, attempt(1, "4.4.1 connect refused"));
    spool.record_attempt(tried.id, attempt(2, "4.2.0 try later"));
    spool.shutdown();
    drop(spool);

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    let by_id = |id| recovered.iter().find(|r| r.id == id).unwrap();
    assert_eq!(by_id(tried.id).attempt, Some(attempt(2, "4.2.0 try later")));
    assert_eq!(by_id(never.id).attempt, None, "no record: none");
    spool.record_outcome(never.id, vec![0], true);
    churn(&rt, &spool, &dir, 200);
    assert!(!segment_path(&dir, old_ref.segment).exists(), "moved away");
    spool.shutdown();
    drop(spool);

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(ids(&recovered), vec![tried.id]);
    let moved = recovered[0].attempt.clone().unwrap();
    assert_eq!(
        (moved.count, moved.at, moved.next),
        (2, 1_800_000_002, 1_800_000_602)
    );
    // A newer attempt replaces the copied one.
    spool.record_attempt(tried.id, attempt(3, "4.4.2 lost connection"));
    spool.shutdown();
    drop(spool);
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(
        recovered[0].attempt,
        Some(attempt(3, "4.4.2 lost connection"))
    );
    spool.shutdown();
}
