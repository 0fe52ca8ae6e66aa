//! Outcome records and reclaiming: completion is idempotent, segments go
//! oldest first and never while they hold live mail, and outcome records
//! that outlive their message are harmless.

use super::*;

#[test]
fn a_second_complete_does_not_free_a_segment_with_live_mail() {
    let dir = temp_dir("double-complete");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    // Together they fill the 64 KiB segment: the third goes to the next.
    // The second is most of the segment, so compaction leaves it there.
    let first = store(&rt, &spool, 1, vec![b'a'; 20_000]);
    let second = store(&rt, &spool, 1, vec![b'b'; 46_000]);
    let third = store(&rt, &spool, 1, vec![b'c'; 10]);
    assert_eq!((first.1.segment, second.1.segment), (1, 1));
    assert_eq!(third.1.segment, 2);
    spool.record_outcome(first.0.id, vec![0], true);
    spool.record_outcome(first.0.id, vec![0], true);
    store(&rt, &spool, 1, vec![b'd'; 10]);
    spool.shutdown();
    drop(spool);

    assert!(segment_path(&dir, 1).exists(), "the second message pins it");
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(recovered.len(), 3);
    assert_eq!(spool.read_envelope(recovered[0].body).unwrap(), second.0);
    assert_eq!(
        spool.read_body(recovered[0].body).unwrap(),
        vec![b'b'; 46_000]
    );
    spool.shutdown();
}

#[test]
fn completed_segments_are_reclaimed_oldest_first() {
    let dir = temp_dir("reclaim");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let stored: Vec<_> = (0..40)
        .map(|_| store(&rt, &spool, 1, vec![b'z'; 8 << 10]))
        .collect();
    let newest = stored.last().unwrap().1.segment;
    assert!(newest >= 4, "{newest}");
    // Everything but segments 1 and 2, which stay all live (segment 1 is
    // not worth compacting: emptying it would free only itself).
    let (oldest, newer): (Vec<_>, Vec<_>) = stored.iter().partition(|(_, b)| b.segment <= 2);
    for (env, _) in &newer {
        spool.record_outcome(env.id, vec![0], true);
    }
    store(&rt, &spool, 1, vec![b'z'; 10]);
    spool.shutdown();
    drop(spool);
    for n in 1..=newest {
        assert!(segment_path(&dir, n).exists(), "segment {n} kept behind 1");
    }

    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(recovered.len(), oldest.len() + 1);
    for (env, _) in &oldest {
        spool.record_outcome(env.id, vec![0], true);
    }
    store(&rt, &spool, 1, vec![b'z'; 10]);
    spool.shutdown();
    drop(spool);
    assert!(count_segments(&dir) <= 2, "{}", count_segments(&dir));
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(recovered.len(), 2);
    spool.shutdown();
}

#[test]
fn outcome_records_outliving_their_message_are_harmless() {
    let dir = temp_dir("orphans");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    // Segment 1 holds only a message that completes; segment 2 holds its
    // outcome records and messages that stay live.
    let (gone, gone_ref) = store(&rt, &spool, 2, vec![b'g'; 66_000]);
    let (live, _) = store(&rt, &spool, 1, vec![b'l'; 100]);
    assert_eq!((gone_ref.segment, live.id > gone.id), (1, true));
    spool.record_outcome(gone.id, vec![0], false);
    store(&rt, &spool, 1, vec![b'x'; 10]);
    spool.record_outcome(gone.id, vec![1], true);
    store(&rt, &spool, 1, vec![b'x'; 10]);
    spool.shutdown();
    drop(spool);
    assert!(!segment_path(&dir, 1).exists(), "its message is reclaimed");
    assert!(records(&segment_path(&dir, 2)).len() >= 4);

    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(recovered.len(), 3);
    assert!(!ids(&recovered).contains(&gone.id));
    assert_eq!(report.messages_complete, 0, "no record of it is left");
    spool.shutdown();
}

#[test]
fn an_outcome_whose_message_is_gone_still_reserves_its_queue_id() {
    let dir = temp_dir("reused-id");
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    spool.shutdown();
    drop(spool);
    // Queue IDs issued before the clock stepped back are ahead of it now.
    let ahead = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
        + (1 << 40);
    let seg = segment_path(&dir, 1);
    let salt = salt_of(&seg);
    let mut bytes = Vec::new();
    // The message stored just before `ahead` still waits; `ahead` itself
    // completed and its record was reclaimed, its last outcome is left.
    let mut waiting = envelope_with_id(ahead - 1);
    waiting.recipients.push("r1@c.example".into());
    record::encode_message(&salt, &waiting, b"waiting\r\n", &mut bytes).unwrap();
    record::encode_outcome(&salt, ahead, &[0], &mut bytes);
    std::fs::write(&seg, bytes).unwrap();

    let rt = runtime();
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(ids(&recovered), vec![ahead - 1]);
    let (fresh, _) = store(&rt, &spool, 1, b"new\r\n".to_vec());
    assert!(fresh.id > ahead, "queue ID {} reissued", fresh.id);
    spool.shutdown();
    drop(spool);

    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    let new = recovered.iter().find(|r| r.id == fresh.id);
    let new = new.expect("the new message was taken for complete");
    assert_eq!(new.done.to_vec(), vec![false], "nobody delivered it");
    spool.shutdown();
}

fn envelope_with_id(id: u64) -> Envelope {
    Envelope {
        id,
        arrival: 1,
        sender: "a@b.example".into(),
        recipients: vec!["r0@c.example".into()],
        flags: 0,
        dsn: None,
        orig_rcpt: Vec::new(),
        login: String::new(),
        filter: String::new(),
        xforward: String::new(),
    }
}
