//! Outcome records: completion is idempotent, and the live accounting that
//! decides reclaiming never frees a segment that still holds live mail.

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
    spool.record_outcome(first.0.id, first.1, vec![0], true);
    spool.record_outcome(first.0.id, first.1, vec![0], true);
    store(&rt, &spool, 1, vec![b'd'; 10]);
    spool.shutdown();
    drop(spool);

    assert!(segment_path(&dir, 1).exists(), "the second message pins it");
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(recovered.len(), 3);
    assert_eq!(recovered[0].envelope, second.0);
    assert_eq!(
        spool.read_body(recovered[0].body).unwrap(),
        vec![b'b'; 46_000]
    );
    spool.shutdown();
}
