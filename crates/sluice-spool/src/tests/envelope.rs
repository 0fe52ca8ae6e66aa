//! `Spool::read_envelope`: the scheduler brings messages that waited on
//! disk back into memory from their `BodyRef`, wherever they now are.

use super::*;

#[test]
fn read_envelope_returns_the_stored_envelope_wherever_the_message_is() {
    let dir = temp_dir("envelope");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let (kept, kept_ref) = store(&rt, &spool, 3, b"kept\r\n".to_vec());
    assert_eq!(spool.read_envelope(kept_ref).unwrap(), kept);
    // Enough traffic for compaction to move it out of segment 1.
    for _ in 0..12 {
        let (env, _) = store(&rt, &spool, 1, vec![b'z'; 8 << 10]);
        spool.record_outcome(env.id, vec![0], true);
    }
    wait_until("the message is moved", || !segment_path(&dir, 1).exists());
    assert_eq!(
        spool.read_envelope(kept_ref).unwrap(),
        kept,
        "old reference"
    );
    spool.shutdown();
    drop(spool);

    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    assert_eq!(spool.read_envelope(recovered[0].body).unwrap(), kept);
    spool.shutdown();
}

#[test]
fn read_envelope_checks_the_record() {
    let dir = temp_dir("envelope-crc");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let (_, body) = store(&rt, &spool, 1, b"to be damaged\r\n".to_vec());
    flip_byte(&segment_path(&dir, body.segment), body.offset as usize);
    let err = spool.read_envelope(body).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    spool.shutdown();
}
