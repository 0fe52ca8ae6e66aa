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

/// Recipients an alias expanded to keep the address they were given as,
/// through a reopen; a record without them (every record written before
/// they existed) still reads, with none.
#[test]
fn original_recipients_are_kept_and_old_records_read_without_them() {
    let dir = temp_dir("envelope-orig");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let mut expanded = envelope(&spool, 2);
    expanded.orig_rcpt = vec!["info@c.example".into(), String::new()];
    let body = Arc::new(b"expanded\r\n".to_vec());
    let at = rt.block_on(spool.store(expanded.clone(), body)).unwrap();
    let (plain, _) = store(&rt, &spool, 1, b"plain\r\n".to_vec());
    assert_eq!(spool.read_envelope(at).unwrap(), expanded);
    spool.shutdown();
    drop(spool);
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    let got: Vec<Envelope> = recovered
        .iter()
        .map(|m| spool.read_envelope(m.body).unwrap())
        .collect();
    assert_eq!(got, vec![expanded.clone(), plain.clone()]);
    assert!(plain.orig_rcpt.is_empty());
    spool.shutdown();
    // A list that does not match the recipients is refused, not stored.
    let mut odd = expanded;
    odd.orig_rcpt.pop();
    let mut out = Vec::new();
    let salt = Salt::legacy();
    let unfit = crate::record::encode_message(&salt, &odd, b"x", &mut out);
    assert_eq!(unfit, Err(Unfit::OrigMismatch));
    assert!(out.is_empty());
}

/// The bytes of a message record without original addresses are those
/// of the format before them: an older spool reads the same.
#[test]
fn a_record_without_original_addresses_keeps_the_old_layout() {
    let salt = Salt::legacy();
    let env = Envelope {
        id: 0x0102,
        arrival: 3,
        sender: "s@x".into(),
        recipients: vec!["r@y".into()],
        flags: 5,
        dsn: None,
        orig_rcpt: Vec::new(),
        login: String::new(),
        filter: String::new(),
        xforward: String::new(),
    };
    let mut out = Vec::new();
    crate::record::encode_message(&salt, &env, b"B", &mut out).unwrap();
    let mut old = Vec::new();
    old.extend_from_slice(&0x0102u64.to_le_bytes());
    old.extend_from_slice(&3u64.to_le_bytes());
    old.extend_from_slice(&5u32.to_le_bytes());
    old.extend_from_slice(&3u16.to_le_bytes());
    old.extend_from_slice(b"s@x");
    old.extend_from_slice(&1u32.to_le_bytes());
    old.extend_from_slice(&3u16.to_le_bytes());
    old.extend_from_slice(b"r@y");
    old.extend_from_slice(&1u64.to_le_bytes());
    old.extend_from_slice(b"B");
    assert_eq!(&out[crate::record::HEADER_LEN..], &old[..]);
}

/// The login that submitted a message is kept through a reopen, with the
/// other optional blocks; a record without one reads with none, and its
/// bytes are those of the format before logins.
#[test]
fn the_login_is_kept_and_records_without_one_keep_their_layout() {
    let dir = temp_dir("envelope-login");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let mut sent = envelope(&spool, 2);
    sent.login = "alice@example.org".into();
    sent.orig_rcpt = vec!["info@c.example".into(), String::new()];
    let at = rt
        .block_on(spool.store(sent.clone(), Arc::new(b"x\r\n".to_vec())))
        .unwrap();
    let (plain, _) = store(&rt, &spool, 1, b"plain\r\n".to_vec());
    assert_eq!(spool.read_envelope(at).unwrap(), sent);
    spool.shutdown();
    drop(spool);
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    let got: Vec<Envelope> = recovered
        .iter()
        .map(|m| spool.read_envelope(m.body).unwrap())
        .collect();
    assert_eq!(got, vec![sent.clone(), plain.clone()]);
    assert!(plain.login.is_empty());
    spool.shutdown();
    // The login's flag bit is the spool's: the daemon's bits read back
    // without it.
    assert_eq!(sent.flags & crate::SPOOL_FLAGS, 0);
}

/// The content filter a message goes to, and the XFORWARD attributes it
/// is sent, are kept through a reopen (so a restart still sends it to
/// the filter, as Postfix's queue file keeps `content_filter`); a record
/// without them reads with none, its bytes those of the format before.
#[test]
fn the_filter_is_kept_and_records_without_one_keep_their_layout() {
    let dir = temp_dir("envelope-filter");
    let rt = runtime();
    let (spool, _, _) = Spool::open(config(&dir)).unwrap();
    let mut sent = envelope(&spool, 2);
    sent.login = "alice@example.org".into();
    sent.filter = "smtp:[127.0.0.1]:10024".into();
    sent.xforward = "NAME=[UNAVAILABLE] ADDR=192.0.2.1 HELO=client.example".into();
    let at = rt
        .block_on(spool.store(sent.clone(), Arc::new(b"x\r\n".to_vec())))
        .unwrap();
    let (plain, _) = store(&rt, &spool, 1, b"plain\r\n".to_vec());
    assert_eq!(spool.read_envelope(at).unwrap(), sent);
    spool.shutdown();
    drop(spool);
    let (spool, recovered, _) = Spool::open(config(&dir)).unwrap();
    let got: Vec<Envelope> = recovered
        .iter()
        .map(|m| spool.read_envelope(m.body).unwrap())
        .collect();
    assert_eq!(got, vec![sent.clone(), plain.clone()]);
    assert!(plain.filter.is_empty());
    spool.shutdown();
    assert_eq!(sent.flags & crate::SPOOL_FLAGS, 0);
    // Without a filter, the bytes are those of a record without one.
    let salt = Salt::legacy();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let mut bare = sent.clone();
    bare.filter.clear();
    bare.xforward.clear();
    crate::record::encode_message(&salt, &bare, b"B", &mut without).unwrap();
    crate::record::encode_message(&salt, &sent, b"B", &mut with).unwrap();
    let tail = 2 + sent.filter.len() + 2 + sent.xforward.len();
    assert_eq!(with.len(), without.len() + tail);
}
