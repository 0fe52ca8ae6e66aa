//! Limits of the record format are refused with `SpoolError::Invalid`
//! before anything is written, never wrapped or truncated.

use super::*;

fn segment_len(dir: &Path) -> u64 {
    std::fs::metadata(segment_path(dir, 1)).unwrap().len()
}

#[test]
fn more_recipients_than_an_outcome_index_can_name_are_refused() {
    let dir = temp_dir("max-rcpts");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let too_many = envelope(&spool, MAX_RECIPIENTS + 1);
    let result = rt.block_on(spool.store(too_many, Arc::new(b"x\r\n".to_vec())));
    assert!(matches!(result, Err(SpoolError::Invalid(_))), "{result:?}");
    assert_eq!(segment_len(&dir), 0, "nothing written");

    let most = envelope(&spool, MAX_RECIPIENTS);
    rt.block_on(spool.store(most.clone(), Arc::new(b"x\r\n".to_vec())))
        .unwrap();
    let last = (MAX_RECIPIENTS - 1) as u16;
    spool.record_outcome(most.id, vec![last], false);
    spool.shutdown();
    drop(spool);

    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(ids(&recovered), vec![most.id]);
    assert_eq!(spool.read_envelope(recovered[0].body).unwrap(), most);
    assert!(
        recovered[0].done.to_vec()[MAX_RECIPIENTS - 1],
        "the last index is u16::MAX"
    );
    assert_eq!(recovered[0].done.indices(true).len(), 1);
    spool.shutdown();
}

#[test]
fn addresses_longer_than_65535_bytes_are_refused_not_truncated() {
    let dir = temp_dir("long-address");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let long = format!("{}@c.example", "é".repeat(40_000));
    let mut bad_sender = envelope(&spool, 1);
    bad_sender.sender = long.clone();
    let mut bad_rcpt = envelope(&spool, 2);
    bad_rcpt.recipients[1] = long;
    for env in [bad_sender, bad_rcpt] {
        let result = rt.block_on(spool.store(env, Arc::new(b"x\r\n".to_vec())));
        assert!(matches!(result, Err(SpoolError::Invalid(_))), "{result:?}");
    }
    assert_eq!(segment_len(&dir), 0, "nothing written");

    let mut longest = envelope(&spool, 1);
    longest.recipients[0] = "x".repeat(u16::MAX as usize);
    rt.block_on(spool.store(longest.clone(), Arc::new(b"x\r\n".to_vec())))
        .unwrap();
    spool.shutdown();
    drop(spool);
    let (spool, recovered, report) = Spool::open(config(&dir)).unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(recovered.len(), 1);
    assert_eq!(spool.read_envelope(recovered[0].body).unwrap(), longest);
    spool.shutdown();
}
